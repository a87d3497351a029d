"""Tuning: buckets cover every size once, each holds the fastest candidate, and the
plan on disk is verified MSCCL XML that MSCCL's rule selects by size."""

import json

import pytest

from arborcc.cli.main import main
from arborcc.ir.msccl_xml import read_msccl_xml
from arborcc.ir.plan_index import read_plan_index
from arborcc.runtime.plan import Plan
from arborcc.sim.simulate import simulate
from arborcc.topology.allocation import induced, resolve_gpus
from arborcc.topology.machines import build_machine
from arborcc.tune.instances import with_instances
from arborcc.tune.plan_writer import write_plan
from arborcc.tune.search import instance_counts, tune

SIZES = [1 << 10, 1 << 16, 1 << 20, 1 << 26]


@pytest.fixture(scope="module")
def allocation():
    m = build_machine("dgx1v")
    return induced(m, resolve_gpus(m, "1,4,5,6"))


@pytest.fixture(scope="module")
def tuned(allocation):
    return tune(allocation, "allreduce", SIZES, strategies=["ring", "nccl-ring", "trees"], instances=(1, 2))


def test_buckets_tile_the_sizes(tuned):
    b = tuned.buckets
    assert b[0].min_bytes == 0 and b[-1].max_bytes == 0
    for x, y in zip(b, b[1:]):
        assert x.max_bytes + 1 == y.min_bytes
    for s in SIZES:
        assert sum(1 for x in b if x.min_bytes <= s and (x.max_bytes == 0 or s <= x.max_bytes)) == 1


def test_each_bucket_holds_the_fastest_candidate(tuned, allocation):
    for bucket in tuned.buckets:
        for size, t in bucket.times.items():
            for name, cand in tuned.candidates.items():
                # counts whose copies break the runtime's limits are not candidates (e.g. trees
                # on their own channels: 2 copies would need more than MSCCL's 32)
                for n in instance_counts(cand.algorithm, (1, 2), tuned.dialect)[0]:
                    for proto in ("LL", "LL128", "Simple"):
                        other = simulate(cand.algorithm, allocation, size, proto, instances=n, routes=cand.routes)
                        assert t <= other.time * (1 + 1e-9), (bucket.choice, name, n, proto, size)


def test_the_chosen_instances_are_what_is_simulated(tuned, allocation):
    bucket = tuned.buckets[-1]
    algo = tuned.algorithm(bucket)
    size = max(bucket.times)
    base = tuned.candidates[bucket.choice.key]
    assert algo.chunks_per_loop == base.algorithm.chunks_per_loop * bucket.choice.instances
    copies = simulate(algo, allocation, size, bucket.choice.protocol,
                      routes=_routes_for(base.routes, bucket.choice.instances, base.algorithm.num_channels))
    assert copies.time == pytest.approx(bucket.times[size], rel=1e-3)


def _routes_for(routes, n, channels):
    return {(s, d, c + channels * i): p for (s, d, c), p in routes.items() for i in range(n)}


def test_plan_files_are_verified_and_selected_by_size(tuned, tmp_path):
    paths = write_plan(tuned, tmp_path)
    index = json.loads((tmp_path / "plan.json").read_text())
    assert index["format"] == "arborcc-plan" and len(index["algorithms"]) == len(tuned.buckets)
    rules = read_plan_index(tmp_path).rules
    for rule, bucket in zip(rules, tuned.buckets):
        algo = read_msccl_xml(tmp_path / rule.file)
        assert (algo.min_bytes, algo.max_bytes) == (bucket.min_bytes, bucket.max_bytes)
        assert algo.protocol.value == bucket.choice.protocol
    for s in SIZES:  # MSCCL's rule: the first file whose range holds the size (max 0: no limit)
        chosen = next(r for r in rules if r.min_bytes <= s and (r.max_bytes == 0 or s <= r.max_bytes))
        assert chosen.file == rules[tuned.buckets.index(next(b for b in tuned.buckets if s in b.times))].file
    ranges = [(r.min_bytes, r.max_bytes) for r in rules]
    assert [(e.algorithm.min_bytes, e.algorithm.max_bytes) for e in Plan.load(tmp_path).entries] == ranges
    (tmp_path / "plan.json").unlink()  # a plain MSCCL directory is a plan too
    assert [(e.algorithm.min_bytes, e.algorithm.max_bytes) for e in Plan.load(tmp_path).entries] == ranges
    assert len(paths) == len(rules) + 1


def test_tune_cli(tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["tune", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1K,1M", "--strategies", "ring",
                 "--instances", "1,2", "-o", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["buckets"] and (out / "plan.json").exists()
    assert main(["tune", "--machine", "dgx1v", "--instances", "0"]) == 2


def test_instances_over_the_channel_limit_are_left_out(allocation):
    r = tune(allocation, "allreduce", [1 << 20], strategies=["nccl-ring"], instances=(1, 64))
    assert all(b.choice.instances == 1 for b in r.buckets)
    assert any("x64" in s for s in r.skipped)
    with_instances(r.candidates["nccl-ring"].algorithm, 1)
