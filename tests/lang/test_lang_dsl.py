"""The chunk DSL: references, copy/reduce, postconditions, and misuse caught at the user's line."""

import inspect

import pytest

from arborcc.errors import ProgramError
from arborcc.ir.model import Buffer
from arborcc.lang import (AllGather, AllReduce, AllToAll, AllToNext, Broadcast, Chunk, Collective, Gather,
                          Program, Reduce, ReduceScatter, Scatter, chunk, create_scratch, current_program,
                          parallelize)
from arborcc.topology.model import GB, DeviceKind, Device, LinkKind, TopologyBuilder

IN, OUT, SC = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
FILE = "test_lang_dsl.py"


def next_line() -> int:
    """The line after the caller's."""
    return inspect.currentframe().f_back.f_lineno + 1


def ring_allreduce(n: int, inplace: bool = True) -> Program:
    with Program("ring", AllReduce(n, n, inplace)) as prog:
        for i in range(n):
            c = chunk((i + 1) % n, IN, i)
            for step in range(2, n + 1):
                r = (i + step) % n
                own = chunk(r, IN, i)
                if step == n and not inplace:
                    own = own.copy(r, OUT, i)
                c = own.reduce(c)
            for step in range(1, n):
                c = c.copy((i + step) % n, OUT, i)
    return prog


# --- references and values ---------------------------------------------------------------
def test_chunk_returns_reference_or_none():
    with Program("p", AllGather(3, 1)):
        ref = chunk(1, IN, 0)
        assert (ref.rank, ref.buffer, ref.index, ref.size) == (1, IN, 0, 1)
        assert chunk(1, OUT, 2) is None  # output starts uninitialized
        assert chunk(0, SC, 5) is None  # scratch too, whatever its index
        assert chunk(1, "in", 0) == ref and chunk(1, "input", 0) == ref


def test_copy_and_reduce_move_values():
    with Program("p", AllReduce(2, 1)) as prog:
        a = chunk(0, IN, 0)
        b = a.copy(1, SC, 0)
        assert b.rank == 1 and b.buffer is SC and b.values() == [Chunk(0, 0)]
        c = chunk(1, IN, 0).reduce(b)
        assert c.values()[0] == Chunk(0, 0).reduce(1, Chunk(1, 0))
        assert (c.rank, c.index) == (1, 0)  # reduce returns the reference it was called on
    assert prog.num_ops == 2


def test_ring_allreduce_postcondition_holds():
    for n in (2, 3, 5):
        for inplace in (True, False):
            assert ring_allreduce(n, inplace).check()


def test_check_reports_missing_chunks(capsys):
    with Program("incomplete", AllGather(3, 1)) as prog:
        for r in range(3):
            chunk(r, IN, 0).copy(r, OUT, r)
    assert not prog.check()
    assert any("rank 0 output chunk 1" in e for e in prog.check_errors)
    assert "expected input chunk of rank 1" in capsys.readouterr().out


def test_check_catches_a_double_reduction():
    with Program("double", AllReduce(2, 1, inplace=True)) as prog:
        x = chunk(1, IN, 0)
        y = chunk(0, IN, 0).reduce(x)
        y = y.reduce(chunk(1, IN, 0))  # rank 1's contribution twice
        y.copy(1, IN, 0)
    assert not prog.check()


def test_multicount_split_and_group():
    with Program("p", AllToAll(2, 2)):
        big = chunk(0, IN, 0, 4)
        parts = big.split(2)
        assert [(p.index, p.size) for p in parts] == [(0, 2), (2, 2)]
        again = parts[1].group(parts[0])
        assert (again.index, again.size) == (0, 4)
        with pytest.raises(ProgramError, match="equal parts"):
            big.split(3)
        far = chunk(0, IN, 3)
        with pytest.raises(ProgramError, match="not contiguous"):
            chunk(0, IN, 0).group(far)


def test_named_scratch_regions_append_and_grow():
    with Program("p", AllGather(2, 1)) as prog:
        a = chunk(0, IN, 0).copy(1, "relay")  # index -1 on scratch: append
        b = chunk(1, IN, 0).copy(1, "relay")
        assert (a.index, b.index) == (0, 1)
        assert create_scratch(0, "other") == "other"
        assert prog.buffer_names[3:] == ["relay", "other"]
        assert prog.buffer_size(1, prog.code_of("relay")) == 2


def test_inplace_aliasing():
    with Program("p", AllGather(3, 2, inplace=True)):
        ref = chunk(2, IN, 1)  # the input of rank 2 is block 2 of its output
        assert (ref.buffer, ref.index) == (OUT, 5)
    with Program("p", ReduceScatter(3, 2, inplace=True)):
        ref = chunk(1, OUT, 0)
        assert (ref.buffer, ref.index) == (IN, 2)
    with Program("p", AllReduce(2, 2, inplace=True)):
        assert chunk(0, OUT, 1).buffer is IN


@pytest.mark.parametrize("collective, sizes", [
    (AllReduce(3, 2), (2, 2)), (AllGather(3, 2), (2, 6)), (ReduceScatter(3, 2), (6, 2)),
    (AllToAll(3, 2), (6, 6)), (Broadcast(3, 2, root=1), (2, 2)), (Reduce(3, 2, root=2), (2, 2)),
    (Gather(3, 2, root=0), (2, 6)), (Scatter(3, 2, root=0), (6, 2)), (AllToNext(3, 2), (2, 2)),
])
def test_collective_signatures(collective, sizes):
    prog = Program("sig", collective)
    assert (prog.input_sizes[0], prog.output_sizes[0]) == sizes


def test_user_defined_collective():
    class Shift(Collective):
        def init_buffers(self):
            return [{IN: [Chunk(r, 0)], OUT: [None]} for r in range(self.num_ranks)]

        def expected_output(self, rank):
            return [Chunk((rank - 1) % self.num_ranks, 0)]

    with Program("shift", Shift(4, 1)) as prog:
        for r in range(4):
            chunk(r, IN, 0).copy((r + 1) % 4, OUT, 0)
    assert prog.check()
    assert prog.compile().collective == "custom"


def test_parallelize_records_lanes():
    with Program("p", AllReduce(2, 2)) as prog:
        with parallelize(2):
            chunk(0, IN, 0).copy(1, SC, 0)
            with parallelize(3):
                chunk(0, IN, 1).copy(1, SC, 1)
        chunk(1, IN, 0).copy(0, SC, 0)
    assert [prog.op(i).lanes for i in range(3)] == [2, 6, 1]


# --- misuse is reported at the user's line ------------------------------------------------
def test_stale_reference():
    with Program("p", AllReduce(3, 1, inplace=True)):
        old = chunk(1, IN, 0)
        line_overwrite = next_line()
        chunk(0, IN, 0).copy(1, IN, 0)
        line = next_line()
        with pytest.raises(ProgramError) as e:
            old.copy(2, IN, 0)
    msg = str(e.value)
    assert msg.startswith(f"{FILE}:{line + 1}: stale reference to chunk (rank 1, input, 0)")
    assert f"overwritten at {FILE}:{line_overwrite}" in msg


def test_reduce_keeps_the_reference_it_returns_fresh():
    with Program("p", AllReduce(2, 1, inplace=True)):
        acc = chunk(0, IN, 0)
        acc.reduce(chunk(1, IN, 0))
        acc.copy(1, IN, 0)  # acc was refreshed by reduce: no error


def test_uninitialized_read():
    with Program("p", AllGather(2, 1)):
        ref = chunk(0, IN, 0).copy(0, SC, 0)
        two = chunk(0, SC, 0, 2)  # slot 1 never written
        line = next_line()
        with pytest.raises(ProgramError) as e:
            two.copy(1, OUT, 0)
    assert str(e.value).startswith(f"{FILE}:{line + 1}: chunk (rank 0, scratch, 1) is uninitialized")
    assert ref is not None


def test_reduce_into_partly_uninitialized_chunks():
    with Program("p", AllToAll(2, 2)):
        chunk(0, IN, 0).copy(0, SC, 0)
        acc = chunk(0, SC, 0, 2)  # slot 1 is empty
        with pytest.raises(ProgramError, match=r"chunk \(rank 0, scratch, 1\) is uninitialized"):
            acc.reduce(chunk(1, IN, 0, 2))


def test_index_out_of_range():
    with Program("p", AllReduce(2, 2)):
        line = next_line()
        with pytest.raises(ProgramError) as e:
            chunk(0, IN, 1, 2)
        assert str(e.value) == (f"{FILE}:{line + 1}: chunk index 1 (count 2) is out of range: "
                                f"the input buffer of rank 0 has 2 chunks")
        with pytest.raises(ProgramError, match="out of range"):
            chunk(0, IN, 0).copy(1, OUT, 2)
        with pytest.raises(ProgramError, match="rank 5 is not a rank"):
            chunk(5, IN, 0)
        with pytest.raises(ProgramError, match="non-negative"):
            chunk(0, IN, -1)


def test_mismatched_counts():
    with Program("p", AllReduce(2, 2)):
        line = next_line()
        with pytest.raises(ProgramError) as e:
            chunk(0, IN, 0, 2).reduce(chunk(1, IN, 0))
    assert str(e.value).startswith(f"{FILE}:{line + 1}: reduce of 1 chunks (rank 1, input, 0) into 2 chunks")


def test_no_link_in_link_matrix():
    line_matrix = [[0, 1, 0], [0, 0, 1], [1, 0, 0]]  # a directed ring
    with Program("p", AllGather(3, 1), line_matrix):
        chunk(0, IN, 0).copy(1, OUT, 0)
        line = next_line()
        with pytest.raises(ProgramError) as e:
            chunk(0, IN, 0).copy(2, OUT, 0)
    assert str(e.value) == (f"{FILE}:{line + 1}: copy of chunk (rank 0, input, 0) to rank 2: "
                            f"the topology has no link from rank 0 to rank 2")


def test_no_route_in_topology():
    b = TopologyBuilder("two-islands")
    for i in range(4):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, index=i))
    b.connect("gpu0", "gpu1", LinkKind.NVLINK, 25 * GB)
    b.connect("gpu2", "gpu3", LinkKind.NVLINK, 25 * GB)
    topo = b.build()
    with Program("p", AllReduce(4, 1), topo):
        chunk(1, IN, 0).copy(0, SC, 0)
        line = next_line()
        with pytest.raises(ProgramError) as e:
            chunk(0, SC, 0).reduce(chunk(3, IN, 0))
    assert str(e.value) == (f"{FILE}:{line + 1}: reduce of chunk (rank 3, input, 0) into rank 0: "
                            f"the topology has no route from gpu3 to gpu0")


def test_topology_rank_count_must_match():
    with pytest.raises(ProgramError, match="a link matrix must be 2x2"):
        Program("p", AllReduce(2, 1), [[0, 1, 1], [1, 0, 1], [1, 1, 0]])


def test_overlapping_copy_and_self_reduce():
    with Program("p", AllToAll(2, 2)):
        with pytest.raises(ProgramError, match="overlapping"):
            chunk(0, IN, 0, 2).copy(0, IN, 1)
        with pytest.raises(ProgramError, match="overlapping"):
            chunk(0, IN, 0).reduce(chunk(0, IN, 0))
        same = chunk(0, IN, 0)
        assert same.copy(0, IN, 0) is same  # onto itself: nothing to do


def test_bad_hints_and_arguments():
    with Program("p", AllReduce(2, 1)):
        with pytest.raises(ProgramError, match="sendtb must be an integer"):
            chunk(0, IN, 0).copy(1, SC, 0, sendtb="x")
        with pytest.raises(ProgramError, match="needs an index"):
            chunk(0, IN, 0).copy(1, OUT)
        with pytest.raises(ProgramError, match="needs a chunk reference, got an empty slot"):
            chunk(0, IN, 0).reduce(None)
        with pytest.raises(ProgramError, match="parallelize needs a positive integer"):
            with parallelize(0):
                pass


def test_dsl_outside_a_program():
    line = next_line()
    with pytest.raises(ProgramError) as e:
        chunk(0, IN, 0)
    assert str(e.value).startswith(f"{FILE}:{line + 1}: no program is open")
    with pytest.raises(ProgramError):
        current_program()


def test_program_arguments_are_checked():
    with pytest.raises(ProgramError, match="instances must be a positive integer"):
        Program("p", AllReduce(2, 1), instances=0)
    with pytest.raises(ProgramError, match="protocol must be"):
        Program("p", AllReduce(2, 1), protocol="Fast")
    with pytest.raises(ProgramError, match="thread-block policy"):
        Program("p", AllReduce(2, 1), threadblock_policy="clever")
    with pytest.raises(ProgramError, match="must be a Collective"):
        Program("p", "allreduce")


def test_single_rank_out_of_place_needs_a_copy():
    assert not ring_allreduce(1, inplace=False).check()  # no operation: output never written
    assert ring_allreduce(1, inplace=True).check()


@pytest.mark.parametrize("cls", [AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, Reduce, Gather,
                                 Scatter, AllToNext])
@pytest.mark.parametrize("inplace", [False, True])
def test_fast_precondition_matches_init_buffers(cls, inplace):
    kwargs = {"root": 1} if cls in (Broadcast, Reduce, Gather, Scatter) else {}
    col = cls(3, 2, inplace, **kwargs) if cls is not AllToNext else cls(3, 2)
    fast = col.initial_seqs()
    slow = Program("p", col)._seqs_from_buffers(col.init_buffers(), None)
    for f, s in zip(fast, slow):
        assert f[:2] == s[:2]
        assert (f[0] is f[1]) == (s[0] is s[1])  # the same aliasing
