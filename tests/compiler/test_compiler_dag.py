"""The instruction DAG scan tracks atoms (runs of chunks every access covers whole), not
chunks: on random programs with overlapping multi-count accesses it must find exactly
what a plain chunk-by-chunk scan finds."""

from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings, strategies as st

from arborcc.compiler.dag import build_dag
from arborcc.compiler.instructions import CPY, RE, RECV, RRC, SEND, lower_operations
from arborcc.compiler.layout import plan_layout
from arborcc.errors import ProgramError
from arborcc.ir.model import Buffer
from arborcc.lang import Chunk, Collective, Program, chunk, parallelize

IN, OUT = Buffer.INPUT, Buffer.OUTPUT
CF = 6  # chunks per buffer
SOURCES = [IN, IN, IN, IN, OUT, "scratch", "relay"]  # mostly initialized: fewer refused operations
DESTINATIONS = [IN, OUT, OUT, OUT, "scratch", "scratch", "relay", "relay"]


class Anything(Collective):
    """Inputs initialized, outputs whatever the program makes of them (no postcondition)."""

    def init_buffers(self):
        return [{IN: [Chunk(r, c) for c in range(CF)], OUT: [None] * CF} for r in range(self.num_ranks)]

    def expected_output(self, rank):
        return None


@st.composite
def programs(draw):
    ops = []
    for _ in range(draw(st.integers(4, 30))):
        size = draw(st.integers(1, 4))
        ops.append((draw(st.sampled_from(["copy", "reduce"])),
                    (draw(st.integers(0, 2)), draw(st.sampled_from(SOURCES)), draw(st.integers(0, CF - size))),
                    (draw(st.integers(0, 2)), draw(st.sampled_from(DESTINATIONS)), draw(st.integers(0, CF - size))),
                    size, draw(st.sampled_from([1, 1, 2]))))
    return ops, draw(st.sampled_from([1, 2]))


def trace(ops, instances):
    """The program of ``ops``, skipping the ones the DSL refuses."""
    with Program("atoms", Anything(3, CF), instances=instances) as prog:
        for kind, (sr, sb, si), (dr, db, di), n, par in ops:
            try:
                src = chunk(sr, sb, si, n)
                with parallelize(par):
                    if kind == "copy" and src is not None:
                        src.copy(dr, db, di)
                    elif src is not None:
                        dst = chunk(dr, db, di, n)
                        if dst is not None:
                            dst.reduce(src)
            except ProgramError:
                continue
    return prog


def chunk_by_chunk(t, sizes):
    """The scan the DAG pass does, one chunk at a time: predecessor sets, readers,
    forwards, depths and the final last writers."""
    lw = [[[-1] * s for s in sz] for sz in sizes]
    rd = [[[] for _ in range(s)] for sz in sizes for s in sz]
    rd = [rd[3 * r:3 * r + 3] for r in range(len(sizes))]
    n = len(t)
    t = SimpleNamespace(**{f: getattr(t, f) for f in t.FIELDS})  # the table's columns, read once
    preds, depth, readers, forwards = [], [], [0] * n, {}
    for i in range(n):
        r, k, c = t.rank[i], t.kind[i], t.cnt[i]
        src = range(t.soff[i], t.soff[i] + c)
        dst = range(t.doff[i], t.doff[i] + c)
        p = set()
        if k in (SEND, CPY, RE):
            ws = {lw[r][t.sbuf[i]][x] for x in src} - {-1}
            for w in ws:
                readers[w] += 1
            p |= ws
            for x in src:
                rd[r][t.sbuf[i]][x].append(i)
            if k == SEND and len(ws) == 1:
                w = ws.pop()
                if (t.kind[w] in (RECV, RRC) and t.dbuf[w] == t.sbuf[i] and t.doff[w] == t.soff[i]
                        and t.cnt[w] == c and all(lw[r][t.sbuf[i]][x] == w for x in src)):
                    forwards.setdefault(w, []).append(i)
        if k in (RE, RRC):
            ws = {lw[r][t.dbuf[i]][x] for x in dst} - {-1} - p
            for w in ws:
                readers[w] += 1
            p |= ws
            for x in dst:
                rd[r][t.dbuf[i]][x].append(i)
        if k != SEND:
            for x in dst:
                p |= ({lw[r][t.dbuf[i]][x]} | set(rd[r][t.dbuf[i]][x])) - {-1, i}
                rd[r][t.dbuf[i]][x] = []
                lw[r][t.dbuf[i]][x] = i
        d = max([depth[q] + 1 for q in p] + ([depth[t.msg_in[i]] + 1] if t.msg_in[i] >= 0 else []), default=0)
        preds.append(p)
        depth.append(d)
    final = {w for bufs in lw for slots in bufs for w in slots}
    return preds, depth, readers, forwards, final


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_atom_scan_matches_the_chunk_by_chunk_scan(program):
    ops, instances = program
    prog = trace(ops, instances)
    if not prog.ops:
        return
    layout = plan_layout(prog)
    t = lower_operations(prog, layout)
    sizes = [layout.ir_sizes(r) for r in range(prog.num_ranks)]
    dag = build_dag(t, sizes)
    preds, depth, readers, forwards, final = chunk_by_chunk(t, sizes)
    assert [set(p) for p in dag.preds] == preds
    assert dag.depth == depth
    assert dag.readers == readers
    assert dag.forwards == forwards
    assert dag.final == final
