"""The JSON form: lossless round trips and validation errors that name the path."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.algorithms import allpairs_allreduce, ring_allreduce, tree_broadcast
from arborcc.errors import IRFormatError
from arborcc.ir.json_io import algorithm_from_json, algorithm_to_dict, algorithm_to_json
from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, Protocol, RankProgram, Step, ThreadBlock


@pytest.mark.parametrize("algo", [ring_allreduce(3), allpairs_allreduce(3), tree_broadcast(4, 2, root=2)],
                         ids=lambda a: a.name)
def test_round_trip(algo):
    text = algorithm_to_json(algo)
    assert algorithm_from_json(text) == algo
    assert algorithm_from_json(json.loads(text)) == algo
    assert json.loads(text) == algorithm_to_dict(algo)


# every field within the range the readers accept (arborcc.ir.model.FIELD_RANGES); a value
# in range may still be wrong for its algorithm, and is kept for the verifier to judge
steps = st.builds(Step, st.sampled_from(list(Op)), st.none() | st.sampled_from(list(Buffer)), st.integers(-1, 9),
                  st.none() | st.sampled_from(list(Buffer)), st.integers(-1, 9), st.integers(0, 5),
                  st.none() | st.builds(Dependency, st.integers(0, 3), st.integers(0, 6)), st.booleans())
#: (min_bytes, max_bytes): max_bytes 0 (no limit) or at least min_bytes
byte_ranges = st.integers(0, 2**50).flatmap(
    lambda low: st.tuples(st.just(low), st.just(0) | st.integers(low, 2**63 - 1)))
algorithms = byte_ranges.flatmap(lambda sizes: st.builds(
    Algorithm, st.text(max_size=10), st.sampled_from(["allreduce", "gather", "custom"]), st.integers(0, 5),
    st.integers(0, 9),  # counts that size buffers and ranks are not negative (the reader refuses that)
    st.lists(st.builds(RankProgram, st.integers(0, 4), st.integers(0, 9), st.integers(0, 9), st.integers(0, 9),
                       st.lists(st.builds(ThreadBlock, st.integers(0, 4), st.integers(-1, 4), st.integers(-1, 4),
                                          st.integers(-1, 3), st.lists(steps, max_size=3)), max_size=3)),
             max_size=3),
    st.sampled_from(list(Protocol)), st.booleans(), st.booleans(), st.just(sizes[0]), st.just(sizes[1]),
    st.none() | st.integers(0, 4)))


@settings(max_examples=150, deadline=None)
@given(algorithms)
def test_round_trip_of_any_algorithm(algo):
    text = algorithm_to_json(algo)  # the writer formats steps itself: the same JSON as the dict
    assert algorithm_from_json(text) == algo
    assert json.loads(text) == algorithm_to_dict(algo)


def test_empty_lists_are_written_compactly():
    algo = Algorithm("e", "custom", 1, 1, [RankProgram(0, 1, 1, 0, [ThreadBlock(0)])])
    assert algorithm_from_json(algorithm_to_json(algo)) == algo
    algo.ranks = []
    assert algorithm_from_json(algorithm_to_json(algo)) == algo


def _bad(mutate):
    d = algorithm_to_dict(allpairs_allreduce(3))
    mutate(d)
    return d


@pytest.mark.parametrize("mutate,place", [
    (lambda d: d.pop("collective"), "collective"),
    (lambda d: d.update(collective="allsum"), "collective"),
    (lambda d: d.update(num_ranks="3"), "num_ranks"),
    (lambda d: d.update(inplace=1), "inplace"),
    (lambda d: d.update(protocol="LL64"), "protocol"),
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(extra=True), "extra"),
    (lambda d: d.update(ranks={}), "ranks"),
    (lambda d: d["ranks"][1].pop("input_chunks"), "ranks[1].input_chunks"),
    (lambda d: d["ranks"][1]["threadblocks"][0].update(send=None), "ranks[1].threadblocks[0].send"),
    (lambda d: d["ranks"][2]["threadblocks"][1]["steps"][1].update(count="x"),
     "ranks[2].threadblocks[1].steps[1].count"),
    (lambda d: d["ranks"][2]["threadblocks"][1]["steps"][1].update(op="copy"), "ranks[2].threadblocks[1].steps[1].op"),
    (lambda d: d["ranks"][0]["threadblocks"][2]["steps"][1].update(dep=[1]), "ranks[0].threadblocks[2].steps[1].dep"),
    (lambda d: d["ranks"][0]["threadblocks"][2]["steps"][1].update(src_buf="x"),
     "ranks[0].threadblocks[2].steps[1].src_buf"),
    (lambda d: d["ranks"][0]["threadblocks"][2]["steps"][1].update(cnt=1), "ranks[0].threadblocks[2].steps[1].cnt"),
    (lambda d: d["ranks"][0]["threadblocks"][0]["steps"][0].update(has_dep="no"),
     "ranks[0].threadblocks[0].steps[0].has_dep"),
])
def test_validation_names_the_path(mutate, place):
    with pytest.raises(IRFormatError) as e:
        algorithm_from_json(_bad(mutate), source="a.json")
    assert str(e.value).startswith(f"a.json:{place}:")


def test_invalid_json_names_the_line():
    with pytest.raises(IRFormatError) as e:
        algorithm_from_json('{\n  "name": "x",\n  oops\n}', source="a.json")
    assert str(e.value).startswith("a.json:3: JSON syntax error:")


def test_top_level_must_be_an_object():
    with pytest.raises(IRFormatError) as e:
        algorithm_from_json("[1, 2]", source="a.json")
    assert "expected an object" in str(e.value)


def test_reads_a_path(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(algorithm_to_json(ring_allreduce(3)))
    assert algorithm_from_json(p) == ring_allreduce(3)
    with pytest.raises(IRFormatError):
        algorithm_from_json(tmp_path / "missing.json")
