"""The profile benchmark's reading of ``perf script`` (``tools/profile.py``): each sample charged
to the module of its innermost Python frame, kernel samples counted apart.

The input is real: samples a forwarding and an owner replica gave ``perf`` 6.1.187 on CPython 3.12.1
(``tests/fixtures/perf/``, with the commands in their headers). The expected modules and kernel flags
are read off those frames by eye: the innermost ``py::`` symbol's file, and whether the sampled
instruction's address is the kernel's. Running ``perf`` itself needs a 3.12 interpreter and the right
to profile a process, which CI's Python 3.11 environment is not given; ``make profile`` is that road.
"""

from __future__ import annotations

from pathlib import Path

from tools.profile import GC, LOOP, Share, breakdown, function, render, samples, where

FIXTURE = Path(__file__).parent / "fixtures" / "perf" / "non-owner.perf-script.txt"
OWNER = FIXTURE.with_name("owner.perf-script.txt")
RECORDED_ROOT = Path("/work/main")  # the checkout the samples were recorded in


def test_each_sample_is_charged_to_its_innermost_python_frame() -> None:
    stacks = list(samples(FIXTURE.read_text().splitlines()))
    assert [len(stack) for stack in stacks] == [11, 19, 19]
    assert breakdown(stacks, RECORDED_ROOT) == [
        # uvicorn's on_response_complete, inside uvloop's call_later: user space
        Share("uvicorn", 1, 0),
        # the bridge's one write of an answer (CoalescingTransport._flush_turn), sampled in tcp_sendmsg
        Share("bridge.http.wire", 1, 1),
        # uvloop polling, with no callback running: charged to the loop
        Share(LOOP, 1, 0),
    ]


def test_a_sample_in_the_collector_is_the_collectors() -> None:
    """The collector runs under whatever Python frame its check interrupted (here asyncio's
    ``Semaphore.locked``); a page fault under ``orjson.loads`` stays with the function that parsed."""
    stacks = list(samples(OWNER.read_text().splitlines()))
    assert [s.where for s in breakdown(stacks, RECORDED_ROOT, function)] == [
        GC,
        "bridge.http.mcp:_FastPath._plan",
    ]
    assert [(s.samples, s.kernel) for s in breakdown(stacks, RECORDED_ROOT)] == [(1, 0), (1, 1)]


def test_functions_are_named_with_their_module() -> None:
    stacks = list(samples(FIXTURE.read_text().splitlines()))
    assert [s.where for s in breakdown(stacks, RECORDED_ROOT, function)] == [
        "uvicorn:HttpToolsProtocol.on_response_complete",
        "bridge.http.wire:CoalescingTransport._flush_turn",
        f"{LOOP}:Runner.run",
    ]


def test_modules_are_named_as_a_reader_finds_them() -> None:
    site = "/tmp/venv312/lib/python3.12/site-packages"
    stdlib = "/root/.pyenv/versions/3.12.1/lib/python3.12"
    assert where(f"py::Runner.run:{stdlib}/asyncio/runners.py", RECORDED_ROOT) == LOOP
    assert where(f"py::Event.set:{stdlib}/asyncio/locks.py", RECORDED_ROOT) == "asyncio"
    assert where(f"py::WeakSet.add:{stdlib}/_weakrefset.py", RECORDED_ROOT) == "_weakrefset"
    assert (
        where(f"py::HttpToolsProtocol.on_url:{site}/uvicorn/protocols/http/httptools_impl.py", RECORDED_ROOT)
        == "uvicorn"
    )
    inside = "/work/main/.venv-profile/lib/python3.12/site-packages"  # make profile's environment
    assert where(
        f"py::RequestResponseCycle.send:{inside}/uvicorn/protocols/http/httptools_impl.py", RECORDED_ROOT
    ) == ("uvicorn")
    assert where("py::_Exchange.exchange:/work/main/bridge/upstream/transport.py", RECORDED_ROOT) == (
        "bridge.upstream.transport"
    )
    assert where("py::serve_asgi:/work/main/benchmarks/floors.py", RECORDED_ROOT) == "benchmarks.floors"


def test_the_table_gives_each_module_its_share_of_the_cpu_per_call() -> None:
    shares = [Share("uvicorn", 3, 0), Share("bridge.http.wire", 1, 1)]
    table = render(shares, 0.2).splitlines()
    assert table[2].split() == ["75.0%", "0.1500", "0%", "uvicorn"]
    assert table[3].split() == ["25.0%", "0.0500", "100%", "bridge.http.wire"]
    assert table[-1] == "in the kernel, all modules: 25.0% (0.0500 ms/call)"
    assert [line.split() for line in render(shares, 0.2, "function", top=1).splitlines()[2:]] == [
        ["75.0%", "0.1500", "0%", "uvicorn"]
    ]
