"""Small helpers for inspecting compiled IR in tests."""

from __future__ import annotations

from collections import Counter

from arborcc.ir.model import Algorithm, Op


def ops_of(algo: Algorithm, rank: int) -> list[str]:
    """Step types of a rank, thread block by thread block (nops left out)."""
    return [s.op.value for tb in algo.ranks[rank].threadblocks for s in tb.steps if s.op is not Op.NOP]


def op_counts(algo: Algorithm) -> Counter:
    return Counter(s.op.value for r in algo.ranks for tb in r.threadblocks for s in tb.steps)


def thread_block_rule_violations(algo: Algorithm) -> list[str]:
    """The MSCCL runtime's thread-block rules, checked independently of the compiler:
    steps send/receive only through their block's peers; one sending and one receiving
    thread block per (peer, channel); ids contiguous from 0; dependencies point at
    existing steps of other blocks of the same rank."""
    bad = []
    for rp in algo.ranks:
        ids = [tb.id for tb in rp.threadblocks]
        if sorted(ids) != list(range(len(ids))):
            bad.append(f"rank {rp.rank}: thread block ids {ids} are not 0..{len(ids) - 1}")
        send_conn, recv_conn = {}, {}
        sizes = {tb.id: len(tb.steps) for tb in rp.threadblocks}
        for tb in rp.threadblocks:
            if tb.send >= 0:
                key = (tb.send, tb.channel)
                if key in send_conn:
                    bad.append(f"rank {rp.rank}: tbs {send_conn[key]} and {tb.id} both send to {key}")
                send_conn[key] = tb.id
            if tb.recv >= 0:
                key = (tb.recv, tb.channel)
                if key in recv_conn:
                    bad.append(f"rank {rp.rank}: tbs {recv_conn[key]} and {tb.id} both receive from {key}")
                recv_conn[key] = tb.id
            for i, s in enumerate(tb.steps):
                if s.op.sends and tb.send < 0:
                    bad.append(f"rank {rp.rank} tb {tb.id} step {i}: {s.op.value} without a send peer")
                if s.op.receives and tb.recv < 0:
                    bad.append(f"rank {rp.rank} tb {tb.id} step {i}: {s.op.value} without a receive peer")
                if s.dep is not None:
                    if s.dep.tb == tb.id or s.dep.tb not in sizes or not 0 <= s.dep.step < sizes[s.dep.tb]:
                        bad.append(f"rank {rp.rank} tb {tb.id} step {i}: bad dependency {s.dep}")
    return bad


def dependency_count(algo: Algorithm) -> int:
    return sum(1 for r in algo.ranks for tb in r.threadblocks for s in tb.steps if s.dep is not None)
