"""``gym-mcp-bridge gym-entry``: put the bridge's Gym server entry where Gym's launcher finds it.

Gym's launcher looks for a server folder ``resources_servers/<name>`` under ``NEMO_GYM_EXTRA_ROOTS``
(nemo-gym 0.5+), then the working directory, then its own install. The entry ships inside this
package (``bridge/gym_entry/resources_servers/gym_mcp_bridge``: ``app.py`` and ``requirements.txt``);
in a checkout, ``resources_servers/gym_mcp_bridge`` at the project root points at it, so the launcher
run from the root finds it. Elsewhere, this command either prints the ``NEMO_GYM_EXTRA_ROOTS`` value
that reaches the packaged entry (``--print-root``), or copies the entry into a Gym workspace
(``DIR/resources_servers/gym_mcp_bridge``) with a ``bridge_command`` file naming this installation's
``gym-mcp-bridge``, which ``app.py`` runs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent / "gym_entry"
ENTRY = Path("resources_servers") / "gym_mcp_bridge"
FILES = ("app.py", "requirements.txt")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "gym-entry",
        help="write the Gym server entry that lets Gym's launcher start the bridge",
        description="Copy the bridge's Gym server entry (resources_servers/gym_mcp_bridge) into a Gym "
        "workspace, so that `gym env start` / `ng_run` run from there start the bridge for a config "
        "that names it; or, with --print-root, print the NEMO_GYM_EXTRA_ROOTS value that reaches the "
        "entry shipped in this package (nemo-gym 0.5+).",
    )
    parser.add_argument("dir", nargs="?", type=Path, default=Path("."), help="the Gym workspace (default: .)")
    parser.add_argument("--print-root", action="store_true", help="print the extra root, write nothing")
    parser.set_defaults(handler=run)


def bridge_executable() -> Path:
    """This installation's ``gym-mcp-bridge`` script (beside the interpreter running it)."""
    script = Path(sys.executable).parent / "gym-mcp-bridge"
    if script.is_file():
        return script
    found = shutil.which("gym-mcp-bridge")
    if found is None:
        raise FileNotFoundError("no gym-mcp-bridge script beside this interpreter or on PATH")
    return Path(found).resolve()


def write(workspace: Path) -> Path:
    target = workspace / ENTRY
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(ROOT / ENTRY / name, target / name)
    (target / "bridge_command").write_text(f"{bridge_executable()}\n")
    return target


def run(args: argparse.Namespace) -> int:
    if args.print_root:
        print(ROOT)
        return 0
    try:
        target = write(args.dir)
    except OSError as exc:
        print(f"gym-mcp-bridge gym-entry: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {target} (it runs {(target / 'bridge_command').read_text().strip()})")
    print("name it in a Gym config: <instance>: {resources_servers: {gym_mcp_bridge: {entrypoint: app.py}}}")
    return 0
