"""The demo's last stage: a synthesized algorithm runs for real on local processes."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from arborcc.ir.aliasing import Mode, declared_modes
from arborcc.ir.model import Algorithm

DEMO_SIZES = (64 << 10, 1 << 20, 16 << 20)


def _run_and_check(algo: Algorithm, count: int, seed: int):
    from arborcc.runtime import Communicator

    comm = Communicator.from_env(timeout=60)
    inputs = [np.random.default_rng([seed, r]).standard_normal(count).astype(np.float32)
              for r in range(comm.world_size)]
    x = inputs[comm.rank].copy()
    inplace = Mode.INPLACE in declared_modes(algo)
    out = x if inplace else np.empty_like(x)
    comm.run_algorithm(algo, x, out)
    want = np.sum(inputs, axis=0, dtype=np.float64)
    return float(np.max(np.abs(out - want))), comm.cross_memory_attach


def run_demo_step(algo: Algorithm, section) -> None:
    """Run ``algo`` (an all-reduce) on as many local processes as it has ranks, check it
    against numpy, and benchmark it next to gloo."""
    from arborcc.bench.backends import run_backend
    from arborcc.bench.protocol import Spec
    from arborcc.bench.report import comparison
    from arborcc.errors import ArborccError
    from arborcc.ir.msccl_xml import write_msccl_xml
    from arborcc.runtime.launch import run_ranks

    n = algo.num_ranks
    section(f"6. {algo.name} for real: {n} local processes, shared memory (arborcc's C++ runtime)")
    count = 1_000_003  # not a multiple of the algorithm's chunks: the remainder runs too
    results = run_ranks(_run_and_check, n, (algo, count, 0), timeout=120)
    err = max(r[0] for r in results)
    print(f"  {count} float32 per rank, summed over {n} ranks: max |error| vs numpy = {err:.2e} "
          f"({'OK' if err < 1e-4 else 'WRONG'}); large messages read from the sender's memory: "
          f"{'yes' if results[0][1] else 'no (cross-memory attach refused)'}")
    fd, path = tempfile.mkstemp(prefix="arborcc-demo-", suffix=".xml")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(write_msccl_xml(algo, "executor"))
        spec = Spec(collective="allreduce", ranks=n, sizes=list(DEMO_SIZES), warmup=2, iters=10, xml=path,
                    timeout=300)
        rows = run_backend("arborcc", spec)
        backends = ["arborcc"]
        try:
            rows += run_backend("gloo", Spec(**{**spec.__dict__, "xml": None}))
            backends.append("gloo")
        except ArborccError as e:
            print(f"  gloo not run: {e}")
    finally:
        os.unlink(path)
    wrong = sum(r.wrong or 0 for r in rows)
    print(f"  bench (float32 sum, median of 10 calls, slowest rank; #wrong {wrong}); "
          f"`arborcc bench -n {n} --backend arborcc --backend gloo` sweeps more")
    print("\n".join("  " + line for line in comparison(spec, rows, backends).splitlines()))
