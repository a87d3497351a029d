"""Collectives on shared arrays (``Communicator.shared_array``): all-gather and broadcast
read the peers' blocks from their arrays (an all-gather with streaming stores into a shared
output: each rank writes its block into every shared output); every result is compared
with numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from support.segments import leftovers, segments

from arborcc.runtime.launch import run_ranks

DTYPES = ("float32", "float64", "float16", "int32", "int64", "uint8")
COUNTS = (1, 7, 1001, 40_003)  # odd counts; 40,003 float64 x 3 ranks: past the streaming threshold of 4 KB


def _input(dtype: str, count: int, rank: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, rank, count])
    return rng.integers(0, 100, count).astype(dtype)


def _shared_rank(options: dict) -> dict:
    from arborcc.runtime import Communicator

    options = dict(options)
    mixed, skewed = options.pop("mixed", False), options.pop("skewed", False)
    comm = Communicator.from_env(timeout=30, **options)
    r, n = comm.rank, comm.world_size
    # mixed: rank 0 stores with streaming stores and writes its block into the peers'
    # shared outputs (push), rank 1 stores plainly, rank 2 with streaming stores without
    # push (ranks 1 and 2 read the peers' blocks); skewed: odd ranks' shared outputs start
    # one element later (aligned unlike the peers')
    if mixed:
        comm.options.stream_bytes = 0 if r % 3 == 1 else 1
        comm.options.push = r % 3 == 0
    skew = r % 2 if skewed else 0
    wrong, cases = [], 0
    for seed, dtype in enumerate(DTYPES):
        for count in COUNTS:
            for inplace, out_shared in ((False, False), (False, True), (True, True)):  # in place: all shared
                # one odd element in front: the buffers are not aligned to anything
                memory = comm.shared_array(2 + count * (n + 1), dtype)
                x = _input(dtype, count, r, seed)
                want = np.concatenate([_input(dtype, count, p, seed) for p in range(n)])
                if inplace:
                    recv = memory[1:1 + count * n]
                    recv[:] = 0
                    recv[r * count:(r + 1) * count] = x
                    comm.allgather(recv[r * count:(r + 1) * count], recv)
                else:
                    send = memory[1:1 + count]
                    send[:] = x
                    start = 1 + count + skew
                    recv = memory[start:start + count * n] if out_shared else np.zeros(count * n, dtype)
                    comm.allgather(send, recv)
                    comm.allgather(send, recv)  # the repeated call's fast path
                if not np.array_equal(recv, want):
                    wrong.append(("allgather", dtype, count, inplace, out_shared))
                for root in (0, n - 1):
                    data = memory[1:1 + count]
                    data[:] = _input(dtype, count, r, seed + 100)
                    expect = _input(dtype, count, root, seed + 100)
                    if inplace:
                        comm.broadcast(data, root=root)
                        got = data
                    else:
                        got = np.zeros(count, dtype)
                        comm.broadcast(data, got, root=root)
                    if not np.array_equal(got, expect):
                        wrong.append(("broadcast", dtype, count, inplace, root))
                cases += 1
                comm.free_shared(memory)
    calls = comm.shared_calls
    comm.close()
    return {"wrong": wrong, "cases": cases, "shared_calls": calls}


@pytest.mark.parametrize("options", [dict(stream_bytes=0), dict(stream_bytes=1), dict(workers=0),
                                     dict(stream_bytes=1, workers=0, skewed=True), dict(mixed=True, skewed=True)],
                         ids=["plain-stores", "streaming-stores", "a-thread-per-peer", "streaming-threads-skewed",
                              "mixed-stores-and-alignment"])
def test_shared_allgather_and_broadcast_match_numpy(options):
    before = segments()
    results = run_ranks(_shared_rank, 3, (options,), timeout=240)
    for res in results:
        assert res["wrong"] == []
        assert res["cases"] == len(DTYPES) * len(COUNTS) * 3
        # every call ran on the shared arrays: 2 all-gathers out of place (twice), 1 in place, 2 broadcasts each
        assert res["shared_calls"] == len(DTYPES) * len(COUNTS) * (2 * (2 + 2) + (1 + 2))
    assert leftovers(before) == set()


def _torch_shared_rank():
    import torch

    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=30)
    r, n = comm.rank, comm.world_size
    out = comm.shared_tensor((n, 5), torch.bfloat16)
    ptr = out.data_ptr()
    out[r] = torch.arange(5, dtype=torch.bfloat16) + r
    comm.allgather(out[r], out)  # in place, on the tensor's own memory
    want = torch.stack([torch.arange(5, dtype=torch.bfloat16) + p for p in range(n)])
    return out.data_ptr() == ptr, bool(torch.equal(out, want)), comm.shared_calls


def test_shared_tensor_allgather_in_place():
    pytest.importorskip("torch")
    for same_memory, correct, calls in run_ranks(_torch_shared_rank, 2, timeout=120):
        assert same_memory and correct and calls == 1


def _one_rank_errors() -> list[str]:
    from arborcc.errors import InputError
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=30)
    said = []
    for bad in (lambda: comm.shared_array((0, 4)), lambda: comm.free_shared(np.zeros(3, np.float32))):
        try:
            bad()
            said.append("no error")
        except InputError as e:
            said.append(str(e))
    a = comm.shared_array(8, "int64")
    a[:] = 5
    out = np.zeros(8, np.int64)
    comm.allgather(a, out)  # one rank: its own block
    said.append(f"{out.sum()} {comm.shared_calls}")
    try:
        comm.allgather(a[1:], a[:7])  # overlapping, not in place
    except InputError as e:
        said.append(str(e))
    return said


def test_shared_array_input_errors():
    (said,) = run_ranks(_one_rank_errors, 1, timeout=60)
    assert "at least one byte" in said[0]
    assert "is not a shared array" in said[1]
    assert said[2] == "40 1"
    assert "overlaps the send buffer" in said[3]
