"""What arborcc does not run goes to gloo with one warning per job for each distinct
fallback, naming the call, its operator and element types, by whichever rank makes it
first - not one per rank."""

from __future__ import annotations

import pytest

from torchjobs import launch

#: each fallback three times on both ranks (a send and a receive: one rank each)
FALLBACKS = """
dist.init_process_group("arborcc")
for _ in range(3):
    a = torch.ones(8, dtype=torch.int8)
    dist.all_reduce(a, op=dist.ReduceOp.BAND)
    b = torch.ones(8, dtype=torch.int8)
    dist.all_reduce(b)
    c = torch.ones(8, dtype=torch.bool)
    dist.broadcast(c, src=0)
    out = torch.empty(3)
    dist.all_to_all_single(out, torch.arange(3.0), [1, 2] if rank == 0 else [2, 1], [1, 2] if rank == 0 else [2, 1])
    g = [torch.empty(4) for _ in range(2)] if rank == 0 else None
    dist.gather(torch.full((4,), float(rank)), g, dst=0)
    p = torch.full((4,), float(rank))
    if rank == 0:
        dist.send(p, 1)
    else:
        dist.recv(p, 0)
    report([float(a[0]), float(b[0]), bool(c[0]), float(p[0])])
dist.destroy_process_group()
"""

EXPECTED = (
    "all_reduce with op BAND on int8 tensors goes to gloo (not in arborcc: reduction operator)",
    "all_reduce with op SUM on int8 tensors goes to gloo (not in arborcc: dtype int8)",
    "broadcast on bool tensors goes to gloo (not in arborcc: dtype bool)",
    "all_to_all_single on float32 tensors goes to gloo (not in arborcc: unequal splits)",
    "gather goes to gloo (not in arborcc: gather and scatter)",
    "send goes to gloo (not in arborcc: point-to-point operations)",
    "recv goes to gloo (not in arborcc: point-to-point operations)",
)


@pytest.mark.timeout(150)
def test_each_distinct_fallback_is_warned_once_in_the_job(tmp_path):
    code, said, err = launch(tmp_path, 2, FALLBACKS, hard_timeout=120)
    assert code == 0, err[-3000:]
    assert said[0] == said[1] == [[1.0, 2.0, True, 0.0]] * 3  # gloo ran them
    warned = [line for line in err.splitlines() if "FallbackWarning: arborcc: " in line]
    for description in EXPECTED:
        lines = [line for line in warned if f"arborcc: {description}; warned once per job, by rank " in line]
        assert len(lines) == 1, (description, warned)
    assert len(warned) == len(EXPECTED), warned
