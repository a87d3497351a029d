"""Every collective checks out at 8 ranks, and all-reduce at 16 (on 2 cores these measure
nothing but correctness: few sizes, few calls, each run bounded by ``--timeout``)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from arborcc.cli.main import main

COLLECTIVES = ["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall"]


def bench_rows(*args: str) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["bench", "--iters", "2", "-w", "1", "--no-membw", "--json", "--timeout", "240", *args])
    rows = json.loads(out.getvalue())["results"]
    assert code == 0, [r["note"] for r in rows if r["note"]]
    return rows


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_every_collective_checks_out_on_8_ranks(collective):
    """4 KB (through the FIFO slots) and 128 KB (read from the peers' memory), root 3 for the rooted ones."""
    rows = bench_rows("-n", "8", "--collective", collective, "-b", "4K", "-e", "128K", "-f", "32", "-r", "3")
    assert len(rows) == 4 and all(r["wrong"] == 0 and r["time_us"] > 0 for r in rows), rows


def test_allreduce_checks_out_on_16_ranks():
    rows = bench_rows("-n", "16", "-b", "4K", "-e", "128K", "-f", "32")
    assert len(rows) == 4 and all(r["wrong"] == 0 and r["time_us"] > 0 for r in rows), rows


def test_a_reduce_larger_than_a_slice_checks_out():
    rows = bench_rows("-n", "2", "--collective", "reduce", "-b", "2M", "-e", "2M")
    assert all(r["wrong"] == 0 for r in rows)
