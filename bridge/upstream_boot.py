"""Boot one NeMo Gym resources server inside the Gym environment's interpreter.

This file is run as a script by the Gym environment's Python (>= 3.12), never imported by the
bridge: it may import only the standard library and what nemo-gym brings. The bridge's
``upstream`` module spawns it as

    GYM_PYTHON upstream_boot.py --server SPEC --host HOST --port 0 --port-file FILE

SPEC is a bundled environment name (``example_session_state_mgmt``), ``module:Class``, or a Gym
config YAML with an optional instance name (``path/to/config.yaml`` or ``path.yaml:instance``).
The server is constructed directly (config class, ``ServerClient`` without a head server,
``setup_webserver``), the socket is bound here on HOST:PORT (0 picks a free port), and the port
file receives one JSON object (port, host, server_name, class, gym_version, pid) before uvicorn
serves on that socket. Errors are printed as one line prefixed ``upstream_boot:`` and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import re
import signal
import socket
import sys
from pathlib import Path
from typing import Any

HEAD_SERVER_PORT = 11000  # Gym's default head-server port; nothing is asked of it here.


class BootError(Exception):
    pass


def _resources_servers_root() -> Path:
    import resources_servers

    return Path(next(iter(resources_servers.__path__)))


def _server_class(module_name: str, class_name: str | None) -> Any:
    from nemo_gym.base_resources_server import SimpleResourcesServer

    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise BootError(f"cannot import {module_name}: {exc}") from exc
    if class_name:
        cls = getattr(module, class_name, None)
        if cls is None:
            raise BootError(f"{module_name} has no attribute {class_name}")
        return cls
    candidates = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, SimpleResourcesServer)
        and obj.__module__ == module.__name__
    ]
    if len(candidates) != 1:
        names = ", ".join(c.__name__ for c in candidates) or "none"
        raise BootError(f"expected one resources server class in {module_name}, found {names}")
    return candidates[0]


def _instance_from_yaml(path: Path, instance: str | None) -> tuple[str, str, dict[str, Any]]:
    """(instance name, env name, server config dict) from a Gym config YAML."""
    from omegaconf import OmegaConf

    if not path.is_file():
        raise BootError(f"config file {path} does not exist")
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(data, dict):
        raise BootError(f"{path} is not a mapping of instances")
    names = [instance] if instance else list(data)
    for name in names:
        block = data.get(name)
        if isinstance(block, dict) and isinstance(block.get("resources_servers"), dict):
            (env, config), *_ = block["resources_servers"].items()
            return str(name), str(env), dict(config)
    if instance:
        known = ", ".join(str(k) for k in data) or "none"
        raise BootError(f"{path} has no resources_servers instance named {instance} (instances: {known})")
    raise BootError(f"{path} defines no resources_servers instance")


def resolve(spec: str) -> tuple[Any, str, dict[str, Any]]:
    """(server class, instance name, config fields) for a server spec."""
    yaml_spec = re.fullmatch(r"(.+\.ya?ml)(?::(.+))?", spec)
    if yaml_spec:
        name, env, config = _instance_from_yaml(Path(yaml_spec[1]), yaml_spec[2])
        entrypoint = str(config.get("entrypoint", "app.py"))
        module = f"resources_servers.{env}.{entrypoint.removesuffix('.py').replace('/', '.')}"
        return _server_class(module, None), name, config
    if ":" in spec:
        module, _, class_name = spec.partition(":")
        return _server_class(module, class_name), module.rsplit(".", 1)[-1], {}
    env_dir = _resources_servers_root() / spec
    if not (env_dir / "app.py").is_file():
        raise BootError(f"no bundled Gym environment named {spec!r} (looked for {env_dir}/app.py)")
    shipped = env_dir / "configs" / f"{spec}.yaml"
    defaults = _instance_from_yaml(shipped, None)[2] if shipped.is_file() else {}
    return _server_class(f"resources_servers.{spec}.app", None), spec, defaults


def build_app(cls: Any, name: str, config: dict[str, Any], host: str, port: int) -> Any:
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    config_cls = cls.model_fields["config"].annotation
    fields = {k: v for k, v in config.items() if k not in {"host", "port"}}
    fields.update(name=name, host=host, port=port, entrypoint=fields.get("entrypoint", "app.py"))
    try:
        server_config = config_cls.model_validate(fields)
    except Exception as exc:
        raise BootError(f"invalid config for {cls.__name__}: {exc}".replace("\n", "; ")) from exc
    client = ServerClient(
        head_server_config=BaseServerConfig(host=host, port=HEAD_SERVER_PORT),
        global_config_dict=OmegaConf.create({}),
    )
    server = cls(config=server_config, server_client=client)
    app = server.setup_webserver()
    if hasattr(server, "setup_liveness"):
        server.setup_liveness(app)
    if hasattr(server, "setup_exception_middleware"):
        server.setup_exception_middleware(app)
    return app


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every keep-alive response waits ~40 ms (Nagle + delayed ACK) between headers and body
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise BootError(f"cannot bind {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def boot_info(cls: Any, name: str, host: str, port: int) -> dict[str, Any]:
    """What the port file tells the bridge: where the server bound and what it is."""
    return {
        "host": host,
        "port": port,
        "server_name": name,
        "class": f"{cls.__module__}:{cls.__name__}",
        "gym_version": importlib.metadata.version("nemo-gym"),
        "pid": os.getpid(),
    }


def write_port_file(path: Path, info: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)


def die_with_parent(parent_pid: int) -> None:
    """Linux: get SIGTERM when the bridge dies, even by SIGKILL, so no upstream is orphaned."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve one NeMo Gym resources server.")
    parser.add_argument("--server", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args(argv)
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    print(
        f"upstream_boot: loading {args.server} with nemo-gym from {sys.prefix}", file=sys.stderr, flush=True
    )
    try:
        import uvicorn

        cls, name, config = resolve(args.server)
        sock = bind(args.host, args.port)
        host, port = sock.getsockname()[:2]
        app = build_app(cls, name, config, host, port)
    except BootError as exc:
        print(f"upstream_boot: {exc}", file=sys.stderr, flush=True)
        return 2
    info = boot_info(cls, name, host, port)
    if args.port_file:
        write_port_file(args.port_file, info)
    print(f"upstream_boot: serving {info['class']} as {name} on {host}:{port}", file=sys.stderr, flush=True)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level=args.log_level, timeout_keep_alive=75, timeout_graceful_shutdown=2)
    )
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
