"""Boot a Gym >= 0.5 resources server with its own in-process MCP endpoint (``expose_tools_over_mcp``).

Run by the benchmark under the nemo-gym 0.7.0 interpreter (``.gym-env-0.7.0``, built by
``make gym-env NEMO_GYM_VERSION=0.7.0``), never imported by the bridge. It reuses ``bridge/upstream/boot.py`` (server resolution, socket binding, port file) and
differs only in building the app the way Gym's own ``run_webserver`` does when the config sets
``expose_tools_over_mcp: true``: ``setup_webserver()``, then ``maybe_auto_expose(server, app)`` (mounts
``/mcp`` and wraps ``/seed_session`` to hand out the session token), then liveness, the exception
middleware and the cancellation middleware.

nemo-gym 0.7.0 declares Python >= 3.13.14; this machine's newest is 3.13.0, on which
``scripts/setup-gym-env.sh`` installs it as if it were 3.13.14 (docs/gym-versions.md).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Any

BOOT = Path(__file__).resolve().parent.parent / "bridge" / "upstream" / "boot.py"


def _boot_module() -> Any:
    spec = importlib.util.spec_from_file_location("upstream_boot", BOOT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there while being defined
    spec.loader.exec_module(module)
    return module


def build_exposed_app(boot: Any, cls: Any, name: str, config: dict[str, Any], host: str, port: int) -> Any:
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.mcp_auto_exposure import maybe_auto_expose
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    config_cls = cls.model_fields["config"].annotation
    fields = {k: v for k, v in config.items() if k not in {"host", "port"}}
    fields.update(name=name, host=host, port=port, entrypoint=fields.get("entrypoint", "app.py"))
    fields["expose_tools_over_mcp"] = True
    server_config = config_cls.model_validate(fields)
    client = ServerClient(
        head_server_config=BaseServerConfig(host=host, port=boot.HEAD_SERVER_PORT),
        global_config_dict=OmegaConf.create({}),
    )
    server = cls(config=server_config, server_client=client)
    app = server.setup_webserver()
    if maybe_auto_expose(server, app) is None:
        raise SystemExit("gym07_boot: expose_tools_over_mcp did not take effect")
    for hook in ("setup_liveness", "setup_exception_middleware", "setup_cancellation_middleware"):
        if hasattr(server, hook):
            getattr(server, hook)(app)
    return app


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="example_session_state_mgmt")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args()
    boot = _boot_module()
    import uvicorn

    resolved = boot.resolve(args.server)
    cls, name, config = resolved.cls, resolved.name, resolved.config
    sock = boot.bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    app = build_exposed_app(boot, cls, name, config, host, port)
    boot.write_port_file(args.port_file, boot.boot_info(cls, name, host, port))
    print(f"gym07_boot: serving {name} with /mcp on {host}:{port}", file=sys.stderr, flush=True)
    config_ = uvicorn.Config(app, log_level="warning", timeout_keep_alive=75, timeout_graceful_shutdown=2)
    uvicorn.Server(config_).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
