"""Plans: MSCCL's selection rules, loading files and directories, refusing algorithms that
do not verify, the built-in default."""

from __future__ import annotations

import pytest

from arborcc.errors import InputError, VerificationError
from arborcc.ir.aliasing import Mode
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.library import LIBRARY
from arborcc.runtime.plan import Plan, call_bytes, default_algorithm, matches


def ring(ranks=4, inplace=True, **kw):
    algo = LIBRARY["ring-allreduce"](ranks=ranks, inplace=inplace).algorithm
    for k, v in kw.items():
        setattr(algo, k, v)
    return algo


def test_selection_rules():
    algo = ring(4, min_bytes=1024, max_bytes=1 << 20)
    ok = dict(collective="allreduce", num_ranks=4, mode=Mode.INPLACE, count=1024, size=4096)
    assert matches(algo, **ok)
    assert not matches(algo, **{**ok, "collective": "allgather"})
    assert not matches(algo, **{**ok, "num_ranks": 8})
    assert not matches(algo, **{**ok, "mode": Mode.OUTOFPLACE})
    assert not matches(algo, **{**ok, "size": 512})
    assert not matches(algo, **{**ok, "size": 2 << 20})
    assert not matches(algo, **{**ok, "count": 1022})  # not a multiple of the 4 chunks per loop
    assert matches(ring(4, max_bytes=0), **{**ok, "size": 1 << 40})  # 0: no upper limit


def test_rank_multiplied_collectives_count_times_ranks():
    algo = LIBRARY["ring-allgather"](ranks=4).algorithm  # 4 chunks per loop = 1 per rank
    assert matches(algo, "allgather", 4, Mode.OUTOFPLACE, 3, call_bytes("allgather", 4, 3, 4))
    assert call_bytes("allgather", 4, 3, 4) == 48


def test_plan_from_directory_first_match_wins_then_default(tmp_path):
    small = ring(4, max_bytes=4096, name="small")
    large = ring(4, min_bytes=4097, name="large")
    (tmp_path / "a_small.xml").write_text(write_msccl_xml(small))
    (tmp_path / "b_large.xml").write_text(write_msccl_xml(large))
    plan = Plan.from_path(tmp_path)
    assert [e.algorithm.name for e in plan.entries] == ["small", "large"]
    assert plan.select("allreduce", 4, Mode.INPLACE, 1024, 4).name == "small"
    assert plan.select("allreduce", 4, Mode.INPLACE, 4096, 4).name == "large"
    # out of place, or a count that does not divide: the built-in default
    assert plan.select("allreduce", 4, Mode.OUTOFPLACE, 4096, 4).name.startswith("direct-")
    assert plan.select("allreduce", 4, Mode.INPLACE, 4095, 4).name.startswith("direct-")


def test_plan_refuses_an_algorithm_that_does_not_verify(tmp_path):
    bad = ring(4)
    bad.ranks[1].threadblocks[0].steps.pop()  # a receive goes missing
    with pytest.raises(VerificationError, match="refused to run an algorithm that does not verify"):
        Plan().add(bad)


def test_plan_from_missing_path():
    with pytest.raises(InputError, match="no such file or directory"):
        Plan.from_path("/nonexistent/algos")


def test_default_plan_small_and_large():
    assert "oneshot" in default_algorithm("allreduce", 4, Mode.OUTOFPLACE, 4096).name
    assert "owner" in default_algorithm("allreduce", 4, Mode.OUTOFPLACE, 64 << 20).name
    assert "allgather" in default_algorithm("allgather", 3, Mode.INPLACE, 1 << 20).name
    assert default_algorithm("broadcast", 3, Mode.INPLACE, 1 << 20, root=2).root == 2
