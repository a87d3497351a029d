"""A plan's ``pipeline`` operations unrolled into the iterations the executor runs.

MSCCL++'s executor (``handlePipeline`` in ``execution_kernel.hpp``) runs a pipeline's
inner operations ``nIterations`` times, ``nIterations = ceil(num_chunks x chunk size /
unit_size)``; iteration ``i`` works on bytes ``[i x unit_size, (i + 1) x unit_size)`` of
each of the inner operations' buffers (counted from the buffer's start, cut at its end:
``min(size - offset, unitSize)``, an empty part moves no data). The count depends on the
message size, which a plan does not fix; the IR form takes :data:`PIPELINE_ITERATIONS`
iterations (every chunk cut into that many parts, each iteration on its part of every
buffer), the smallest count at which the iterations' ordering is exercised. A correct
pipeline computes the same result at every count.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from arborcc.ir.mscclpp.plan import BufferRef, ExecutionPlan, Operation

#: iterations of a pipeline in the IR form (module doc)
PIPELINE_ITERATIONS = 2
#: inner operations that still signal when their data part is empty
SIGNALLING_PUTS = ("pws", "pwsf")


def unroll_pipelines(plan: ExecutionPlan, places: dict[tuple[int, int, int], str], group_cut: int,
                     fail: Callable[[str, str], None]) -> ExecutionPlan:
    """``plan`` with every chunk cut into :data:`PIPELINE_ITERATIONS` parts and each
    ``pipeline`` replaced by its iterations; ``places`` ((rank, tb, op) -> where in the
    file) is rewritten for the new operation indices. ``group_cut``: the parts each chunk
    of the file was already cut into (thread-block groups), in which ``num_chunks`` counts."""
    if not any(op.name == "pipeline" for g in plan.gpus for tb in g.threadblocks for op in tb.ops):
        return plan
    from arborcc.limits import limit

    k = PIPELINE_ITERATIONS
    most = max(max(g.input_chunks, g.output_chunks, g.scratch_chunks) for g in plan.gpus)
    if most * k > limit("chunks").value:
        fail("gpus", f"pipelines cut {most} chunks into {most * k}, beyond the chunks limit "
                     f"({limit('chunks').value:,})")

    def scaled(ref: BufferRef) -> BufferRef:
        return dataclasses.replace(ref, index=ref.index * k, size=ref.size * k)

    def scale(op: Operation) -> Operation:
        return dataclasses.replace(op, src=tuple(scaled(b) for b in op.src), dst=tuple(scaled(b) for b in op.dst),
                                   ops=[scale(o) for o in op.ops])

    gpus = []
    for g in plan.gpus:
        tbs = []
        for tb in g.threadblocks:
            ops: list[Operation] = []
            where_of: list[str] = []
            for o, op in enumerate(tb.ops):
                where = places.get((g.id, tb.id, o), f"gpus[{g.id}].threadblocks[{tb.id}].ops[{o}]")
                if op.name != "pipeline":
                    ops.append(scale(op))
                    where_of.append(where)
                    continue
                _unit_size, num_chunks = op.iter_context
                unit = num_chunks * group_cut  # parts of one iteration, after the cut into k
                for i in range(k):
                    for j, inner in enumerate(op.ops):
                        part = iteration(scale(inner), i, unit)
                        if part is not None:
                            ops.append(part)
                            where_of.append(f"{where}.ops[{j}]")
            for o, where in enumerate(where_of):
                places[(g.id, tb.id, o)] = where
            for o in range(len(where_of), len(tb.ops)):
                places.pop((g.id, tb.id, o), None)
            tbs.append(dataclasses.replace(tb, ops=ops))
        gpus.append(dataclasses.replace(g, input_chunks=g.input_chunks * k, output_chunks=g.output_chunks * k,
                                        scratch_chunks=g.scratch_chunks * k, threadblocks=tbs))
    return dataclasses.replace(plan, gpus=gpus)


def iteration(op: Operation, i: int, unit: int) -> Operation | None:
    """``op`` (chunks already cut) on the part iteration ``i`` covers: ``unit`` parts from
    ``i x unit`` of each buffer, cut at its end; None when that moves nothing and the
    operation has no other effect."""
    if not op.src and not op.dst:
        return op  # synchronization: every iteration

    def part(ref: BufferRef) -> BufferRef:
        start = min(i * unit, ref.size)
        return dataclasses.replace(ref, index=ref.index + start, size=min(unit, ref.size - start))

    src, dst = tuple(part(b) for b in op.src), tuple(part(b) for b in op.dst)
    if all(b.size > 0 for b in src + dst):
        return dataclasses.replace(op, src=src, dst=dst)
    if op.name in SIGNALLING_PUTS:
        return Operation("signal", op.channel_type, op.channel_ids)
    return None
