"""Message-size ranges in MSCCL++ plans: the writer carries an algorithm's
``min_bytes``/``max_bytes`` as ``min_message_size``/``max_message_size`` (MSCCL++'s
executor refuses a call outside them), and ``arborcc tune --format mscclpp`` writes one
plan per size bucket with its range, which arborcc's runtime reads back as the index says."""

from __future__ import annotations

import dataclasses
import json

import pytest

from arborcc.ir.load import load_algorithm
from arborcc.ir.mscclpp.plan import plan_from_document
from arborcc.ir.mscclpp.translate import plan_to_algorithm
from arborcc.ir.mscclpp.writer import write_mscclpp_plan
from arborcc.library import LIBRARY
from arborcc.runtime.plan import Plan
from arborcc.topology.allocation import induced, resolve_gpus
from arborcc.topology.machines import build_machine
from arborcc.ir.plan_index import read_plan_index
from arborcc.tune.plan_writer import write_plan
from arborcc.tune.search import tune
from arborcc.verify import verify_algorithm
from support.cli_runs import arborcc, refused
from support.execution import assert_executes

SIZES = [1 << 10, 1 << 16, 1 << 20, 1 << 22]


@pytest.fixture(scope="module")
def tuned():
    m = build_machine("dgx1v")
    return tune(induced(m, resolve_gpus(m, "1,4,5,6")), "allreduce", SIZES, strategies=["ring", "nccl-ring"],
                instances=(1, 2), protocols=("Simple", "LL"))


def test_the_writer_carries_the_size_range_into_the_plan():
    algo = LIBRARY["ring-allreduce"](ranks=4).algorithm
    ranged = dataclasses.replace(algo, min_bytes=4096, max_bytes=1 << 20)
    doc = json.loads(write_mscclpp_plan(ranged))
    assert (doc["min_message_size"], doc["max_message_size"]) == (4096, 1 << 20)
    back = plan_to_algorithm(plan_from_document(doc, "ranged"), "ranged")
    assert (back.min_bytes, back.max_bytes) == (4096, 1 << 20)


def test_tune_writes_one_plan_per_bucket_with_its_range(tuned, tmp_path):
    assert all(b.choice.protocol in ("Simple", "LL") for b in tuned.buckets)
    write_plan(tuned, tmp_path, "mscclpp")
    index = read_plan_index(tmp_path)
    assert len(index.rules) == len(tuned.buckets)
    for bucket, entry in zip(tuned.buckets, index.rules):
        assert entry.file.endswith(".json")
        doc = json.loads((tmp_path / entry.file).read_text())
        assert doc["min_message_size"] == bucket.min_bytes == entry.min_bytes
        # the upper bound is the bucket's, or lower where MSCCL++'s scratch holds no larger call
        assert 0 < doc["max_message_size"] == entry.max_bytes
        assert bucket.max_bytes == 0 or entry.max_bytes <= bucket.max_bytes
        algo = load_algorithm(tmp_path / entry.file)
        assert (algo.min_bytes, algo.max_bytes) == (entry.min_bytes, entry.max_bytes)
        assert verify_algorithm(algo).ok
        assert_executes(algo)
    for x, y in zip(index.rules, index.rules[1:]):  # consecutive buckets stay consecutive
        assert x.max_bytes + 1 == y.min_bytes
    assert len(Plan.load(str(tmp_path)).entries) == len(tuned.buckets)  # the runtime's index checks agree


def test_tune_refuses_a_protocol_mscclpp_plans_lack(tmp_path):
    run = arborcc("tune", "--machine", "dgx1v", "--gpus", "0,1", "--sizes", "1K", "--format", "mscclpp",
                  "--protocol", "LL128", "-o", "plan", cwd=tmp_path)
    refused(run, r"--protocol", r"LL128", r"MSCCL\+\+")
    assert not (tmp_path / "plan").exists()


def test_tune_refuses_a_format_without_a_plan_folder(tmp_path):
    run = arborcc("tune", "--machine", "dgx1v", "--gpus", "0,1", "--sizes", "1K", "--format", "mscclpp",
                  cwd=tmp_path)
    refused(run, r"--format", r"-o")


def test_tune_refuses_a_format_with_the_nccl_tuner_config(tmp_path):
    run = arborcc("tune", "--machine", "dgx1v", "--gpus", "0,1", "--sizes", "1K", "--format", "mscclpp",
                  "--nccl-tuner-config", "rules.conf", cwd=tmp_path)
    refused(run, r"--format")
    assert not (tmp_path / "rules.conf").exists()
