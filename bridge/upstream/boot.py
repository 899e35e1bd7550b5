"""Boot one NeMo Gym resources server inside the Gym environment's interpreter.

This file is run as a script by the Gym environment's Python (>= 3.12), never imported by the
bridge: it may import only the standard library and what nemo-gym brings. The bridge's
``upstream.process`` module spawns it as

    GYM_PYTHON boot.py --server SPEC --host HOST --port 0 --port-file FILE

SPEC is a bundled environment name (``example_session_state_mgmt``), ``module:Class``, or a Gym
config YAML with an optional instance name (``path/to/config.yaml`` or ``path.yaml:instance``).
The server is set up as Gym's own runner sets it up: its config is the no-model global config
merged with the config file (a bundled name uses its shipped ``configs/<env>.yaml``) and the
working directory's ``env.yaml``, ``inherit_from``/``copy`` applied, and its server block resolved
(``${oc.env:...}`` and other interpolations); the global config is published in
``NEMO_GYM_CONFIG_DICT`` as Gym hands it to its child servers; the server's directory becomes the
working directory and the first entry of ``sys.path`` and ``PYTHONPATH``. The server is then
constructed directly (config class, ``ServerClient`` without a head server, ``setup_webserver``),
the socket is bound here on HOST:PORT (0 picks a free port), and the port file receives one JSON
object (port, host, server_name, class, gym_version, pid, example_rows) before uvicorn serves on
that socket. Errors are printed as one line prefixed ``upstream_boot:`` and exit 2. The bridge
runs this under the server's own environment when its ``requirements.txt`` asks for one
(``bridge.upstream.envs``). It raises its soft ``RLIMIT_NOFILE`` to the hard one first, as the
bridge does (in a sidecar container it starts at the runtime's soft 1,024): the bridge opens as many
connections to it as calls are in flight.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import os
import re
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEAD_SERVER_PORT = 11000  # Gym's default head-server port; nothing is asked of it here.


class BootError(Exception):
    pass


def _env_dir(name: str) -> Path:
    """The directory of environment ``name``: the first portion of the ``resources_servers`` namespace
    package that has it (a working directory's ``resources_servers/`` may hold other servers only,
    such as this project's Gym entry), else where the first portion would hold it."""
    import resources_servers

    portions = [Path(portion) for portion in resources_servers.__path__]
    return next((portion / name for portion in portions if (portion / name).is_dir()), portions[0] / name)


def _server_class(module_name: str, class_name: str | None) -> Any:
    from nemo_gym.base_resources_server import SimpleResourcesServer

    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise BootError(f"cannot import {module_name}: {exc}") from exc
    except Exception as exc:  # the server's module failed at import time: one line, its own words
        text = str(exc).strip().splitlines()
        raise BootError(
            f"importing {module_name} failed: {type(exc).__name__}: {text[0] if text else ''}"
        ) from exc
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
        and "[" not in obj.__name__  # a parametrized generic (Server[Env, Data]) is not what Gym runs
    ]
    if len(candidates) > 1:  # the one its ``__main__`` block runs, as Gym's runner runs the file
        source = Path(getattr(module, "__file__", "") or "")
        run = re.findall(r"(\w+)\.run_webserver\(\)", source.read_text()) if source.is_file() else []
        candidates = [c for c in candidates if c.__name__ in run] or candidates
    if len(candidates) != 1:
        names = ", ".join(c.__name__ for c in candidates) or "none"
        raise BootError(f"expected one resources server class in {module_name}, found {names}")
    return candidates[0]


def _load_config(paths: list[Path], dotenv: Path | None) -> Any:
    """The global config as Gym's runner builds it for a run without a model: the no-model defaults,
    the config files, then ``env.yaml`` (where Gym users keep keys), with ``inherit_from`` / ``copy``
    applied. Interpolations are resolved later, per server block, as Gym's servers do."""
    from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig
    from omegaconf import OmegaConf

    layers = [GlobalConfigDictParserConfig.NO_MODEL_GLOBAL_CONFIG_DICT]
    for path in paths:
        if not path.is_file():
            raise BootError(f"config file {path} does not exist")
        try:
            layers.append(OmegaConf.load(path))
        except Exception as exc:
            raise BootError(f"config file {path} cannot be read: {exc}".replace("\n", "; ")) from exc
    if dotenv is not None and dotenv.is_file():
        layers.append(OmegaConf.load(dotenv))
    config = OmegaConf.merge(*layers)
    swap = getattr(GlobalConfigDictParser(), "_recursively_swap_keys", None)
    if swap is not None:
        swap(config)
    return config


def _publish(config: Any, instance: str | None) -> None:
    """Hand the global config to the server as Gym's runner hands it to a child server, so code that
    calls ``get_global_config_dict()`` reads it instead of parsing this script's command line."""
    from nemo_gym.global_config import GlobalConfigDictParserConfig
    from omegaconf import OmegaConf

    if config is None and "NEMO_GYM_CONFIG_DICT" in os.environ:
        return
    published = config if config is not None else GlobalConfigDictParserConfig.NO_MODEL_GLOBAL_CONFIG_DICT
    os.environ["NEMO_GYM_CONFIG_DICT"] = OmegaConf.to_yaml(published)
    if instance:
        os.environ["NEMO_GYM_CONFIG_PATH"] = instance


def _instances(config: Any) -> list[tuple[str, str]]:
    """(instance name, env name) of every resources-server instance in a config."""
    from omegaconf import OmegaConf

    found: list[tuple[str, str]] = []
    for key in config:
        block: Any = config.get(key)
        if OmegaConf.is_dict(block) and OmegaConf.is_dict(block.get("resources_servers")):
            found.extend((str(key), str(env)) for env in block["resources_servers"])
    return found


def _server_config(config: Any, instance: str, env: str, source: Path) -> dict[str, Any]:
    """The instance's server block with its interpolations resolved (``${oc.env:...}`` and
    references to top-level keys), as Gym's ``load_config_from_global_config`` does."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        resolved = OmegaConf.to_container(config[instance]["resources_servers"][env], resolve=True)
    except OmegaConfBaseException as exc:
        missing = re.search(r"Interpolation key '([^']+)' not found", str(exc))
        if missing:
            raise BootError(
                f"{source}: {instance} needs the config value {missing[1]!r} (give it in env.yaml in the "
                "working directory, as for Gym's own runner)"
            ) from exc
        raise BootError(f"{source}: cannot resolve {instance}: {str(exc).splitlines()[0]}") from exc
    assert isinstance(resolved, dict)
    return {str(k): v for k, v in resolved.items()}


def _bundled_config(env_dir: Path) -> Path | None:
    """The shipped config that runs this environment: ``configs/<env>.yaml``, else the first
    ``configs/*.yaml`` (by name) that defines a resources-server instance of it."""
    shipped = env_dir / "configs" / f"{env_dir.name}.yaml"
    if shipped.is_file():
        return shipped
    for candidate in sorted((env_dir / "configs").glob("*.yaml")):
        if re.search(rf"^\s+{re.escape(env_dir.name)}:", candidate.read_text(errors="replace"), re.MULTILINE):
            return candidate
    return None


@dataclass
class Resolved:
    cls: Any
    name: str
    config: dict[str, Any]
    global_config: Any = None
    instance: str | None = None
    directory: Path | None = None


def resolve(spec: str, dotenv: Path | None = None) -> Resolved:
    """The server class, instance name, resolved config fields and directory for a server spec."""
    yaml_spec = re.fullmatch(r"(.+\.ya?ml)(?::(.+))?", spec)
    if yaml_spec:
        path = Path(yaml_spec[1]).resolve()
        config = _load_config([path], dotenv)
        instances = _instances(config)
        wanted = [i for i in instances if i[0] == yaml_spec[2]] if yaml_spec[2] else instances
        if not wanted:
            known = ", ".join(i for i, _ in instances) or "none"
            what = (
                f"no resources_servers instance named {yaml_spec[2]}"
                if yaml_spec[2]
                else "no resources_servers instance"
            )
            raise BootError(f"{path} has {what} (instances: {known})")
        instance: str | None
        fields: dict[str, Any]
        instance, env = wanted[0]
        fields = _server_config(config, instance, env, path)
        env_dir = _env_dir(env)
        _publish(config, instance)
        _enter(env_dir)
        cls = _server_class(_entry_module(env, fields), None)
        return Resolved(cls, instance, fields, config, instance, env_dir)
    if ":" in spec:
        module, _, class_name = spec.partition(":")
        parts = module.split(".")
        module_dir = _env_dir(parts[1]) if len(parts) > 2 and parts[0] == "resources_servers" else None
        _publish(None, None)
        if module_dir is not None and module_dir.is_dir():
            _enter(module_dir)
        return Resolved(
            _server_class(module, class_name), module.rsplit(".", 1)[-1], {}, directory=module_dir
        )
    env_dir = _env_dir(spec)
    if "/" in spec or not (env_dir / "app.py").is_file():
        raise BootError(f"no bundled Gym environment named {spec!r} (looked for {env_dir}/app.py)")
    shipped = _bundled_config(env_dir)
    config = None
    fields = {}
    instance = None
    if shipped is not None:
        config = _load_config([shipped], dotenv)
        ours = [i for i in _instances(config) if i[1] == spec]
        if ours:
            instance = ours[0][0]
            fields = _server_config(config, instance, spec, shipped)
    _publish(config, instance)
    _enter(env_dir)
    cls = _server_class(_entry_module(spec, fields), None)
    return Resolved(cls, spec, fields, config, instance, env_dir)


def _entry_module(env: str, fields: dict[str, Any]) -> str:
    entrypoint = str(fields.get("entrypoint", "app.py"))
    return f"resources_servers.{env}.{entrypoint.removesuffix('.py').replace('/', '.')}"


def _enter(env_dir: Path) -> None:
    """Run as Gym's runner runs a server: its directory the working directory and first on
    ``PYTHONPATH`` (so ``import utils`` and ``open("data/...")`` find the server's own files)."""
    os.chdir(env_dir)
    if str(env_dir) not in sys.path:
        sys.path.insert(0, str(env_dir))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(env_dir), os.environ.get("PYTHONPATH")]))


def build_app(resolved: Resolved, host: str, port: int) -> Any:
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    cls, name = resolved.cls, resolved.name
    config_cls = cls.model_fields["config"].annotation
    fields = {k: v for k, v in resolved.config.items() if k not in {"host", "port"}}
    fields.update(name=name, host=host, port=port, entrypoint=fields.get("entrypoint", "app.py"))
    try:
        server_config = config_cls.model_validate(fields)
    except Exception as exc:
        raise BootError(f"invalid config for {cls.__name__}: {exc}".replace("\n", "; ")) from exc
    client = ServerClient(
        head_server_config=BaseServerConfig(host=host, port=HEAD_SERVER_PORT),
        global_config_dict=resolved.global_config
        if resolved.global_config is not None
        else OmegaConf.create({}),
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
    """What the port file tells the bridge: where the server bound, what it is, and where its own
    example rows are (``data/example.jsonl`` beside its module, as every bundled environment has)."""
    module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    examples = Path(module_file).parent / "data" / "example.jsonl" if module_file else None
    return {
        "example_rows": str(examples) if examples is not None and examples.is_file() else None,
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


def raise_open_files() -> None:
    """The soft ``RLIMIT_NOFILE`` raised to the hard one (Linux's ``nr_open`` when unlimited)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        with contextlib.suppress(OSError, ValueError):
            target = int(Path("/proc/sys/fs/nr_open").read_text())
    if soft != resource.RLIM_INFINITY and target != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


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
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # the bridge's own directory: its modules must not shadow a server's imports
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    raise_open_files()
    print(
        f"upstream_boot: loading {args.server} with nemo-gym from {sys.prefix}", file=sys.stderr, flush=True
    )
    try:
        import uvicorn

        resolved = resolve(args.server, Path.cwd() / "env.yaml")
        sock = bind(args.host, args.port)
        host, port = sock.getsockname()[:2]
        app = build_app(resolved, host, port)
    except BootError as exc:
        print(f"upstream_boot: {exc}", file=sys.stderr, flush=True)
        return 2
    cls, name = resolved.cls, resolved.name
    info = boot_info(cls, name, host, port)
    if args.port_file:
        write_port_file(args.port_file, info)
    print(f"upstream_boot: serving {info['class']} as {name} on {host}:{port}", file=sys.stderr, flush=True)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level=args.log_level, timeout_keep_alive=75, timeout_graceful_shutdown=2)
    )
    # The bridge stops its upstream with SIGINT: a normal stop, not an error to print.
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
