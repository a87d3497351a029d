"""The Python API: torch CPU tensors without copies, input checks, options."""

from __future__ import annotations

import numpy as np
import pytest

from arborcc.errors import InputError
from arborcc.runtime.arrays import BFloat16, array_ref
from arborcc.runtime.communicator import Options
from arborcc.runtime.launch import run_ranks


def _torch_rank():
    import torch

    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=30)
    r, n = comm.rank, comm.world_size
    results = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
        x = (torch.arange(1000) % 16 + r).to(dtype)  # small integers: exact in every dtype
        ptr = x.data_ptr()
        comm.allreduce(x)  # in place, on the tensor's own memory
        want = (torch.arange(1000) % 16 * n + sum(range(n))).to(dtype)
        results[str(dtype)] = (x.data_ptr() == ptr, bool(torch.equal(x, want)))
    g = torch.empty(2 * 3)
    comm.allgather(torch.full((3,), float(r)), g)
    results["allgather"] = g.tolist()
    return results


def test_torch_tensors_in_place_without_copies():
    pytest.importorskip("torch")
    for res in run_ranks(_torch_rank, 2, timeout=120):
        for key, value in res.items():
            if key == "allgather":
                assert value == [0.0] * 3 + [1.0] * 3
            else:
                same_memory, correct = value
                assert same_memory and correct, key


def _repeated_allreduce_rank():
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=30)
    r, n = comm.rank, comm.world_size
    x, out, other = np.zeros(3000, np.float32), np.zeros(3000, np.float32), np.zeros(3000, np.float32)
    seen = []
    for i in range(4):  # the same arrays again and again, new contents each time
        x[:] = np.arange(3000) % 7 + r + i
        comm.allreduce(x, out)
        seen.append(bool(np.array_equal(out, (np.arange(3000) % 7 + i) * n + sum(range(n)))))
        comm.allreduce(x, out, op="max")  # another operator on the same arrays
        seen.append(bool(np.array_equal(out, np.arange(3000) % 7 + n - 1 + i)))
    x[:] = r
    comm.allreduce(x, other)  # another output
    seen.append(bool(np.all(other == sum(range(n)))))
    comm.allreduce(x)  # in place
    seen.append(bool(np.all(x == sum(range(n)))))
    comm.allreduce(x)
    seen.append(bool(np.all(x == n * sum(range(n)))))
    return seen


def test_repeated_allreduce_on_the_same_arrays():
    """The repeat path (the last all-reduce's prepared calls) reads each call's contents."""
    for seen in run_ranks(_repeated_allreduce_rank, 3, timeout=120):
        assert all(seen), seen


def _repeated_collectives_rank():
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=30)
    r, n = comm.rank, comm.world_size
    k = 5000
    x, gathered, part, y = np.zeros(k, np.float32), np.zeros(n * k, np.float32), np.zeros(k, np.float32), \
        np.zeros(k, np.float32)
    big = np.zeros(n * k, np.float32)
    seen = []
    for i in range(3):  # the same arrays again and again, new contents each time
        x[:] = np.arange(k) % 5 + 10 * r + i
        comm.allgather(x, gathered)
        seen.append(("allgather", i, bool(np.array_equal(
            gathered, np.concatenate([np.arange(k) % 5 + 10 * p + i for p in range(n)])))))
        big[:] = np.arange(n * k) % 3 + r + i
        comm.reduce_scatter(big, part)
        seen.append(("reduce_scatter", i, bool(np.array_equal(
            part, (np.arange(r * k, (r + 1) * k) % 3 + i) * n + sum(range(n))))))
        for root in (0, n - 1, 0):  # another root on the same arrays, then back
            comm.broadcast(x, y, root=root)
            seen.append(("broadcast", i, bool(np.array_equal(y, np.arange(k) % 5 + 10 * root + i))))
    return seen


def test_repeated_collectives_on_the_same_arrays():
    """The repeat path of all-gather, reduce-scatter and broadcast reads each call's contents
    and follows a change of root."""
    for seen in run_ranks(_repeated_collectives_rank, 3, timeout=120):
        assert all(ok for *_, ok in seen), seen


def test_array_checks():
    a = np.zeros((4, 4), np.float32)
    assert array_ref(a, "x").count == 16
    with pytest.raises(InputError, match="x: the array is not contiguous"):
        array_ref(a[:, ::2], "x")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(InputError, match="read-only"):
        array_ref(ro, "x")
    with pytest.raises(InputError, match="element type complex64 is not supported"):
        array_ref(np.zeros(4, np.complex64), "x")
    with pytest.raises(InputError, match="uint16"):
        array_ref(BFloat16(np.zeros(4, np.float32)), "x")
    assert array_ref(BFloat16(np.zeros(4, np.uint16)), "x").dtype == "bfloat16"
    with pytest.raises(InputError, match="expected a numpy array or a torch CPU tensor, got list"):
        array_ref([1, 2], "x")


def test_options_from_environment():
    opts = Options.from_env({"ARBORCC_TIMEOUT": "2.5", "ARBORCC_SLICE_BYTES": "65536", "ARBORCC_TUNE": "1"})
    assert (opts.timeout, opts.slice_bytes, opts.tune) == (2.5, 65536, True)
    with pytest.raises(InputError, match=r"\$ARBORCC_SLOTS: .many. is not a whole number"):
        Options.from_env({"ARBORCC_SLOTS": "many"})
    with pytest.raises(InputError, match="unknown runtime option"):
        Options.from_env({}, colour="red")


def _checked_calls():
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=10)
    errors = []
    for call in (lambda: comm.allreduce(np.ones(4, np.float32), np.ones(5, np.float32)),
                 lambda: comm.allreduce(np.ones(4, np.int32), op="avg"),
                 lambda: comm.allreduce(np.ones(4, np.float32), op="median"),
                 lambda: comm.broadcast(np.ones(4), root=7),
                 lambda: comm.reduce_scatter(np.ones(5))):
        try:
            call()
            errors.append(None)
        except InputError as e:
            errors.append(str(e))
    x = np.ones(4, np.float32)
    comm.allreduce(x)  # still usable after refused calls
    return errors, x.tolist()


def test_bad_calls_are_refused_before_any_communication():
    for errors, x in run_ranks(_checked_calls, 2, timeout=60):
        assert errors == ["recv: has 5 elements, expected 4", "op: avg is defined for floating-point types only, not "
                          "int32", "op: unknown reduction 'median' (known: sum, prod, min, max, avg)",
                          "root: root 7 is not a rank (0-1)", "send: 5 elements do not split into 2 blocks"]
        assert x == [2.0] * 4


def _short_gather_buffer():
    from arborcc.runtime import Communicator
    from arborcc.synth import synthesize
    from arborcc.topology.allocation import induced
    from arborcc.topology.machines import build_machine

    algo = synthesize(induced(build_machine("dgx1v"), ["gpu0", "gpu1"]), collective="gather",
                      strategy="trees").algorithm
    comm = Communicator.from_env(timeout=10)
    try:
        comm.run_algorithm(algo, np.ones(8, np.float32), np.zeros(8, np.float32))  # needs 2 x 8
    except InputError as e:
        error = str(e)
    recv = np.zeros(16, np.float32)
    comm.run_algorithm(algo, np.full(8, comm.rank + 1.0, np.float32), recv)
    return error, recv.tolist()


def test_a_buffer_shorter_than_the_algorithm_needs_is_refused():
    for rank, (error, recv) in enumerate(run_ranks(_short_gather_buffer, 2, timeout=120)):
        assert error == "recv: has 8 elements; this gather of 8 elements per rank block needs 16 (2 blocks)"
        if rank == 0:
            assert recv == [1.0] * 8 + [2.0] * 8


def _store_rank():
    import os
    from datetime import timedelta

    import torch.distributed as dist

    from arborcc.runtime import Communicator

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), n, rank == 0, timedelta(seconds=30))
    comm = Communicator.from_store(dist.PrefixStore("pg0", store), rank, n, timeout=30)
    x = np.full(10, rank + 1.0)
    comm.allreduce(x)
    return x.tolist()


def test_join_through_a_torch_store():
    """How a torch.distributed backend joins: through the store it is given."""
    pytest.importorskip("torch")
    for x in run_ranks(_store_rank, 3, timeout=120):
        assert x == [6.0] * 10
