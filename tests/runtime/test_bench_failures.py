"""``arborcc bench`` when a call ends the communicator or a rank fails: the rows before it
keep their numbers, the others say why, and the command fails in one line."""

from __future__ import annotations

import contextlib
import io
import json
from unittest import mock

from arborcc.cli.main import main
from arborcc.runtime.communicator import Communicator
from arborcc.runtime.errors import CommunicationError

ABORTED = "rank 0: the communicator was aborted: rank 1 failed: message mismatch (a stand-in)"


def bench(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["bench", "-n", "2", "--iters", "2", "-w", "1", "--no-membw", "--timeout", "120", *args])
    return code, out.getvalue(), err.getvalue()


def test_a_call_that_aborts_the_communicator_ends_the_sweep_with_the_rows_before_it():
    real = Communicator.allreduce

    def allreduce(self, send, recv=None, op="sum"):
        if send.nbytes >= 64 << 10:
            raise CommunicationError(ABORTED)
        return real(self, send, recv, op=op)

    with mock.patch.object(Communicator, "allreduce", allreduce):  # the ranks are forked: they inherit it
        code, out, err = bench("-b", "4K", "-e", "256K", "-f", "4", "--json")
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("arborcc: error: --backend arborcc: 4 of 8 rows did not run: ") and "aborted" in err
    rows = json.loads(out)["results"]
    assert [r["requested"] for r in rows if r["time_us"] is not None] == [4096, 4096, 16384, 16384]
    assert all(r["failed"] and r["note"] for r in rows if r["requested"] >= 64 << 10)


def test_a_rank_that_fails_outside_a_call_is_one_line_without_its_traceback():
    def from_env(*args, **kwargs):
        raise CommunicationError("rank 1: no peer (a stand-in)")

    with mock.patch.object(Communicator, "from_env", from_env):
        code, _, err = bench("-b", "4K", "-e", "4K")
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("arborcc: error: --backend arborcc: rank 0 failed: CommunicationError: rank 1: no peer")
