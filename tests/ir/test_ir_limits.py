"""Per-dialect runtime limits: each rule reports a ``limit`` violation."""

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.algorithms import allpairs_allreduce, ring_allreduce
from arborcc.ir.limits import DIALECTS, EXECUTOR, LEGACY, check_dialect_limits
from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, RankProgram, Step, ThreadBlock
from arborcc.verify import verify_algorithm

I, O = Buffer.INPUT, Buffer.OUTPUT


def one_tb(steps, collective="allreduce", tb_id=0, channel=0):
    return Algorithm("l", collective, 1, 4, [RankProgram(0, 4, 4, 0, [ThreadBlock(tb_id, channel=channel, steps=steps)])])


def copies(n):
    return [Step(Op.COPY, I, j % 4, O, j % 4) for j in range(n)]


def messages(algo, dialect):
    return [str(v) for v in check_dialect_limits(algo, dialect)]


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_correct_algorithms_are_within_limits(dialect):
    assert check_dialect_limits(ring_allreduce(8, channels=4), dialect) == []
    assert check_dialect_limits(allpairs_allreduce(6), dialect) == []


def test_limits_are_data():
    assert LEGACY.collective_names["reducescatter"] == "reduce_scatter"
    assert EXECUTOR.collective_names["reducescatter"] == "reducescatter"
    assert "custom" not in EXECUTOR.collective_names and "gather" not in LEGACY.collective_names
    assert {"outofplace", "minBytes", "maxBytes"} <= set(EXECUTOR.required_algo_attributes)
    assert not {"outofplace", "minBytes", "maxBytes"} & set(LEGACY.required_algo_attributes)
    assert LEGACY.max_count_exclusive == EXECUTOR.max_count_exclusive == 72
    assert LEGACY.max_channels == EXECUTOR.max_channels == 32


@pytest.mark.parametrize("dialect,n,bad", [("executor", 64, False), ("executor", 65, True),
                                           ("legacy", 256, False), ("legacy", 257, True)])
def test_steps_per_thread_block(dialect, n, bad):
    msgs = messages(one_tb(copies(n)), dialect)
    assert bool(msgs) == bad
    if bad:
        assert "steps" in msgs[0] and msgs[0].startswith("rank 0 tb 0:")


@pytest.mark.parametrize("count,bad", [(71, False), (72, True)])
def test_count_limit(count, bad):
    algo = Algorithm("c", "custom", 1, 1, [RankProgram(0, 80, 80, 0, [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0, count)])])])
    assert bool(messages(algo, "legacy")) == bad


@pytest.mark.parametrize("channel,bad", [(31, False), (32, True)])
def test_channel_limit(channel, bad):
    assert bool(messages(one_tb(copies(1), channel=channel), "executor")) == bad


def test_negative_channel_only_legacy_and_only_without_peers():
    algo = one_tb(copies(1), channel=-1)
    assert messages(algo, "legacy") == []
    assert messages(algo, "executor")


def test_thread_block_ids_must_be_contiguous():
    msgs = messages(one_tb(copies(1), tb_id=1), "legacy")
    assert msgs and "0 is missing" in msgs[0]


def test_thread_blocks_per_rank():
    tbs = [ThreadBlock(t, steps=[]) for t in range(65)]
    algo = Algorithm("t", "allreduce", 1, 1, [RankProgram(0, 1, 1, 0, tbs)])
    assert messages(algo, "legacy") == []
    assert any("65 thread blocks" in m for m in messages(algo, "executor"))


@pytest.mark.parametrize("collective,dialect", [("custom", "executor"), ("gather", "legacy"), ("scatter", "legacy")])
def test_collective_names(collective, dialect):
    assert any("collective" in m for m in messages(one_tb([], collective), dialect))


def test_residual_add_is_legacy_only():
    algo = one_tb([Step(Op.RESIDUAL_ADD, I, 0, O, 0)])
    assert messages(algo, "legacy") == []
    assert "'ra'" in messages(algo, "executor")[0]


def test_nop_must_be_followed_by_a_step_with_a_dependency():
    algo = copy.deepcopy(allpairs_allreduce(4))
    red = algo.ranks[0].threadblocks[-1]
    first_re = next(i for i, s in enumerate(red.steps) if s.op is Op.REDUCE)
    red.steps[first_re] = Step(Op.REDUCE, red.steps[first_re].src_buf, red.steps[first_re].src_off,
                               red.steps[first_re].dst_buf, red.steps[first_re].dst_off)
    msgs = messages(algo, "executor")
    assert msgs and "nop" in msgs[0] and f"step {first_re}" in msgs[0]


def test_trailing_nops_are_dropped_by_the_runtime():
    algo = one_tb([Step(Op.COPY, I, 0, O, 0, has_dep=True)])
    algo.ranks[0].threadblocks.append(ThreadBlock(1, steps=[Step(Op.NOP, None, -1, None, -1, dep=Dependency(0, 0))]))
    assert any("ends with nop" in m for m in messages(algo, "legacy"))


def test_fused_reductions_must_share_the_count():
    steps = [Step(Op.COPY, I, 0, O, 0, 2), Step(Op.REDUCE, I, 2, O, 0, 2), Step(Op.REDUCE, I, 2, O, 0, 1)]
    assert any("fused" in m for m in messages(one_tb(steps), "executor"))
    steps[1] = Step(Op.REDUCE, I, 2, O, 0, 2, has_dep=True)  # a signal ends the chain: not fused
    assert not any("fused" in m for m in messages(one_tb(steps), "executor"))


def test_min_bytes_above_max_bytes():
    algo = one_tb([])
    algo.min_bytes, algo.max_bytes = 100, 10
    assert any("minBytes" in m for m in messages(algo, "executor"))
    algo.max_bytes = 0  # no limit
    assert messages(algo, "executor") == []


def test_unknown_dialect():
    with pytest.raises(ValueError):
        check_dialect_limits(one_tb([]), "nccl")


def test_verifier_reports_limits_only_when_asked():
    algo = one_tb(copies(70))
    algo.collective = "custom"
    assert verify_algorithm(algo).ok
    report = verify_algorithm(algo, "executor")
    assert {v.kind for v in report.violations} == {"limit"}


def test_remembered_answers_are_per_algorithm_object_and_per_block(monkeypatch):
    """Inside ``remembering_limits`` an algorithm object is checked once per dialect (the
    same answer, a fresh list each time); another object, or the same one outside the
    block, is checked again."""
    import arborcc.ir.limits as limits

    calls = []
    real = limits._dialect_violations
    monkeypatch.setattr(limits, "_dialect_violations", lambda *a: calls.append(a[1]) or real(*a))
    algo = one_tb(copies(70))
    with limits.remembering_limits():
        first = check_dialect_limits(algo, "executor")
        first.clear()  # callers may change what they get
        again = check_dialect_limits(algo, "executor")
        assert again and again == check_dialect_limits(copy.deepcopy(algo), "executor")
        check_dialect_limits(algo, "legacy")
    assert calls == ["executor", "executor", "legacy"]
    check_dialect_limits(algo, "executor")
    assert calls == ["executor", "executor", "legacy", "executor"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_the_plain_steps_screen_changes_no_answer(seed, monkeypatch):
    """check_dialect_limits skips the step rules when no step can break one (no nop, no
    reduction, every type and count accepted); with steps changed at random to nops,
    reductions, rejected types and large counts, its answers are those of the full rules."""
    import random

    import arborcc.ir.limits as limits

    rng = random.Random(seed)
    algo = copy.deepcopy(rng.choice([ring_allreduce(4), allpairs_allreduce(4)]))
    steps = [st for prog in algo.ranks for tb in prog.threadblocks for st in tb.steps]
    for step in rng.sample(steps, rng.randint(0, 3)):
        change = rng.randint(0, 3)
        if change == 0:
            step.op = rng.choice([Op.NOP, Op.REDUCE, Op.RESIDUAL_ADD])
        elif change == 1:
            step.count = rng.choice([71, 72, 200])
        elif change == 2:
            step.dep = None
        else:
            step.has_dep = not step.has_dep
    for dialect in DIALECTS:
        screened = check_dialect_limits(algo, dialect)
        with monkeypatch.context() as m:
            m.setattr(limits, "_plain_steps", lambda *_: False)
            assert check_dialect_limits(algo, dialect) == screened


def test_runtime_caps_are_the_least_limits_of_the_runtimes_meant():
    from arborcc.ir.limits import runtime_caps

    legacy, executor, every = runtime_caps("legacy"), runtime_caps("executor"), runtime_caps(None)
    assert (legacy.steps_per_threadblock, legacy.threadblocks_per_rank, legacy.channels) == (256, 216, 32)
    assert (executor.steps_per_threadblock, executor.threadblocks_per_rank, executor.channels) == (64, 64, 32)
    assert every == executor  # a file for any runtime keeps the executors' smaller limits
    with pytest.raises(ValueError, match="unknown MSCCL dialect 'rccl'"):
        runtime_caps("rccl")
