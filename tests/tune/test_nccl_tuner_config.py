"""``arborcc tune --nccl-tuner-config FILE``: rules NCCL's example tuner plugin reads
(``plugins/tuner/example/plugin.c``), covering every size, gaining where they say so;
bad input refused in one line."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from arborcc.errors import InputError
from arborcc.topology.allocation import induced
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine
from arborcc.tune import nccl_tuner_config as ntc
from arborcc.tune.nccl import NcclBaseline
from support.cli_runs import arborcc, refused

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")


def plugin_rules(text: str) -> list[list[str]]:
    """The rules as the example plugin's loadConfig reads them: lines of at most 255
    characters, '#' in column 0 or an empty line skipped, fields split at commas and
    trimmed of blanks (strtok skips an empty field, so none may be empty), 8 to 10 fields."""
    rules = []
    for line in text.split("\n"):
        assert len(line) <= 255, line
        if not line or line.startswith("#"):
            continue
        fields = [f.strip(" \t") for f in line.split(",")]
        assert all(fields) and 8 <= len(fields) <= 10, line
        rules.append(fields)
    return rules


def check_file(text: str, collective: str, nodes: int, ranks: int) -> list[list[str]]:
    """Every field spelled as the plugin parses it (its parser turns a misspelling into
    allreduce / ring / simple without a word), positive channel counts (the plugin runs a
    rule with -1 on one channel), and the sizes covered from 0 to 2^64 - 1 exactly once."""
    rules = plugin_rules(text)
    assert rules
    expect_low = 0
    for coll, low, high, algo, proto, channels, n_nodes, n_ranks in rules:
        assert coll == collective and coll in COLLECTIVES
        assert algo in ALGORITHMS and proto in PROTOCOLS
        assert re.fullmatch(r"\d+", low) and re.fullmatch(r"\d+", high)
        assert int(low) == expect_low and int(high) >= int(low)
        expect_low = int(high) + 1
        assert int(channels) >= 1
        assert (int(n_nodes), int(n_ranks)) == (nodes, ranks)
    assert expect_low == 1 << 64
    return rules


def rules_for(topology, collective, sizes):
    base = NcclBaseline(topology)
    choices = ntc.tuner_choices(base, collective, sizes)
    nodes, ranks = ntc.job_shape(topology, "--machine")
    rules = ntc.tuner_rules(choices, collective, nodes, ranks)
    return choices, rules, ntc.tuner_config_text(rules, topology.name, base.fidelity.name)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_the_file_is_what_the_plugin_parses_for_every_collective(collective):
    t = build_machine("dgx-a100")
    _, _, text = rules_for(t, collective, [1 << 10, 1 << 16, 1 << 22, 1 << 28])
    check_file(text, collective, 1, 8)


def test_a_cluster_rule_names_its_node_and_rank_counts():
    # small sizes: what is checked is each rule's node and rank counts, and a 64 MiB call on
    # 16 ranks costs minutes of simulation without adding to it
    t = build_cluster("dgx-a100", 2)
    _, _, text = rules_for(t, "allreduce", [1 << 10, 1 << 14])
    check_file(text, "allreduce", 2, 16)


def test_gaining_rules_are_faster_than_nccls_default_and_the_others_restate_it():
    _, rules, _ = rules_for(build_machine("dgx1v"), "allreduce", [1 << k for k in range(10, 31, 4)])
    assert any(r.gains for r in rules)
    for r in rules:
        for c in r.choices:
            assert c.chosen.key() == r.option.key()
            if c.gains:
                assert c.best.time < c.default.time * (1 - ntc.MIN_GAIN) + 1e-15
            else:
                assert c.chosen == c.default


def test_nvls_rules_name_nccls_nvls_channel_count():
    choices, rules, text = rules_for(build_machine("dgx-h100"), "allreduce", [1 << 30])
    assert choices[0].chosen.algorithm == "nvls"
    assert check_file(text, "allreduce", 1, 8)[-1][3:6] == ["nvls", "simple", str(ntc.NVLS_CHANNELS)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.lists(st.integers(0, 7), min_size=2, max_size=5, unique=True),
       collective=st.sampled_from(COLLECTIVES),
       sizes=st.lists(st.integers(1, 1 << 32), min_size=1, max_size=4))
def test_random_allocations_sizes_and_collectives_give_a_complete_file(gpus, collective, sizes):
    t = build_machine("dgx1v")
    t = induced(t, [t.ranks[g] for g in gpus])
    _, _, text = rules_for(t, collective, sizes)
    check_file(text, collective, 1, len(gpus))


def test_a_job_of_one_gpu_is_refused():
    t = build_machine("dgx1v")
    with pytest.raises(InputError, match="1 GPU"):
        ntc.job_shape(induced(t, [t.ranks[0]]), "--gpus")


# ----------------------------------------------------------------------------- the CLI
def test_tune_writes_the_file_and_a_table_of_gains(tmp_path):
    run = arborcc("tune", "--machine", "dgx-a100", "--collective", "allreduce", "--sizes", "1K:64M:8",
                  "--nccl-tuner-config", "conf/nccl_tuner.conf", cwd=tmp_path)
    assert run.code == 0, run.err
    check_file((tmp_path / "conf" / "nccl_tuner.conf").read_text(), "allreduce", 1, 8)
    assert "gaining over NCCL's default choice" in run.out
    assert re.search(r"ring/\w+/\d+ch .* \+\d+\.\d%", run.out)


@pytest.mark.parametrize("path", [".", "dir/"])
def test_a_folder_as_the_tuner_config_is_refused(tmp_path, path):
    (tmp_path / "dir").mkdir()
    refused(arborcc("tune", "--machine", "dgx1v", "--nccl-tuner-config", path, cwd=tmp_path), r"directory")


def test_a_tuner_config_under_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    refused(arborcc("tune", "--machine", "dgx1v", "--nccl-tuner-config", "f/nccl.conf", cwd=tmp_path),
            r"f/nccl\.conf.*cannot create the folder")


def test_a_collective_the_plugin_cannot_name_is_refused(tmp_path):
    refused(arborcc("tune", "--machine", "dgx1v", "--collective", "gather", "--nccl-tuner-config", "c.conf",
                    cwd=tmp_path), r"--collective: .*not gather")
    assert not (tmp_path / "c.conf").exists()


@pytest.mark.parametrize("flags,named", [(["-o", "plan"], "-o"), (["--strategies", "trees"], "--strategies"),
                                         (["--instances", "1,2"], "--instances"),
                                         (["--dialect", "legacy"], "--dialect")])
def test_msccl_plan_flags_with_the_tuner_config_are_refused(tmp_path, flags, named):
    refused(arborcc("tune", "--machine", "dgx1v", "--nccl-tuner-config", "c.conf", *flags, cwd=tmp_path),
            re.escape(named) + ": belongs to an MSCCL plan")


def test_a_single_gpu_job_is_refused(tmp_path):
    refused(arborcc("tune", "--machine", "dgx1v", "--gpus", "3", "--nccl-tuner-config", "c.conf", cwd=tmp_path),
            r"--gpus: .*1 GPU")


def test_a_cpu_job_is_refused(tmp_path):
    (tmp_path / "cpu.yaml").write_text(
        "arborcc_topology: 1\nranks: [rank0, rank1]\ndevices:\n"
        "- {id: cpu0, kind: cpu, host: 0, index: 0}\n"
        "- {id: rank0, kind: core, host: 0, index: 0}\n- {id: rank1, kind: core, host: 0, index: 1}\n"
        "links:\n- {src: rank0, dst: cpu0, kind: memory, bandwidth_gbps: 10}\n"
        "- {src: rank1, dst: cpu0, kind: memory, bandwidth_gbps: 10}\n")
    refused(arborcc("tune", "--file", "cpu.yaml", "--nccl-tuner-config", "c.conf", cwd=tmp_path),
            r"cpu\.yaml: NCCL's tuner plugin tunes GPU jobs")
