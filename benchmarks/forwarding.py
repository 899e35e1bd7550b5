"""Forwarding: what reaching a session through a replica that does not own it costs, against the
same call straight to the owner.

    make bench ARGS="forwarding [--rounds 15] [--levels 1,16,64,256] [--size-levels 1,16] [--quick]"

Two ``gym-mcp-bridge serve`` replicas (same secret, each its own advertise URL) on core 1 in front of
the bare upstream; the owner seeds every session. ``mcp`` sends each stateless ``tools/call`` to the
owner, ``fwd`` to the other replica, which checks it with the bridge's own non-owner code and relays
it to the owner. Both replicas share one core, so a forwarded call costs that core the owner's work
plus the non-owner's. The load, the rounds and the checks are the per-call benchmark's
(``benchmarks/calls.py``); the report gives the non-owner's CPU per call, forwarded ÷ owner calls/s
in the same round and the p50 / p99 added, each with its bootstrap 95 % interval.
"""

from __future__ import annotations

from benchmarks import calls

PATHS = ["mcp", "fwd"]


def main(argv: list[str]) -> int:
    return calls.main(argv, "forwarding", PATHS, __doc__ or "")
