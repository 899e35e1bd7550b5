"""Keys kept in a state directory: the signing key and the REST API key a deployment generates on its
first start when none is given (``state_dir``; compose mounts a named volume there).

``use_state_dir(settings, generate=True)`` runs before ``serve`` reads its keys: for each of the two
that has no explicit setting (``secret``/``secret_file``, ``api_key``/``api_key_file``), the file
``state_dir/signing_key`` or ``state_dir/api_key`` is created if missing (written whole, then
linked into place, so replicas starting together agree on one key; mode 0600,
owned by the user the bridge runs as; 32 random bytes as hex) and the settings point at it. An
explicit setting always wins and the state directory is then not touched for that key. Only paths
are logged, never a key. ``show-config`` calls it with ``generate=False``.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from bridge.settings import Settings

SIGNING_KEY = "signing_key"
API_KEY = "api_key"


@dataclass(frozen=True, slots=True)
class KeyFile:
    path: Path
    created: bool  # made by this call (first start)


def _ensure(path: Path, generate: bool) -> KeyFile:
    if not generate or path.exists():
        return KeyFile(path, False)
    # Written whole under a name of its own, then linked into place: replicas starting together on
    # one volume never read a half-written key, and the first link wins.
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(partial, path)
        except FileExistsError:  # another replica sharing the volume made it first
            return KeyFile(path, False)
        finally:
            partial.unlink()
    except OSError as exc:
        raise ValueError(f"cannot create {path} as uid {os.getuid()}: {exc.strerror}") from exc
    return KeyFile(path, True)


def use_state_dir(settings: Settings, generate: bool = True) -> tuple[Settings, dict[str, KeyFile]]:
    """``settings`` pointing at the state directory's key files for the keys not given otherwise,
    and those files by name (``signing_key``, ``api_key``). Raises ValueError with a one-line reason."""
    state = settings.state_dir
    if state is None:
        return settings, {}
    if generate and not state.is_dir():
        raise ValueError(f"state_dir {state} is not a directory (mount a volume there)")
    update: dict[str, Path] = {}
    files: dict[str, KeyFile] = {}
    if settings.secret is None and settings.secret_file is None:
        files[SIGNING_KEY] = _ensure(state / SIGNING_KEY, generate)
        update["secret_file"] = files[SIGNING_KEY].path
    if settings.api_key is None and settings.api_key_file is None:
        files[API_KEY] = _ensure(state / API_KEY, generate)
        update["api_key_file"] = files[API_KEY].path
    return settings.model_copy(update=update), files
