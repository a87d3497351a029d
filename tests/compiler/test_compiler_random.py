"""Property: for random DSL programs, the compiled IR computes what the program says.

A random program copies and reduces chunks between ranks, buffers and named scratch
regions (sometimes aggregated, sometimes inside ``parallelize``). Its meaning is replayed
directly on numpy arrays, operation by operation; the compiled algorithm - with or without
fusion, with 1 or 2 instances - runs on the numpy IR interpreter and must leave the same
output buffers. The verifier must find no deadlock or race.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from arborcc.ir.model import Buffer
from arborcc.lang import Chunk, Collective, Program, chunk, parallelize
from arborcc.verify import verify_algorithm
from support.ir_checks import thread_block_rule_violations
from arborcc.ir.reference import make_inputs, run

IN, OUT = Buffer.INPUT, Buffer.OUTPUT
CF = 4  # chunks per buffer


class Anything(Collective):
    """Inputs initialized, outputs whatever the program makes of them (no postcondition)."""

    def init_buffers(self):
        return [{IN: [Chunk(r, c) for c in range(CF)], OUT: [None] * CF} for r in range(self.num_ranks)]

    def expected_output(self, rank):
        return None


BUFFERS = [IN, OUT, "relay"]


@st.composite
def programs(draw, sizes=(1, 1, 1, 2)):
    """(ranks, operations): up to 14 random copies and reduces of ``sizes`` chunks."""
    ranks = draw(st.integers(2, 4))
    n_ops = draw(st.integers(1, 14))
    ops = []
    for _ in range(n_ops):
        size = draw(st.sampled_from(sizes))
        ops.append(dict(
            kind=draw(st.sampled_from(["copy", "copy", "reduce"])),
            src=(draw(st.integers(0, ranks - 1)), draw(st.sampled_from(BUFFERS)), draw(st.integers(0, CF - size))),
            dst=(draw(st.integers(0, ranks - 1)), draw(st.sampled_from(BUFFERS)), draw(st.integers(0, CF - size))),
            size=size, par=draw(st.sampled_from([1, 1, 2]))))
    return ranks, ops


def trace(ranks, ops, instances, fusion, protocol="Simple"):
    """Build the program, skipping operations that would be invalid; returns (program, applied)."""
    applied = []
    with Program("random", Anything(ranks, CF), instances=instances, instr_fusion=fusion, protocol=protocol) as prog:
        for op in ops:
            (sr, sb, si), (dr, db, di), n = op["src"], op["dst"], op["size"]
            src = chunk(sr, sb, si, n)
            if src is None or any(v is None for v in src.values()):
                continue
            if (sr, sb) == (dr, db) and si < di + n and di < si + n:
                continue  # overlapping ranges on one rank
            with parallelize(op["par"]):
                if op["kind"] == "copy":
                    src.copy(dr, db, di)
                else:
                    dst = chunk(dr, db, di, n)
                    if dst is None or any(v is None for v in dst.values()):
                        continue
                    dst.reduce(src)
            applied.append(op)
    return prog, applied


def replay(ranks, applied, inputs_logical):
    """The program's meaning on numpy arrays (logical chunks)."""
    bufs = [{IN: inputs_logical[r].copy(), OUT: np.full((CF, inputs_logical[r].shape[1]), np.nan),
             "relay": np.full((CF, inputs_logical[r].shape[1]), np.nan)} for r in range(ranks)]
    for op in applied:
        (sr, sb, si), (dr, db, di), n = op["src"], op["dst"], op["size"]
        val = bufs[sr][sb][si:si + n].copy()
        if op["kind"] == "copy":
            bufs[dr][db][di:di + n] = val
        else:
            bufs[dr][db][di:di + n] += val
    return [b[OUT] for b in bufs]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from([1, 2]), st.booleans())
def test_random_programs_compile_to_what_they_say(program, instances, fusion):
    ranks, ops = program
    prog, applied = trace(ranks, ops, instances, fusion)
    if not applied:
        return
    algo = prog.compile()
    assert thread_block_rule_violations(algo) == []
    report = verify_algorithm(algo)
    assert report.ok, [str(v) for v in report.violations]
    assert_computes(algo, ranks, applied)


def assert_computes(algo, ranks, applied):
    """``algo``, run on the numpy IR interpreter, leaves the outputs ``applied`` says."""
    # physical chunk k of a buffer holds part (k % (n*L)) of logical chunk k // (n*L)
    # (custom collectives replicate chunk by chunk)
    per = algo.ranks[0].input_chunks // CF
    inputs = make_inputs(algo, elems=2, seed=7)
    outputs = run(algo, inputs, slots=2)
    logical_in = [x.reshape(CF, per * 2) for x in inputs]
    want = replay(ranks, applied, logical_in)
    for r in range(ranks):
        got = outputs[r].reshape(CF, per * 2)
        assert np.allclose(got, want[r], equal_nan=True), (r, applied)
