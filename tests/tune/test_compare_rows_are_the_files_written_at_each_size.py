"""``compare`` and ``tune`` see, at each size, the file ``arborcc synth --size SIZE``
writes: a strategy whose file depends on the size (``Strategy.size_dependent``) is
synthesized for every size, each distinct file simulated at the sizes it was built for,
byte-identical files once; so ``auto``'s choice at a size is ``compare``'s fastest row
there (within 1%: ``auto`` may write the one program for both call forms, at most 1%
faster)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import SynthesisError
from arborcc.synth.registry import BY_NAME
from arborcc.synth.synthesis import synthesize
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine
from arborcc.tune import compare as compare_module
from arborcc.tune.compare import compare
from arborcc.tune.search import tune

MIB, GIB = 1 << 20, 1 << 30


def blink_allocation():
    return induced(build_machine("dgx1v"), ["gpu1", "gpu4", "gpu5", "gpu6"])


@pytest.mark.parametrize("machine,collective,size", [
    ("dgx1v-1456", "allreduce", MIB),
    ("dgx1p", "broadcast", MIB),  # trees over NVLink alone, chosen by their time at the size
    ("dgx-a100", "broadcast", MIB),  # the switch broadcast's chunk count, chosen at the size
])
def test_auto_at_a_size_is_the_fastest_row_of_compare_there(machine, collective, size):
    topology = blink_allocation() if machine == "dgx1v-1456" else build_machine(machine)
    chosen = synthesize(topology, collective, "auto", size=size)
    best = compare(topology, collective, [size], baselines=False).best(size)
    assert chosen.time * 1e6 == pytest.approx(best["time_us"], rel=0.01), (chosen.strategy, best["strategy"])


def test_a_size_dependent_row_is_the_time_of_synths_file_at_that_size():
    topology = build_machine("dgx1p")
    cmp = compare(topology, "broadcast", [MIB, 64 * MIB], strategies=["trees"], baselines=False)
    for row in cmp.rows:
        written = synthesize(topology, "broadcast", "trees", size=row["size"])
        assert written.time * 1e6 == pytest.approx(row["time_us"], rel=0.01), row["size"]


def counting_sweeps(monkeypatch):
    """The sizes of every ``protocol_sweep`` compare runs, per algorithm name."""
    calls = []
    sweep = compare_module.protocol_sweep

    def counted(algo, topology, sizes, *args, **kwargs):
        calls.append((algo.name, list(sizes)))
        return sweep(algo, topology, sizes, *args, **kwargs)

    monkeypatch.setattr(compare_module, "protocol_sweep", counted)
    return calls


def test_each_distinct_file_is_simulated_once_at_the_sizes_it_was_built_for(monkeypatch):
    calls = counting_sweeps(monkeypatch)
    # binary-trees: one tree at 1 MiB, one per root at 64 MiB and 1 GiB (the same file)
    cmp = compare(blink_allocation(), "allreduce", [GIB, MIB, 64 * MIB], strategies=["binary-trees", "ring"],
                  baselines=False)
    swept = sorted(sizes for _, sizes in calls)
    assert swept == [[MIB], [MIB, 64 * MIB, GIB], [64 * MIB, GIB]]
    assert [(r["strategy"], r["size"]) for r in cmp.rows] == [
        ("binary-trees", MIB), ("binary-trees", 64 * MIB), ("binary-trees", GIB),
        ("ring", MIB), ("ring", 64 * MIB), ("ring", GIB)]


def test_a_strategy_whose_file_is_the_same_at_every_size_is_simulated_once(monkeypatch):
    calls = counting_sweeps(monkeypatch)
    compare(blink_allocation(), "allreduce", [MIB, 64 * MIB], strategies=["binary-trees"], baselines=False)
    assert calls and len(calls) == 2  # 1 MiB's one tree, 64 MiB's trees
    calls.clear()
    compare(blink_allocation(), "allreduce", [64 * MIB, GIB], strategies=["binary-trees"], baselines=False)
    assert [sizes for _, sizes in calls] == [[64 * MIB, GIB]]


def refusing_below(monkeypatch, name, least):
    """Strategy ``name`` refuses requests for fewer than ``least`` bytes."""
    import dataclasses

    entry = BY_NAME[name]

    def build(request):
        if request.size is not None and request.size < least:
            raise SynthesisError(f"{name}: refused below {least} bytes")
        return entry.function(request)

    monkeypatch.setitem(BY_NAME, name, dataclasses.replace(entry, function=build))


def test_a_strategy_built_at_some_sizes_only_has_rows_there_and_says_where_not(monkeypatch):
    refusing_below(monkeypatch, "binary-trees", 64 * MIB)
    cmp = compare(blink_allocation(), "allreduce", [MIB, 64 * MIB], strategies=["binary-trees", "ring"],
                  baselines=False)
    assert [(r["strategy"], r["size"]) for r in cmp.rows if r["strategy"] == "binary-trees"] == [
        ("binary-trees", 64 * MIB)]
    assert any(s.startswith("binary-trees at 1M:") and "refused below" in s for s in cmp.skipped), cmp.skipped


def test_tune_keeps_each_file_of_a_size_dependent_strategy_apart():
    tuned = tune(blink_allocation(), "allreduce", [MIB, 64 * MIB], strategies=["binary-trees"], instances=(1,))
    assert set(tuned.candidates) == {"binary-trees@1M", "binary-trees@64M"}
    assert [b.choice.key for b in tuned.buckets] == ["binary-trees@1M", "binary-trees@64M"]
    for bucket in tuned.buckets:
        built = tuned.candidates[bucket.choice.key].algorithm
        assert tuned.algorithm(bucket).chunks_per_loop == built.chunks_per_loop
        assert len(tuned.algorithm(bucket).ranks[0].threadblocks) == len(built.ranks[0].threadblocks)


def test_tune_refuses_a_size_no_candidate_builds_for(monkeypatch):
    refusing_below(monkeypatch, "binary-trees", 64 * MIB)
    with pytest.raises(SynthesisError, match="at 1M"):
        tune(blink_allocation(), "allreduce", [MIB, 64 * MIB], strategies=["binary-trees"], instances=(1,))


@settings(max_examples=6, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(min_value=10, max_value=28).map(lambda k: 1 << k), min_size=1, max_size=4))
def test_every_row_of_a_size_dependent_strategy_is_its_file_for_that_size(sizes):
    """Whatever the sizes, one row per size, in size order, each the time of the file
    binary-trees writes for that size simulated with the row's protocol."""
    from arborcc.sim.simulate import simulate

    topology = blink_allocation()
    cmp = compare(topology, "allreduce", sizes, strategies=["binary-trees"], baselines=False)
    assert [r["size"] for r in cmp.rows] == sorted(set(sizes))
    for row in cmp.rows:
        written = synthesize(topology, "allreduce", "binary-trees", size=row["size"], timed=False).algorithm
        # the row's time_us is rounded to nanoseconds
        assert simulate(written, topology, row["size"], row["protocol"]).time * 1e6 == pytest.approx(
            row["time_us"], abs=6e-4), row
