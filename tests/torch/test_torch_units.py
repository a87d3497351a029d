"""In-process parts of arborcc.torch: the package loads without torch, host layouts,
torch's operators and element types."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborcc.torch.hosts import HostLayout, layout_of_topology, machine_name


#: a Python without torch: every import of torch fails as it does where torch is not installed
WITHOUT_TORCH = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTorch())
"""


def test_package_imports_without_torch_installed_and_warns_nothing():
    code = WITHOUT_TORCH + "import arborcc.torch, arborcc.torch.hosts; arborcc.torch.__dir__()"
    run = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stderr == "", run.stderr


def test_importing_arborcc_torch_before_torch_registers_the_backend():
    code = ("import sys, arborcc.torch\nimport torch.distributed as dist\n"
            "sys.exit('arborcc' not in dist.Backend.backend_list)")
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}  # not through the entry point, if installed
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0


def test_a_failing_registration_warns_and_never_raises(monkeypatch):
    pytest.importorskip("torch")
    import torch.distributed as dist

    from arborcc.torch.registration import autoload

    def broken(*args, **kwargs):
        raise RuntimeError("a torch without custom backends")

    monkeypatch.setattr(dist.Backend, "backend_list", [b for b in dist.Backend.backend_list if b != "arborcc"])
    monkeypatch.setattr(dist.Backend, "register_backend", broken)
    with pytest.warns(RuntimeWarning, match="'arborcc' was not registered.*a torch without custom backends"):
        autoload()


def test_host_layout_groups_and_peers():
    layout = HostLayout(((0, 1, 2), (3, 4, 5)))
    assert layout.host_of(4) == 1 and layout.uniform
    assert layout.peers(1) == (1, 4) and layout.peers(5) == (2, 5)
    uneven = HostLayout(((0, 1, 2), (3,)))
    assert not uneven.uniform and uneven.peers(2) == (2,) and uneven.peers(0) == (0, 3)


def test_machine_name_separates_torchrun_nodes_and_obeys_arborcc_host():
    assert machine_name({"ARBORCC_HOST": "h7", "GROUP_RANK": "1"}) == "h7"
    assert machine_name({"GROUP_RANK": "0"}) != machine_name({"GROUP_RANK": "1"})


def test_layout_of_a_two_host_cpu_topology():
    from arborcc.topology.sysfs import CpuHost, cpu_topology

    hosts = [CpuHost("a", ((0, (0, 1)),), (0, 1), (0, 1)), CpuHost("b", ((0, (0, 1)),), (2, 3), (0, 1))]
    assert layout_of_topology(cpu_topology(hosts)).hosts == ((0, 1), (2, 3))


def test_operators_and_dtypes_arborcc_runs():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from arborcc.torch.ops import reduction_name, unsupported

    assert reduction_name(dist.ReduceOp.AVG) == "avg" and reduction_name(dist.ReduceOp.PRODUCT) == "prod"
    assert reduction_name(dist.ReduceOp.BXOR) is None
    assert unsupported([torch.ones(3, dtype=torch.bfloat16)], "avg") is None
    assert unsupported([torch.ones(3, dtype=torch.int32)], "avg") == "avg of int32"
    assert unsupported([torch.ones(3, dtype=torch.int8)]) == "dtype int8"
    assert unsupported([torch.ones(4, 4).t()]) == "non-contiguous tensor"
    assert unsupported([torch.ones(3)], None) == "reduction operator"


def test_a_fallback_names_the_call_its_operator_and_element_types():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from arborcc.torch.fallback import fallback_description

    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.BAND
    assert fallback_description("all_reduce", "reduction operator", [torch.ones(2, dtype=torch.int8)],
                                opts.reduceOp) == \
        "all_reduce with op BAND on int8 tensors goes to gloo (not in arborcc: reduction operator)"
    mixed = [torch.ones(2, dtype=torch.int16), torch.ones(2, dtype=torch.bool)]
    assert fallback_description("broadcast", "dtype int16", mixed) == \
        "broadcast on bool and int16 tensors goes to gloo (not in arborcc: dtype int16)"
    assert fallback_description("send", "point-to-point operations") == \
        "send goes to gloo (not in arborcc: point-to-point operations)"


FALLBACK_CALLS = st.tuples(
    st.sampled_from(["all_reduce", "reduce", "broadcast", "all_to_all_single", "send", "gather"]),
    st.sampled_from(["dtype int8", "reduction operator", "unequal splits", "point-to-point operations"]),
    st.lists(st.sampled_from(["float32", "float16", "bfloat16", "int8", "int16", "int64", "uint8", "bool",
                              "complex64"]), max_size=3),
    st.none() | st.sampled_from(["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@settings(max_examples=150, deadline=None, database=None)
@given(FALLBACK_CALLS, FALLBACK_CALLS)
def test_distinct_fallbacks_are_described_apart(a, b):
    """The description is the key a fallback is warned under once per job: two fallbacks
    share it only when they are the same call, reason, element types and operator."""
    import torch
    import torch.distributed as dist

    from arborcc.torch.fallback import fallback_description

    def described(call):
        collective, reason, dtypes, op = call
        tensors = [torch.empty(0, dtype=getattr(torch, name)) for name in dtypes]
        kind = None if op is None else getattr(dist.ReduceOp.RedOpType, op)
        text = fallback_description(collective, reason, tensors, kind)
        assert all(name in text for name in dtypes) and (op is None or f"with op {op} " in text)
        return text

    def key(call):
        return call[0], call[1], frozenset(call[2]), call[3]

    assert (described(a) == described(b)) == (key(a) == key(b))


def test_plan_from_a_tuned_directory(tmp_path):
    """ARBORCC_PLAN may name the directory `arborcc tune` writes (XML files and plan.json)."""
    import json

    from arborcc.ir.aliasing import Mode
    from arborcc.ir.msccl_xml import write_msccl_xml
    from arborcc.library.ring import ring_allreduce
    from arborcc.torch.backend import plan_from_env

    algo = ring_allreduce(4, inplace=True).algorithm
    (tmp_path / "ring.xml").write_text(write_msccl_xml(algo))
    (tmp_path / "plan.json").write_text(json.dumps({
        "format": "arborcc-plan", "version": 1, "collective": "allreduce", "ranks": 4,
        "algorithms": [{"file": "ring.xml", "min_bytes": 0, "max_bytes": 0}]}))
    plan = plan_from_env({"ARBORCC_PLAN": str(tmp_path)})
    assert plan.select("allreduce", 4, Mode.INPLACE, 4096, 4).name == algo.name
    assert plan_from_env({}) is None


def _exchange(reply_first: bool):
    """Rank 0 sends chunk 0 to rank 1 and receives rank 1's message into chunk 0; rank 1
    receives rank 0's message, then replies (``reply_first``: replies before receiving)."""
    from arborcc.ir.model import Op
    from arborcc.torch.executor import LoweredStep, LoweredThreadBlock

    def step(op):
        return LoweredStep(op, (0, 0), (0, 0), 1, None, False, False)

    rank0 = [LoweredThreadBlock(1, 1, 0, (step(Op.SEND), step(Op.RECV)))]
    ops1 = (Op.SEND, Op.RECV) if reply_first else (Op.RECV, Op.SEND)
    rank1 = [LoweredThreadBlock(0, 0, 0, tuple(step(op) for op in ops1))]
    return rank0, rank1


def test_a_reply_may_land_where_the_message_it_answers_was_sent_from():
    """The executor receives into memory a send in flight still reads only when the peer
    sends that message after it has received the send (no temporary, no copy)."""
    from arborcc.ir.aliasing import Mode
    from arborcc.library.direct import owner_allreduce
    from arborcc.runtime.lowering import lower_rank
    from arborcc.torch.executor import lowered_program, received_before_reply

    rank0, rank1 = _exchange(reply_first=False)
    assert received_before_reply(0, rank0, {1: rank1}.get) == {(0, 1): frozenset({(0, 0)})}
    rank0, rank1 = _exchange(reply_first=True)  # the messages cross: rank 1's may arrive while rank 0's is read
    assert received_before_reply(0, rank0, {1: rank1}.get) == {}

    algo = owner_allreduce(4, True)  # each rank gets chunk p back from its owner p after sending it there
    programs = {p: lowered_program(lower_rank(algo, p, Mode.INPLACE)) for p in range(4)}
    safe = received_before_reply(0, programs[0], programs.get)
    assert safe == {(t, 3): frozenset({(t, 0)}) for t in range(3)}


def test_free_threads_starts_threads_on_the_cpus_from_before_pinning(monkeypatch):
    import os
    import threading

    from arborcc.torch import affinity

    before = os.sched_getaffinity(0)
    seen = []

    def started():
        t = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        t.start()
        t.join()

    monkeypatch.setattr(affinity, "cpus_before_pinning", None)
    with affinity.free_threads():  # nothing recorded: nothing changes
        started()
    assert seen[-1] == before
    affinity.remember_affinity()
    affinity.remember_affinity()  # the first record stays
    assert affinity.cpus_before_pinning == frozenset(before)
    one = {min(before)}
    os.sched_setaffinity(0, one)  # as the runtime pins a rank
    try:
        with affinity.free_threads():
            started()
        assert seen[-1] == before and os.sched_getaffinity(0) == one  # the caller stays pinned
        started()
        assert seen[-1] == one
    finally:
        os.sched_setaffinity(0, before)


def test_executor_helper_threads_run_on_the_cpus_from_before_pinning(monkeypatch):
    import os
    import queue

    from arborcc.torch import affinity
    from arborcc.torch.executor import Posters, Waiters

    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("needs two CPUs to tell a pinned thread from a free one")

    class Work:
        def wait(self):
            seen.append(("waiting", os.sched_getaffinity(0)))

    def post():
        seen.append(("posting", os.sched_getaffinity(0)))
        return Work()

    seen: list = []
    monkeypatch.setattr(affinity, "cpus_before_pinning", frozenset(before))
    one = {min(before)}
    os.sched_setaffinity(0, one)  # the calling thread, pinned as the runtime pins a rank
    try:
        done: queue.SimpleQueue = queue.SimpleQueue()
        Posters(Waiters()).submit(1, "send", post, 7, done)
        assert done.get(timeout=10) == (7, None)
        assert seen == [("posting", before), ("waiting", before)]
        assert os.sched_getaffinity(0) == one
    finally:
        os.sched_setaffinity(0, before)
