"""``arborcc compare`` on 128 DGX A100 nodes (1024 GPUs) answers: the strategies whose
synthesis or simulation explodes at that scale are left out with a line saying so (the
registry's rank limits, as ``synth --strategy auto`` uses them), the rest and the NCCL
baseline are simulated. A subprocess with a hard timeout (a hang guard, not a timing
assertion)."""

from __future__ import annotations


from support.cli_runs import arborcc

from arborcc.synth.registry import STRATEGIES

#: far above what it takes on a loaded 2-core machine; only a hang or a runaway trips it
HARD_SECONDS = 600
ADDRESS_SPACE = 12 * 2**30


def test_compare_on_128_dgx_a100_nodes_prints_a_table_with_nccl(tmp_path):
    run = arborcc("compare", "--machine", "dgx-a100", "--nodes", "128", "--collective", "allreduce",
                  "--sizes", "1M", cwd=tmp_path, seconds=HARD_SECONDS, address_space=ADDRESS_SPACE)
    assert run.code == 0, run.err[-2000:]
    lines = run.out.splitlines()
    assert lines[0].startswith("allreduce on 128xdgx-a100 (1024 GPUs)")
    header, row = lines[1].split(), lines[2].split()
    assert "nccl" in header and "nccl-model" in header
    assert row[0] == "1M" and len(row) == len(header)
    assert all(float(cell.rstrip("*")) > 0 for cell in row[1:])
    left_out = [line for line in lines if line.startswith("  not compared: ")]
    for name in ("blueconnect", "composed", "hierarchical", "ring", "nccl-ring"):
        assert any(line.startswith(f"  not compared: {name}: left out above ") for line in left_out), name
        assert name not in header


def test_compare_leaves_out_what_the_registry_says_and_says_why():
    for entry in STRATEGIES:
        for collective in entry.collectives:
            limits = [v for v in (entry.auto_rank_limits.get(collective),
                                  entry.simulated_rank_limits.get(collective)) if v is not None]
            for ranks in (2, 128, 1024):
                limit = entry.left_out(collective, ranks, simulated=True)
                assert limit == min((v for v in limits if ranks > v), default=None)
                # auto alone never leaves out more than compare does
                auto = entry.left_out(collective, ranks)
                assert auto is None or limit is not None


def test_a_strategy_named_by_strategies_runs_above_its_limit(monkeypatch):
    from arborcc.cli.topology_args import build_named
    from arborcc.errors import SynthesisError
    from arborcc.tune.compare import each_candidate

    built = []

    def synthesize(topology, collective, name, root, timed=True):  # records the call, builds nothing
        built.append(name)
        raise SynthesisError(f"{name}: not built in this test")

    monkeypatch.setattr("arborcc.synth.synthesis.synthesize", synthesize)
    topology = build_named("dgx-a100", 32)  # 256 ranks
    list(each_candidate(topology, "allreduce", strategies=["blueconnect"]))
    assert built == ["blueconnect"]
    built.clear()
    skipped: list[str] = []
    list(each_candidate(topology, "allreduce", skipped=skipped))
    assert "blueconnect" not in built and "halving-doubling" in built
    assert any(s.startswith("blueconnect: left out above 128 ranks, where its simulation") for s in skipped)
    assert any(s.startswith("trees: left out above 32 ranks, where its synthesis") for s in skipped)
