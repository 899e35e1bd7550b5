"""``gym-mcp-bridge replay ROLLOUTS.jsonl`` (being written)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("replay", help="replay Gym rollouts through the bridge")
    parser.set_defaults(handler=lambda args: 1)
