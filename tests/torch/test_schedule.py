"""The executor's static schedules (arborcc.torch.schedule), checked without torch: every
rank following its own list finishes under any order of arrivals, no message lands in
memory a send in flight still reads, every step runs once, after its message."""

from __future__ import annotations

import random

import pytest

from arborcc.ir.aliasing import Mode
from arborcc.ir.model import Op
from arborcc.runtime.lowering import lower_rank
from arborcc.torch.executor import Geometry, LoweredStep, LoweredThreadBlock, lowered_program
from arborcc.torch.schedule import CHANNEL_TAGS, MEMORY, POST_RECV, POST_SEND, STEP, TEMP, WAIT, build_schedules


def chunk_lists_of(geo: Geometry):
    def chunk_lists(rank, tb, where, n):
        return [(where[0], c) for c in range(where[1], where[1] + n)], len(geo.ranges(where[0], where[1], n)) == 1
    return chunk_lists


def replay(programs, schedules, tiles_per_rank, seed: int) -> None:
    """Run every rank's schedule with gloo's matching rules in a random interleaving: a wait
    for a receive needs the peer's send posted, a wait for a send the peer's receive; fail
    on a deadlock or on memory written while a send in flight reads it."""
    rng = random.Random(seed)
    n = len(programs)
    pos = [0] * n
    posted: dict = {}  # (sender, receiver, tag) -> [sends, receives]
    ops: list[dict] = [{} for _ in range(n)]  # rank -> token -> (key, index, is send, chunks it reads)
    ran: list[list] = [[] for _ in range(n)]

    def chunks(r, i, what):
        per = len(programs[r])
        kind, at, count = what
        if kind != MEMORY:
            return set()
        return {(i // per, at[0], c) for c in range(at[1], at[1] + count)}

    def reading(r):
        return set().union(*(reads for key, idx, send, reads in ops[r].values() if send))

    while any(pos[r] < len(schedules[r].actions) for r in range(n)):
        ready = []
        for r in range(n):
            if pos[r] == len(schedules[r].actions):
                continue
            act = schedules[r].actions[pos[r]]
            if act[0] == WAIT:
                key, idx, send, _ = ops[r][act[1]]
                if posted.get(key, [0, 0])[1 if send else 0] <= idx:
                    continue  # the peer has not posted the matching operation
            ready.append(r)
        assert ready, f"deadlock: ranks at {pos}"
        r = rng.choice(ready)
        act = schedules[r].actions[pos[r]]
        pos[r] += 1
        if act[0] in (POST_SEND, POST_RECV):
            send = act[0] == POST_SEND
            per = len(programs[r])
            tb = programs[r][act[2] % per]
            tag = tb.channel + CHANNEL_TAGS * (act[2] // per)
            key = (r, tb.send, tag) if send else (tb.recv, r, tag)
            count = posted.setdefault(key, [0, 0])
            target = chunks(r, act[2], act[3])
            if not send:
                assert not target & reading(r), f"rank {r} receives into memory a send in flight reads"
            ops[r][act[1]] = (key, count[0 if send else 1], send, target if send else set())
            count[0 if send else 1] += 1
        elif act[0] == WAIT:
            del ops[r][act[1]]
        else:
            _, i, k, slot = act
            step = programs[r][i % len(programs[r])].steps[k]
            if step.dst is not None and step.op is not Op.RECV_REDUCE_SEND:
                tile = i // len(programs[r])
                written = {(tile, step.dst[0], c) for c in range(step.dst[1], step.dst[1] + step.count)}
                assert slot is None or not written & reading(r), f"rank {r} step writes memory a send reads"
            ran[r].append((i, k))
    for r in range(n):
        assert not ops[r], f"rank {r} left operations in flight"
        per = len(programs[r])
        for i in range(per * tiles_per_rank):  # every computing step ran once, in its thread block's order
            steps = [k for j, k in ran[r] if j == i]
            assert steps == sorted(set(steps))


def library_algorithms():
    from arborcc.library.allpairs import allpairs_allreduce
    from arborcc.library.halving_doubling import hd_allreduce
    from arborcc.library.ring import ring_allgather, ring_allreduce, ring_reducescatter
    from arborcc.runtime.direct import owner_allreduce

    return [owner_allreduce(4, True)] + [b.algorithm for b in (
        ring_allreduce(4, channels=2, inplace=True), allpairs_allreduce(4), hd_allreduce(4), ring_allgather(4),
        ring_reducescatter(4), ring_allreduce(3, channels=1, inplace=True))]


@pytest.mark.parametrize("tiles", [1, 3])
def test_schedules_finish_under_any_order_of_arrivals(tiles):
    for algo in library_algorithms():
        mode = Mode.INPLACE if algo.inplace else Mode.OUTOFPLACE
        programs = [lowered_program(lower_rank(algo, r, mode)) for r in range(algo.num_ranks)]
        per_block = lower_rank(algo, 0, mode).chunks_per_block
        geo = Geometry(per_block * 12, 12, per_block, 0) if tiles == 1 else Geometry(per_block * 12, 4, per_block, 0, 12)
        schedules = build_schedules(programs, tiles, 2, chunk_lists_of(geo))
        for seed in range(20):
            replay(programs, schedules, tiles, seed)


def _exchange(reply_first: bool):
    """Rank 0 sends chunk 0 to rank 1 and receives rank 1's message into chunk 0; rank 1
    receives rank 0's message, then replies (``reply_first``: replies before receiving)."""
    def step(op):
        return LoweredStep(op, (0, 0), (0, 0), 1, None, False, False)

    rank0 = [LoweredThreadBlock(1, 1, 0, (step(Op.SEND), step(Op.RECV)))]
    ops1 = (Op.SEND, Op.RECV) if reply_first else (Op.RECV, Op.SEND)
    rank1 = [LoweredThreadBlock(0, 0, 0, tuple(step(op) for op in ops1))]
    return [rank0, rank1]


def test_a_reply_lands_in_place_and_crossing_messages_go_to_a_temporary():
    """A message lands where a send of this rank read once that send has completed (the
    peer sends it only after receiving); messages that cross cannot wait for each other."""
    chunk_lists = chunk_lists_of(Geometry(4, 4, 1, 0))
    rank0 = build_schedules(_exchange(reply_first=False), 1, 2, chunk_lists)[0].actions
    assert [a[0] for a in rank0] == [POST_SEND, WAIT, POST_RECV, WAIT, STEP]
    assert rank0[2][3][0] == MEMORY
    crossing = build_schedules(_exchange(reply_first=True), 1, 2, chunk_lists)
    for r in range(2):
        receive = next(a for a in crossing[r].actions if a[0] == POST_RECV)
        assert receive[3][0] == TEMP
        replay(_exchange(reply_first=True), crossing, 1, seed=r)


def test_a_message_no_one_sends_is_an_error():
    from arborcc.errors import InputError

    lone = [[LoweredThreadBlock(-1, 1, 0, (LoweredStep(Op.RECV, None, (0, 0), 1, None, False, True),))],
            [LoweredThreadBlock(-1, -1, 0, ())]]
    with pytest.raises(InputError, match="never sent"):
        build_schedules(lone, 1, 2, chunk_lists_of(Geometry(4, 4, 1, 0)))
