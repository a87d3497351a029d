"""Recursive halving-doubling all-reduce (Thakur, Rabenseifner and Gropp; BlueConnect's
"halving-doubling"), written in the GC3 DSL with aggregated (multi-count) references.

Reduce-scatter by recursive halving: in round k rank r exchanges with ``r XOR d``
(d = R/2, R/4, ..., 1); each keeps half of the range it still owns (the lower half when
its bit d is 0) and reduces the partner's copy of that half into its own. After log2 R
rounds rank r owns chunk r, fully reduced. All-gather by recursive doubling retraces the
rounds (d = 1, 2, ..., R/2), each rank sending everything it owns to its partner.
Needs a power-of-two number of ranks.
"""

from __future__ import annotations

from arborcc.errors import InputError
from arborcc.ir.model import Buffer
from arborcc.lang import AllReduce, Program, chunk
from arborcc.library.common import positive
from arborcc.library.spec import Built

IN, OUT = Buffer.INPUT, Buffer.OUTPUT


def hd_allreduce(ranks: int, instances: int = 1, protocol: str = "Simple", inplace: bool = True,
                 topology: object = None, name: str | None = None) -> Built:
    R = positive(ranks, "ranks", "hd-allreduce")
    if R & (R - 1):
        raise InputError(f"recursive halving-doubling needs a power-of-two number of ranks, got {R} "
                         f"(use ring-allreduce, or {1 << (R.bit_length() - 1)} or {1 << R.bit_length()} ranks)",
                         source="hd-allreduce", place="ranks")
    name = name or f"hd-allreduce-{R}r-{instances}i"
    with Program(name, AllReduce(R, R, inplace), topology, instances=instances, protocol=protocol) as prog:
        buf = IN
        if not inplace:  # work in the output buffer
            for r in range(R):
                chunk(r, IN, 0, R).copy(r, OUT, 0)
            buf = OUT
        lo, hi = [0] * R, [R] * R
        d = R // 2
        while d >= 1:  # recursive halving: reduce-scatter
            keep = []
            for r in range(R):
                mid = (lo[r] + hi[r]) // 2
                keep.append((lo[r], mid) if r & d == 0 else (mid, hi[r]))
            for r in range(R):
                a, b = keep[r]
                chunk(r, buf, a, b - a).reduce(chunk(r ^ d, buf, a, b - a))
            for r in range(R):
                lo[r], hi[r] = keep[r]
            d //= 2
        d = 1
        while d < R:  # recursive doubling: all-gather
            for r in range(R):
                chunk(r, buf, lo[r], hi[r] - lo[r]).copy(r ^ d, buf, lo[r])
            new = [(min(lo[r], lo[r ^ d]), max(hi[r], hi[r ^ d])) for r in range(R)]
            for r in range(R):
                lo[r], hi[r] = new[r]
            d *= 2
    return Built(prog.compile(), prog)
