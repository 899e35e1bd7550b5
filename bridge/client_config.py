"""``gym-mcp-bridge client-config --client NAME``: seed a fresh session and print the harness
configuration that connects to it (being written)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "client-config", help="seed a session and print a harness's MCP configuration for it"
    )
    parser.set_defaults(handler=lambda args: 1)
