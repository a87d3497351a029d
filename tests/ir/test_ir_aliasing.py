"""The one normalization of in-place and out-of-place buffers (arborcc.ir.aliasing)."""

import pytest

from arborcc.ir.aliasing import Mode, declared_modes, layouts, rank_layout
from arborcc.ir.model import Algorithm, Buffer, RankProgram


def _algo(coll: str, n: int, k: int, i_chunks: int, o_chunks: int, inplace=True, outofplace=False, root=None):
    ranks = [RankProgram(r, i_chunks, o_chunks, 2) for r in range(n)]
    return Algorithm("t", coll, n, k, ranks, inplace=inplace, outofplace=outofplace, root=root)


def test_declared_modes_follow_the_attributes():
    assert declared_modes(_algo("allreduce", 2, 2, 2, 2, True, True)) == (Mode.OUTOFPLACE, Mode.INPLACE)
    assert declared_modes(_algo("allreduce", 2, 2, 2, 2, False, True)) == (Mode.OUTOFPLACE,)
    assert declared_modes(_algo("allreduce", 2, 2, 2, 2, True, False)) == (Mode.INPLACE,)


def test_inplace_allreduce_file_with_zero_output_chunks_uses_the_input_buffer():
    algo = _algo("allreduce", 4, 8, 8, 0)  # as the public tools write it: o_chunks="0"
    lay = rank_layout(algo, algo.ranks[2], Mode.INPLACE)
    assert (lay.input_chunks, lay.output_chunks, lay.scratch_chunks) == (8, 0, 2)
    assert lay.locate(Buffer.OUTPUT, 5) == (Buffer.INPUT, 5)
    assert lay.locate(Buffer.INPUT, 5) == (Buffer.INPUT, 5)
    assert lay.locate(Buffer.SCRATCH, 1) == (Buffer.SCRATCH, 1)


def test_inplace_allgather_reads_each_ranks_input_from_its_block_of_the_output():
    algo = _algo("allgather", 4, 8, 0, 8)  # i_chunks="0": everything in o
    for lay in layouts(algo, Mode.INPLACE):
        assert (lay.input_chunks, lay.output_chunks) == (0, 8)
        assert lay.locate(Buffer.INPUT, 1) == (Buffer.OUTPUT, 2 * lay.rank + 1)


def test_inplace_reducescatter_leaves_each_ranks_output_in_its_block_of_the_input():
    algo = _algo("reducescatter", 4, 8, 8, 0)
    lay = rank_layout(algo, algo.ranks[3], Mode.INPLACE)
    assert (lay.input_chunks, lay.output_chunks) == (8, 0)
    assert lay.locate(Buffer.OUTPUT, 0) == (Buffer.INPUT, 6)


@pytest.mark.parametrize("coll,sizes", [("allreduce", (8, 8)), ("allgather", (2, 8)), ("reducescatter", (8, 2)),
                                        ("alltoall", (8, 8)), ("gather", (8, 32))])
def test_out_of_place_sizes_are_the_collectives_and_buffers_are_separate(coll, sizes):
    algo = _algo(coll, 4, 8, 0, 0, inplace=False, outofplace=True)
    lay = rank_layout(algo, algo.ranks[1], Mode.OUTOFPLACE)
    assert (lay.input_chunks, lay.output_chunks) == sizes
    assert all(lay.locate(b, 3) == (b, 3) for b in Buffer)


def test_custom_collectives_use_their_declared_buffers_in_both_modes():
    algo = _algo("custom", 2, 3, 5, 7)
    for mode in Mode:
        lay = rank_layout(algo, algo.ranks[0], mode)
        assert (lay.input_chunks, lay.output_chunks) == (5, 7)
        assert lay.locate(Buffer.OUTPUT, 1) == (Buffer.OUTPUT, 1)
