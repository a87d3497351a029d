"""Symbolic chunk values: equality of reductions is multiset equality, computed once."""

from hypothesis import given, strategies as st

from arborcc.lang.values import Chunk, ReduceChunk, describe, reduction_of


def test_chunk_equality_ignores_destination():
    assert Chunk(1, 2, 3, 4) == Chunk(1, 2)
    assert Chunk(1, 2) != Chunk(2, 1)
    assert hash(Chunk(1, 2, 5, 5)) == hash(Chunk(1, 2))


def test_reduction_is_a_multiset_in_any_order():
    a, b, c = Chunk(0, 0), Chunk(1, 0), Chunk(2, 0)
    left = a.reduce(0, b).reduce(0, c)
    right = c.reduce(2, a.reduce(1, b))
    assert left == right
    assert left == reduction_of([a, b, c])
    assert left != reduction_of([a, b])
    assert left != reduction_of([a, b, c, c])  # multiplicity counts


def test_public_tools_style_reduce_chunk():
    expected = ReduceChunk(-1, [])
    for r in range(4):
        expected = expected.reduce(-1, Chunk(r, 3))
    assert expected == reduction_of(Chunk(r, 3) for r in range(4))
    assert [(x.origin_rank, x.origin_index) for x in expected.chunks] == [(r, 3) for r in range(4)]


def test_single_reduction_equals_its_chunk():
    assert ReduceChunk(-1, [Chunk(0, 1)]) == Chunk(0, 1)
    assert Chunk(0, 1) == ReduceChunk(-1, [Chunk(0, 1)])
    assert ReduceChunk(-1, [Chunk(0, 1)]) != Chunk(0, 2)


def test_describe():
    assert describe(None) == "uninitialized"
    assert "rank 3 index 1" in describe(Chunk(3, 1))
    assert "reduction of 6 chunks" == describe(reduction_of(Chunk(r, 0) for r in range(6)))


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=12), st.randoms())
def test_equality_matches_sorted_contributions(pairs, rnd):
    chunks = [Chunk(r, i) for r, i in pairs]
    shuffled = chunks[:]
    rnd.shuffle(shuffled)
    # build two reduction trees of different shapes
    left = chunks[0]
    for c in chunks[1:]:
        left = left.reduce(0, c)
    nodes = list(shuffled)
    while len(nodes) > 1:
        a = nodes.pop(rnd.randrange(len(nodes)))
        b = nodes.pop(rnd.randrange(len(nodes)))
        nodes.append(a.reduce(1, b))
    right = nodes[0]
    assert left == right
    if len(chunks) > 1:
        assert left.contributions() == tuple(sorted(pairs))
