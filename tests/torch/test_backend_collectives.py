"""Every collective through the "arborcc" backend equals gloo's result, for every element
type torch has on CPU and every reduction; what arborcc does not run goes to gloo with
one warning per job for each kind of call; async_op and Work futures; DDP unchanged on the backend;
several process groups of one job, each with its own communicator."""

from __future__ import annotations

import pytest

from support.segments import leftovers, segments
from support.shared_work import once
from torchjobs import launch

COLLECTIVES = r"""
gloo = dist.new_group(backend="gloo")
w = dist.get_world_size()
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.complex64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.AVG,
       dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
SIZES = [1, 4099]  # fewer elements than ranks (empty blocks), and blocks of unequal sizes
compared, skipped, wrong = 0, set(), []

def data(dtype, n, seed, op=None):
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    lo, hi = (1, 3) if op is dist.ReduceOp.PRODUCT else ((0, 4) if dtype is torch.uint8 else (-3, 4))
    x = torch.randint(lo, hi, (n,), generator=g)  # small integers: every sum is exact, in any order
    return x.to(dtype)

def gloo_result(what, fn, op, dtype):
    out = attempt(what, lambda: fn(op, gloo))
    if out is None and op is dist.ReduceOp.AVG and dtype.is_floating_point:  # gloo's SUM over the rank count
        out = attempt(what, lambda: [o / w for o in fn(dist.ReduceOp.SUM, gloo)])
    return out

def check(what, mine, theirs):
    global compared
    if theirs is None or mine is None:  # a combination gloo refuses: arborcc refuses it too
        if (theirs is None) != (mine is None):
            wrong.append(f"{what}: {'only gloo' if mine is None else 'only arborcc'} ran it")
        return
    for a, b in zip(mine, theirs):
        compared += 1
        if a.dtype != b.dtype and b.is_floating_point():
            b = b.to(a.dtype)
        if not torch.equal(a, b):
            wrong.append(f"{what}: {a.flatten()[:6].tolist()} != {b.flatten()[:6].tolist()}")

def attempt(what, fn):
    try:
        return fn()
    except (RuntimeError, ValueError) as e:  # gloo does not run this combination either
        skipped.add(f"{what}: {str(e).splitlines()[0][:80]}")
        return None

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for dtype in DTYPES:
        for n in SIZES:
            seed = n * 31 + rank
            for op in OPS:
                x = data(dtype, n, seed, op)
                def ar(o, group=None):
                    t = x.clone(); dist.all_reduce(t, op=o, group=group); return [t]
                def rd(o, group=None):
                    t = x.clone(); dist.reduce(t, dst=1, op=o, group=group); return [t] if rank == 1 else []
                def rs(o, group=None):
                    big = data(dtype, w * n, seed + 1, op); t = torch.empty(n, dtype=dtype)
                    dist.reduce_scatter_single(t, big, op=o, group=group); return [t]
                def rsl(o, group=None):
                    parts = [data(dtype, n, seed + 2 + i, op) for i in range(w)]; t = torch.empty(n, dtype=dtype)
                    dist.reduce_scatter(t, parts, op=o, group=group); return [t]
                for name, fn in (("all_reduce", ar), ("reduce", rd), ("reduce_scatter_single", rs),
                                 ("reduce_scatter", rsl)):
                    what = f"{name} {dtype} {op} n={n}"
                    ref = gloo_result(what, fn, op, dtype)
                    check(what, attempt(what, lambda: fn(op)), ref)
            x = data(dtype, n, seed)
            def bc(group=None):
                t = x.clone(); dist.broadcast(t, src=w - 1, group=group); return [t]
            def ag(group=None):
                t = torch.empty(w * n, dtype=dtype); dist.all_gather_single(t, x, group=group); return [t]
            def agl(group=None):
                ts = [torch.empty(n, dtype=dtype) for _ in range(w)]; dist.all_gather(ts, x, group=group); return ts
            def a2a(group=None):
                src = data(dtype, w * n, seed + 5); t = torch.empty(w * n, dtype=dtype)
                dist.all_to_all_single(t, src, group=group); return [t]
            for name, fn in (("broadcast", bc), ("all_gather_single", ag), ("all_gather", agl),
                             ("all_to_all_single", a2a)):
                what = f"{name} {dtype} n={n}"
                check(what, attempt(what, fn), attempt(what, lambda: fn(gloo)))
    # unequal all-to-all splits: gloo's, warned once
    splits = [r + 1 for r in range(w)]
    src = torch.arange(sum(splits), dtype=torch.float32) + 100 * rank
    def uneven(group=None):
        t = torch.empty((rank + 1) * w)
        dist.all_to_all_single(t, src, [(rank + 1)] * w, splits, group=group); return [t]
    check("all_to_all_single unequal splits", uneven(), uneven(gloo))
    check("all_to_all_single unequal splits (again)", uneven(), uneven(gloo))
    # point-to-point: gloo's
    t = torch.full((4,), float(rank))
    if rank == 0:
        dist.send(t, 1)
    elif rank == 1:
        dist.recv(t, 0)
        check("send/recv", [t], [torch.zeros(4)])
    dist.barrier()
fallback = sorted({str(c.message) for c in caught if issubclass(c.category, arborcc.torch.FallbackWarning)})
counts = {}
for c in caught:
    if issubclass(c.category, arborcc.torch.FallbackWarning):
        counts[str(c.message)] = counts.get(str(c.message), 0) + 1

# async_op: the Work completes, its future holds the tensors; calls stay in order
x = torch.ones(1 << 16)
works = [dist.all_reduce(x, async_op=True) for _ in range(3)]
y = torch.ones(10); dist.all_reduce(y)  # synchronous, after the queued ones
for wk in works:
    wk.wait()
fut_value = works[-1].get_future().wait()[0]
# the prepared synchronous all-reduce: one shape again and again, operators interleaved,
# then a non-contiguous tensor of that shape and type (not the prepared call: gloo's)
prepared = []
for k in range(3):
    for o in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.AVG):
        t = torch.full((64,), float(rank + k)); dist.all_reduce(t, op=o); prepared.append(float(t[-1]))
with warnings.catch_warnings():
    warnings.simplefilter("ignore", arborcc.torch.FallbackWarning)
    nc = torch.full((8, 8), float(rank)).t(); nc[0, 1] = 10.0 * rank; dist.all_reduce(nc)
prepared += [float(nc[0, 0]), float(nc[0, 1])]
report({"prepared": prepared, "compared": compared, "wrong": wrong[:5], "nwrong": len(wrong), "skipped": sorted(skipped)[:3],
        "fallback": fallback, "repeated": max(counts.values(), default=0),
        "async": [float(x[0]), float(y[0]), float(fut_value[0]), all(wk.is_completed() for wk in works)],
        "backend": dist.get_backend()})
"""


@pytest.mark.timeout(400)
def test_every_collective_dtype_and_op_equals_gloo(job):
    code, said, err, left = job
    assert code == 0, err[-3000:]
    assert left == set(), "an arborcc shared-memory segment was left in /dev/shm"
    for rank in range(4):
        r, _, _ = said[rank]
        assert r["backend"] == "arborcc"
        assert r["nwrong"] == 0, r["wrong"]
        assert r["compared"] > 450, r["compared"]  # 484 with torch 2.13: what gloo runs of the combinations
        assert r["async"] == [64.0, 4.0, 64.0, True]
        w = 4
        assert r["prepared"] == [v for k in range(3) for v in (w * k + 6.0, k + 3.0, (w * k + 6.0) / w)] + [6.0, 60.0]
    # what arborcc lacks went to gloo, each kind warned about once in the job (by one rank)
    warned = [m for rank in range(4) for m in said[rank][0]["fallback"]]
    assert all(said[rank][0]["repeated"] <= 1 for rank in range(4))
    described = [m.split("; warned once per job")[0] for m in warned]
    assert len(described) == len(set(described)), described
    joined = " ".join(warned)
    for reason in ("dtype int8", "dtype bool", "reduction operator", "unequal splits", "point-to-point"):
        assert reason in joined
    assert "dtype float32" not in joined and "dtype bfloat16" not in joined


EXECUTOR = r"""
from arborcc.library.allpairs import allpairs_allreduce
from arborcc.library.halving_doubling import hd_allreduce
from arborcc.library.ring import ring_allgather, ring_allreduce, ring_reducescatter
from arborcc.torch.executor import GroupExecutor
gloo = dist.new_group(backend="gloo")
ex = GroupExecutor(gloo, timeout=60, tile_bytes=16 << 10)  # several tiles per chunk
comm = dist.group.WORLD.transport.local  # this host's shared-memory communicator
w = dist.get_world_size()
results = []
for built in (ring_allreduce(w, channels=2, inplace=True), allpairs_allreduce(w), hd_allreduce(w),
              ring_allgather(w), ring_reducescatter(w)):
    algo = built.algorithm
    for dtype in (torch.float32, torch.float64, torch.int64):
        for n in (w * 6, w * 6 * 2000 + 5 * w):
            blocks = w if algo.collective == "reducescatter" else 1
            x = (torch.randn(n * blocks, generator=torch.Generator().manual_seed(rank + n)) * 100).to(dtype)
            if algo.collective == "allreduce":  # the library's all-reduces run in place
                a, b = x.clone(), x.clone()
                ex.run_algorithm(algo, a)
                comm.run_algorithm(algo, b)
            else:
                out = w * n if algo.collective == "allgather" else n
                a, b = torch.zeros(out, dtype=dtype), torch.zeros(out, dtype=dtype)
                ex.run_algorithm(algo, x.clone(), a)
                comm.run_algorithm(algo, x.clone(), b)
            results.append([algo.name, str(dtype), n, torch.equal(a, b)])
# batched issue (the path for back-ends without tags, as NCCL): one connection per peer
batched = GroupExecutor(gloo, timeout=60, tagged=False)
for built in (ring_allreduce(w, channels=1, inplace=True), allpairs_allreduce(w)):
    x = torch.randn(w * 6 * 50 + 3, generator=torch.Generator().manual_seed(rank))
    a, b = x.clone(), x.clone()
    batched.run_algorithm(built.algorithm, a)
    comm.run_algorithm(built.algorithm, b)
    results.append([built.algorithm.name + " (batched)", "float32", x.numel(), torch.equal(a, b)])
# the plan's collectives on the executor
x = torch.randn(1001, generator=torch.Generator().manual_seed(rank))
a, b = x.clone(), x.clone()
ex.allreduce(a, "max"); dist.all_reduce(b, op=dist.ReduceOp.MAX, group=gloo)
results.append(["allreduce max (plan)", "float32", 1001, torch.equal(a, b)])
report(results)
"""

#: several groups of one job: the same ranks again, and two of them
GROUPS = r"""
again = dist.new_group(backend="arborcc")
pair = dist.new_group(ranks=[0, 1], backend="arborcc")
sums = []
for value, group in ((1.0, None), (10.0, again), (100.0, pair), (1000.0, None)):
    if group is pair and rank not in (0, 1):
        continue
    x = torch.full((8,), value * (rank + 1))
    dist.all_reduce(x, group=group)
    sums.append(x[0].item())
report(sums)
"""

#: the checks in one job of 4 ranks (a job's start, torch's import in its fork server, is most
#: of a check's time): the collectives' report first, then the executor's, then the groups'
JOB = "arborcc.torch.init(timeout=60)\n" + COLLECTIVES + EXECUTOR + GROUPS + "dist.destroy_process_group()\n"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(exit status, each rank's reports, the ranks' stderr, what the job left in /dev/shm):
    run once in the session, whichever xdist worker the tests go to."""
    def run():
        before = segments()
        code, said, err = launch(tmp_path_factory.mktemp("collectives"), 4, JOB, hard_timeout=360)
        return code, said, err, leftovers(before)

    return once(tmp_path_factory, "torch-collectives-job", run)


@pytest.mark.timeout(400)
def test_executor_runs_algorithms_as_the_runtime_does(job):
    """The torch.distributed executor over gloo gives the shared-memory runtime's results, bit for bit."""
    code, said, err, left = job
    assert code == 0, err[-3000:]
    assert left == set(), "an arborcc shared-memory segment was left in /dev/shm"
    for rank in range(4):
        rows = said[rank][1]
        assert len(rows) == 33
        assert all(ok for *_, ok in rows), [r for r in rows if not r[-1]]


@pytest.mark.timeout(400)
def test_several_torch_process_groups_of_one_job_each_have_their_own_communicator(job):
    """torch hands each group's backend a store under the group's own prefix, so the
    segment name one group publishes never reaches another."""
    code, said, err, left = job
    assert code == 0, err[-3000:]
    assert [said[rank][2] for rank in range(4)] == [[10.0, 100.0, 300.0, 10000.0]] * 2 + [[10.0, 100.0, 10000.0]] * 2
