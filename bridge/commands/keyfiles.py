"""Keys kept in a state directory: the signing key and the REST API key a deployment generates on its
first start when none is given (``state_dir``; compose mounts a named volume there).

``use_state_dir(settings, generate=True)`` runs before ``serve`` reads its keys: for each of the two
that has no explicit setting (``secret``/``secret_file``, ``api_key``/``api_key_file``), the file
``state_dir/signing_key`` or ``api_key_dir/api_key`` (``api_key_dir`` defaults to ``state_dir``) is
created if missing (written whole, then linked into place, so replicas starting together agree on
one key; mode 0600, owned by the user the bridge runs as; 32 random bytes as hex) and the settings
point at it. An API key first generated in ``state_dir`` moves along when ``api_key_dir`` is set
later (its content is kept, so clients keep their key). An explicit setting always wins and the
directories are then not touched for that key. Only paths are logged, never a key.
``show-config`` calls it with ``generate=False``.
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


def _ensure(path: Path, generate: bool, kept: Path | None = None) -> KeyFile:
    """``path``, created with a new key (or ``kept``'s content, when that file exists) if missing."""
    if not generate or path.exists():
        return KeyFile(path, False)
    content = kept.read_text() if kept is not None and kept.is_file() else secrets.token_hex(32) + "\n"
    # Written whole under a name of its own, then linked into place: replicas starting together on
    # one volume never read a half-written key, and the first link wins.
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(content)
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
    """``settings`` pointing at the key files of ``state_dir`` / ``api_key_dir`` for the keys not given
    otherwise, and those files by name (``signing_key``, ``api_key``). Raises ValueError with a
    one-line reason."""
    state, api_dir = settings.state_dir, settings.api_key_dir or settings.state_dir
    for name, folder in (("state_dir", state), ("api_key_dir", api_dir)):
        if generate and folder is not None and not folder.is_dir():
            raise ValueError(f"{name} {folder} is not a directory (mount a volume there)")
    update: dict[str, Path] = {}
    files: dict[str, KeyFile] = {}
    if state is not None and settings.secret is None and settings.secret_file is None:
        files[SIGNING_KEY] = _ensure(state / SIGNING_KEY, generate)
        update["secret_file"] = files[SIGNING_KEY].path
    if api_dir is not None and settings.api_key is None and settings.api_key_file is None:
        earlier = state / API_KEY if state is not None and api_dir != state else None
        files[API_KEY] = _ensure(api_dir / API_KEY, generate, kept=earlier)
        update["api_key_file"] = files[API_KEY].path
    return settings.model_copy(update=update), files
