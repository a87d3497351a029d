"""IR emission: the compiled code makes the IR's own dataclass objects, replicated for instances."""

import dataclasses

import pytest

from arborcc.ir.model import Dependency, Step, ThreadBlock
from arborcc.lang import AllReduce, Program, chunk
from arborcc.lang.buffers import INPUT, SCRATCH


def _reduce_after_three_blocks(instances: int):
    """Rank 0 receives into scratch slot 0 from rank 1 and sends it on to rank 3, then
    receives into slot 1 what rank 3 passed through rank 2 (three thread blocks), then
    reduces slot 1 into slot 0: the reduce joins the last receive's block and waits on
    the other two (a dependency and a nop)."""
    with Program("p", AllReduce(4, 1, inplace=True), instances=instances, instr_fusion=False) as prog:
        chunk(1, INPUT, 0).copy(0, SCRATCH, 0)
        chunk(0, SCRATCH, 0).copy(3, SCRATCH, 0)
        chunk(3, INPUT, 0).copy(2, SCRATCH, 0).copy(0, SCRATCH, 1)
        chunk(0, SCRATCH, 0).reduce(chunk(0, SCRATCH, 1))
    return prog


def _same_as_constructed(obj) -> None:
    """``obj`` has exactly its class's fields, set in field order, as its class's own
    constructor sets them (equality and repr follow from the fields)."""
    cls = type(obj)
    assert list(vars(obj)) == [f.name for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("instances", [1, 2])
def test_emitted_objects_are_the_dataclasses_own(instances):
    prog = _reduce_after_three_blocks(instances)
    algo = prog.compile()
    assert prog.compile_stats.nops == 1  # per instance
    deps = 0
    for rp in algo.ranks:
        assert [tb.id for tb in rp.threadblocks] == list(range(len(rp.threadblocks)))
        for tb in rp.threadblocks:
            assert type(tb) is ThreadBlock
            _same_as_constructed(tb)
            for s in tb.steps:
                assert type(s) is Step
                _same_as_constructed(s)
                if s.dep is not None:
                    deps += 1
                    assert type(s.dep) is Dependency
                    with pytest.raises(dataclasses.FrozenInstanceError):
                        s.dep.tb = 0
    assert deps == 4 * instances  # the reduce, its nop, the sends forwarding a received chunk (ranks 0 and 2)
