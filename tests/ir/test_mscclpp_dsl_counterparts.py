"""arborcc's MSCCL++ plans beside the plans MSCCL++'s DSL writes for the same algorithm.

Pairs (same collective, same rank count; docs/mscclpp.md "Beside the DSL's plans"):
``ring-allgather --ranks 2 --inplace`` and ``dsl__allgather.json`` (Simple), with
``--protocol LL`` and ``dsl__allgather_pkt_2.json``; ``allpairs-allreduce --ranks N
--protocol LL --inplace`` and ``dsl__allreduce_naivy_N.json`` (N = 2, 4, 8), with
``--instances N`` and ``dsl__allreduce_pkt_N.json`` (N = 2, 4). The DSL's all-gathers at
more ranks are direct (every rank writes to every peer), not rings, and have no
counterpart here.
What is the same: the data each rank writes into each peer. What differs, per thread block,
is asserted exactly, so a change on either side fails here.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from support.cli_runs import arborcc

DSL_SAMPLES = Path(__file__).parent / "samples" / "mscclpp"


def compiled_plan(tmp_path: Path, algorithm: str, *flags: str) -> dict:
    run = arborcc("compile", algorithm, *flags, "--format", "mscclpp", "-o", "plan.json", cwd=tmp_path)
    assert run.code == 0, run.err
    return json.loads((tmp_path / "plan.json").read_text())


def dsl_plan(name: str) -> dict:
    return json.loads((DSL_SAMPLES / f"dsl__{name}.json").read_text())


def ops_per_thread_block(plan: dict, rank: int) -> list[Counter]:
    """The multiset of operation names of each of ``rank``'s thread blocks (in a fixed
    order, not the thread blocks' ids: ranks number their senders and receivers apart)."""
    blocks = [Counter(op["name"] for op in tb["ops"]) for tb in plan["gpus"][rank]["threadblocks"]]
    return sorted(blocks, key=lambda block: sorted(block.items()))


def ops_of_rank(plan: dict, rank: int) -> Counter:
    return sum(ops_per_thread_block(plan, rank), Counter())


def remote_writes(plan: dict, rank: int) -> Counter:
    """(peer, peer's buffer type) of every chunk ``rank`` writes into a peer's memory."""
    gpu = plan["gpus"][rank]
    writes: Counter = Counter()
    for tb in gpu["threadblocks"]:
        refs = [i for ref in tb.get("remote_buffer_refs", []) for i in ref["remote_buffer_ids"]]
        for op in tb["ops"]:
            for dst in op.get("dst_buff", []):
                if "buffer_id" in dst:
                    remote = gpu["remote_buffers"][refs[dst["buffer_id"]]]
                    writes[remote["rank"], remote["type"]] += dst["size"]
    return writes


def semaphore_uses(plan: dict, rank: int, name: str) -> Counter:
    """How often each semaphore id is named by ``rank``'s operations called ``name``."""
    return Counter(i for tb in plan["gpus"][rank]["threadblocks"] for op in tb["ops"]
                   if op["name"] == name for i in op["semaphore_ids"])


def local_copies(plan: dict, rank: int) -> list[tuple[str, str]]:
    """(source type, destination type) of each ``copy`` on ``rank``."""
    return [(op["src_buff"][0]["type"], op["dst_buff"][0]["type"])
            for tb in plan["gpus"][rank]["threadblocks"] for op in tb["ops"] if op["name"] == "copy"]


def test_ring_allgather_puts_into_scratch_where_the_dsl_puts_into_the_output(tmp_path):
    ours = compiled_plan(tmp_path, "ring-allgather", "--ranks", "2", "--inplace")
    theirs = dsl_plan("allgather")
    assert ours["collective"] == theirs["collective"] == "allgather"
    assert ours["protocol"] == theirs["protocol"] == "Simple"
    assert ours["inplace"] and theirs["inplace"]
    for rank, peer in ((0, 1), (1, 0)):
        # the same: one chunk put into the one peer
        assert ops_of_rank(ours, rank)["put"] == ops_of_rank(theirs, rank)["put"] == 1
        # ... but into the peer's scratch (ours) or straight into its output (the DSL's)
        assert remote_writes(ours, rank) == Counter({(peer, "s"): 1})
        assert remote_writes(theirs, rank) == Counter({(peer, "o"): 1})
        # the DSL: one thread block, a relaxed handshake before the put, the signal/wait after
        assert ops_per_thread_block(theirs, rank) == [
            Counter(nop=5, rlxsignal=1, rlxwait=1, put=1, signal=1, wait=1)]
        # ours: a sending and a receiving thread block, the receiver copies out of scratch
        assert ops_per_thread_block(ours, rank) == sorted(
            [Counter(put=1, nop=1, signal=1), Counter(wait=1, nop=1, copy=1)],
            key=lambda block: sorted(block.items()))
        assert local_copies(ours, rank) == [("s", "o")]
        assert local_copies(theirs, rank) == []
        # one channel per direction (ours) where the DSL uses one channel both ways
        assert ours["gpus"][rank]["channels"] == [{"channel_type": "memory", "connected_to": [peer, peer]}]
        assert theirs["gpus"][rank]["channels"] == [{"channel_type": "memory", "connected_to": [peer]}]


def test_ring_allgather_in_packets_has_the_dsl_packet_allgathers_operations(tmp_path):
    ours = compiled_plan(tmp_path, "ring-allgather", "--ranks", "2", "--protocol", "LL", "--inplace")
    theirs = dsl_plan("allgather_pkt_2")
    assert ours["protocol"] == theirs["protocol"] == "LL"
    assert ours["inplace"] and theirs["inplace"]
    for rank, peer in ((0, 1), (1, 0)):
        # the same: one packet chunk into the peer's scratch, a ppkt thread block and an
        # upkt thread block (from the output's own block, into the output's peer block)
        assert remote_writes(ours, rank) == remote_writes(theirs, rank) == Counter({(peer, "s"): 1})
        assert ops_per_thread_block(ours, rank) == ops_per_thread_block(theirs, rank) == [
            Counter(ppkt=1), Counter(upkt=1)]
        # the difference: one channel per direction where the DSL uses one both ways
        assert ours["gpus"][rank]["channels"] == [{"channel_type": "memory", "connected_to": [peer, peer]}]
        assert theirs["gpus"][rank]["channels"] == [{"channel_type": "memory", "connected_to": [peer]}]


# (DSL sample, ranks, instances, the DSL's thread blocks per rank, its operations per rank)
ALLPAIRS_COUNTERPARTS = [
    # one chunk per rank: one thread block; one ppkt to all peers, one respkt that sums the
    # peers' packets and sends the sum to all peers, then an upkt per peer's sum
    ("allreduce_naivy_2", 2, 1, 1, Counter(ppkt=1, respkt=1, nop=1, upkt=1)),
    ("allreduce_naivy_4", 4, 1, 1, Counter(ppkt=1, respkt=1, nop=1, upkt=3)),
    ("allreduce_naivy_8", 8, 1, 1, Counter(ppkt=1, respkt=1, nop=1, upkt=7)),
    # N chunks per rank, a thread block per chunk (each with one respkt); N-1 ppkts and N-1
    # upkts spread over them
    ("allreduce_pkt_2", 2, 2, 2, Counter(ppkt=1, respkt=2, upkt=1)),
    ("allreduce_pkt_4", 4, 4, 4, Counter(ppkt=3, respkt=4, upkt=3)),
]


@pytest.mark.parametrize("sample, ranks, instances, dsl_thread_blocks, dsl_ops", ALLPAIRS_COUNTERPARTS)
def test_allpairs_allreduce_writes_what_the_dsl_writes_with_unfused_packet_ops(
        tmp_path, sample, ranks, instances, dsl_thread_blocks, dsl_ops):
    ours = compiled_plan(tmp_path, "allpairs-allreduce", "--ranks", str(ranks), "--instances", str(instances),
                         "--protocol", "LL", "--inplace")
    theirs = dsl_plan(sample)
    assert ours["collective"] == theirs["collective"] == "allreduce"
    assert ours["protocol"] == theirs["protocol"] == "LL"
    assert ours["inplace"] and theirs["inplace"]
    assert ours["gpus"][0]["input_chunks"] == theirs["gpus"][0]["input_chunks"] == ranks * instances
    peers = ranks - 1
    for rank in range(ranks):
        # the same: per chunk share, two packet chunks into each peer's scratch (the share,
        # then its sum)
        expected_writes = Counter({(p, "s"): 2 * instances for p in range(ranks) if p != rank})
        assert remote_writes(ours, rank) == remote_writes(theirs, rank) == expected_writes
        assert ops_of_rank(theirs, rank) == dsl_ops
        assert [block["respkt"] for block in ops_per_thread_block(theirs, rank)] == [1] * dsl_thread_blocks
        # ours, per instance: a thread block per connection (a sender and a receiver per
        # peer), one-chunk ppkts, the peers' packets unpacked into scratch before a plain
        # re (no respkt), semaphores between the thread blocks
        blocks = ops_per_thread_block(ours, rank)
        assert len(blocks) == 2 * peers * instances
        assert sum(1 for block in blocks if block["ppkt"]) == peers * instances
        assert sum(1 for block in blocks if block["upkt"]) == peers * instances
        mine = ops_of_rank(ours, rank)
        assert mine["ppkt"] == mine["upkt"] == 2 * peers * instances
        assert mine["re"] == peers * instances
        assert mine["respkt"] == 0
        # each semaphore released once and acquired once; per instance: a peer's share
        # unpacked -> the reducer (N-2, the reducer receives one itself), the sum -> each
        # sender (N-1), a sender's first ppkt -> the receiver that overwrites that chunk (N-1)
        released = semaphore_uses(ours, rank, "sem_release")
        assert released == semaphore_uses(ours, rank, "sem_acquire")
        assert set(released.values()) <= {1} and len(released) == (3 * ranks - 4) * instances
