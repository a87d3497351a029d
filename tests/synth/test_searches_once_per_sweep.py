"""A sweep over sizes (``compare``, ``tune``) searches each lowering's versions once:
inside ``remembering_searches`` a strategy synthesized at another size finds every search
it runs already done, writes what it writes alone at that size, and nothing is kept
after the block; a search whose lowering is a closure, or whose arguments cannot be
keyed, is not remembered."""

from __future__ import annotations

from functools import partial

from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.synth.lower_emit import lower_broadcast
from arborcc.synth.lower_memo import SEARCHED, remembering_searches, search_key
from arborcc.synth.synthesis import synthesize
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine

MIB = 1 << 20


def fragment():
    return induced(build_machine("dgx1v"), ["gpu0", "gpu1", "gpu2", "gpu5"])


def test_a_second_size_finds_every_search_done_and_writes_what_it_writes_alone():
    topology = fragment()
    alone = {size: write_msccl_xml(synthesize(topology, "allgather", "trees", size=size, timed=False).algorithm)
             for size in (MIB, 64 * MIB)}
    with remembering_searches():
        first = synthesize(topology, "allgather", "trees", size=MIB, timed=False)
        searched = len(SEARCHED)
        second = synthesize(topology, "allgather", "trees", size=64 * MIB, timed=False)
        assert searched > 0 and len(SEARCHED) == searched
    assert len(SEARCHED) == 0  # nothing kept after the sweep
    assert write_msccl_xml(first.algorithm) == alone[MIB]
    assert write_msccl_xml(second.algorithm) == alone[64 * MIB]


def test_searches_are_keyed_by_the_topology_object_and_the_schedules_value():
    topology, twin = fragment(), fragment()
    objects, key = search_key(partial(lower_broadcast, rounds=4), (topology, [1, 2], "b"), ("executor",))
    assert objects == (topology,) and objects[0] is not twin
    assert search_key(partial(lower_broadcast, rounds=4), (twin, (1, 2), "b"), ("executor",))[1] == key
    assert search_key(partial(lower_broadcast, rounds=8), (topology, [1, 2], "b"), ("executor",))[1] != key
    view, other = object(), object()  # hashed by identity: kept by the entry, keyed by identity
    objects, key = search_key(lower_broadcast, (topology, view), ())
    assert objects == (topology, view)
    assert search_key(lower_broadcast, (topology, other), ())[0] == (topology, other)


def test_a_closure_or_an_unhashable_argument_is_not_remembered():
    topology, size = fragment(), MIB

    def closure(*args, **kwargs):  # holds ``size``: its versions may depend on it
        return size

    assert search_key(closure, (topology,), ()) is None
    assert search_key(lambda *a, **k: None, (topology,), ()) is None
    assert search_key(lower_broadcast, (topology, {"a": 1}), ()) is None
