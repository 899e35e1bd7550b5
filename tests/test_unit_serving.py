"""Unit tests for the start-up import in ``bridge.http.serving``: the real app (the MCP SDK) is
imported with the cycle collector paused, what the import made is frozen, and the collector runs
again afterwards, also when the import fails (a collector left off would let every request's cycles
pile up for the life of the process).

The module's ``importlib`` is replaced by a recorder here: the real import happens once per process
and has already happened in a test session. The real road, a spawned ``serve`` timed to ready, is
``benchmarks/footprint.py`` (``tests/test_bench_smoke.py::test_footprint_quick``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from bridge.http import serving


@pytest.fixture
def collector() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.unfreeze()  # the freeze under test moved this test process's objects out of the collector's sight
    gc.enable()


def test_the_app_is_imported_with_the_collector_paused_then_frozen(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, bool, int]] = []
    record = SimpleNamespace(
        import_module=lambda name: seen.append((name, gc.isenabled(), gc.get_freeze_count()))
    )
    monkeypatch.setattr(serving, "importlib", record)
    gc.unfreeze()
    serving._import_app()
    assert seen == [("bridge.http.app", False, 0)]
    assert gc.get_freeze_count() > 0
    assert gc.isenabled()


def test_a_failed_import_leaves_the_collector_running(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(name: str) -> None:
        raise ImportError(f"no module named {name!r}")

    monkeypatch.setattr(serving, "importlib", SimpleNamespace(import_module=broken))
    with pytest.raises(ImportError):
        serving._import_app()
    assert gc.isenabled()
