"""Create the bridge's key Secrets in the cluster, each only if it does not exist yet.

Run by the Job `gym-mcp-bridge-keys` (keys-job.yaml) with the bridge image's python3, standard
library only, as its service account (a Role lets it create Secrets and get these two by name).
Each argument is SECRET/KEY: a Secret SECRET holding one random key (32 bytes as 64 hex
characters, newline-terminated, as `openssl rand -hex 32` prints it) under KEY.

    python3 make_keys.py gym-mcp-bridge-signing-key/secret gym-mcp-bridge-api-key/api-key

A Secret that already exists is kept as it is (the API answers 409 AlreadyExists to the create):
re-applying the manifests, or re-running this Job, never rotates a key. It is then read once to
check that it holds KEY, non-empty, since the bridge mounts that key and would wait for it
forever otherwise. One line per Secret on stdout; any failure is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
PROG = "gym-mcp-bridge-keys"


class Failed(Exception):
    """One line for stderr."""


class Api:
    """The few Kubernetes API calls this needs, authenticated as the pod's service account."""

    def __init__(self, service_account: Path) -> None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise Failed("KUBERNETES_SERVICE_HOST is not set: run this inside a Kubernetes pod")
        try:
            self.token = (service_account / "token").read_text().strip()
            self.namespace = (service_account / "namespace").read_text().strip()
        except OSError as exc:
            raise Failed(
                f"no service-account credentials in {service_account} ({exc.strerror}): "
                "the Job's pod needs automountServiceAccountToken: true"
            ) from exc
        self.base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.tls = ssl.create_default_context(cafile=str(service_account / "ca.crt"))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/json",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, context=self.tls, timeout=30) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                status = json.loads(exc.read() or b"{}")
            except ValueError:
                status = {}
            return exc.code, status
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Failed(f"cannot reach the Kubernetes API at {self.base}: {reason}") from exc


def message(status: dict[str, Any], code: int) -> str:
    return str(status.get("message") or f"HTTP {code}")


def ensure(api: Api, name: str, key: str) -> str:
    """Create Secret ``name`` with a fresh ``key`` unless it exists; what happened, as one line."""
    where = f"Secret {name} in namespace {api.namespace}"
    value = secrets.token_hex(32) + "\n"
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": PROG},
            "annotations": {
                "gym-mcp-bridge/created-by": f"Job {PROG}: made once, never rotated by a re-apply "
                "(rotation: docs/deployment.md, Kubernetes)"
            },
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode()},
    }
    code, status = api.call("POST", f"/api/v1/namespaces/{api.namespace}/secrets", body)
    if code == 201:
        return f"created {where} (key {key!r}: 64 hex characters)"
    if code == 403:
        raise Failed(f"forbidden to create {where}: {message(status, code)}")
    if code != 409:
        raise Failed(f"creating {where} failed: {message(status, code)}")
    # 409 AlreadyExists: keep it; check it holds the key the bridge mounts.
    code, found = api.call("GET", f"/api/v1/namespaces/{api.namespace}/secrets/{name}")
    if code == 403:
        raise Failed(f"forbidden to read {where}: {message(found, code)}")
    if code != 200:
        raise Failed(f"reading {where} failed: {message(found, code)}")
    data = found.get("data") or {}
    if not data.get(key):
        raise Failed(
            f"{where} exists but has no key {key!r} (keys: {', '.join(sorted(data)) or 'none'}): "
            f"the bridge mounts {key!r}; fix the Secret or delete it and run this Job again"
        )
    return f"kept {where}: it exists (a re-apply never rotates a key)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("secrets", nargs="+", metavar="SECRET/KEY", help="a Secret and the key it holds")
    parser.add_argument("--service-account", type=Path, default=Path(SERVICE_ACCOUNT), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    wanted = []
    for item in args.secrets:
        name, _, key = item.partition("/")
        if not name or not key:
            parser.error(f"expected SECRET/KEY, got {item!r}")
        wanted.append((name, key))
    try:
        api = Api(args.service_account)
        for name, key in wanted:
            print(f"{PROG}: {ensure(api, name, key)}", flush=True)
    except Failed as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
