"""What the searches for a version within the limits keep (call-scoped).

:func:`arborcc.synth.lower_search.within_limits` lowers one schedule in many versions
(rounds, fusion, spreads); the versions ask the channel planning
(:mod:`.lower_channels`) and the block arithmetic (:mod:`.lower_blocks`) the same
questions again, so the answers are kept for the versions of that one call
(:func:`one_search`), not from one synthesis to the next.

A sweep over sizes (``compare`` and ``tune``: :func:`arborcc.tune.compare.files_per_size`)
synthesizes a strategy once per size, and the version a search finds does not depend
on the size (only which copies rule is kept does, timed at it): inside
:func:`remembering_searches` each search - one lowering of equal schedules on one
topology - runs once for every size (:func:`search_key`).
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import Any, Hashable, Iterator

from arborcc.memo import CallMemo

#: answers kept inside one search (its versions ask again): :func:`~.lower_channels.tree_colours`
#: by the identities of its trees (the copies :func:`~.lower_channels.balanced_copies` tries are
#: coloured again by :func:`~.lower_channels.tree_channel_map`), per tree object its rank pairs
#: and thread blocks (:func:`~.lower_channels.tree_pair_ids`,
#: :func:`~.lower_channels.tree_rank_threadblocks`), :func:`~.lower_blocks.transfer_blocks` by
#: its arguments (a root's blocks and its rounds' ranges ask for the same),
#: :func:`~.lower_channels.heavy_trees_apart` per topology object and its arguments (the
#: versions ask again with other fusion and spreads)
KEPT = CallMemo("synth.lower.kept", opened_by="within_limits (every lowering's version search)",
                purpose="tree colours, rank pairs, thread blocks, transfer blocks, heavy trees apart")


@contextmanager
def one_search() -> Iterator[None]:
    """Keep answers for the versions of one :func:`~arborcc.synth.lower_search.within_limits` call."""
    with KEPT.active():
        yield


#: the version each search found, by :func:`search_key` and the topology object (a sweep
#: over sizes searches again with equal schedules at every size)
SEARCHED = CallMemo("synth.lower.searched", opened_by="compare and tune (remembering_searches)",
                    purpose="the version a lowering's search finds, once for every size of a sweep")


@contextmanager
def remembering_searches() -> Iterator[None]:
    """Within the block, each search of :func:`~arborcc.synth.lower_search.within_limits`
    (keyed by :func:`search_key`) runs once."""
    with SEARCHED.active():
        yield


def search_key(lower, args: tuple, flags: tuple) -> tuple[tuple[object, ...], Hashable] | None:
    """(the objects a search is keyed by the identity of, a value key for the rest) of
    ``lower(*args)`` searched with ``flags``, or None where the search cannot be keyed:
    ``lower`` is a closure (it may hold anything, the size among it) or an argument is
    unhashable. Topologies and objects hashed by identity are keyed by identity, the
    schedules (frozen trees, paths, counts; lists as tuples) by value."""
    objects: list[object] = []
    try:
        key = (_lowering_key(lower, objects), tuple(_value_key(a, objects) for a in args), flags)
        hash(key)
    except TypeError:
        return None
    return tuple(objects), key


def _lowering_key(lower, objects: list[object]) -> Hashable:
    """A module-level function by name, a :func:`functools.partial` of one by its
    arguments; anything else raises TypeError."""
    if isinstance(lower, partial):
        return (_lowering_key(lower.func, objects), tuple(_value_key(a, objects) for a in lower.args),
                tuple(sorted((k, _value_key(v, objects)) for k, v in lower.keywords.items())))
    name = getattr(lower, "__qualname__", "<unnamed>")
    if getattr(lower, "__closure__", True) is not None or "<" in name:
        raise TypeError(f"{name}: not a module-level function")
    return lower.__module__, name


def _value_key(value: Any, objects: list[object]) -> Hashable:
    """Lists and tuples by their items, values by value; a topology, and any object
    whose hash is its identity (a ``Cluster`` view), by identity: it joins ``objects``,
    which the entry holds, so its id cannot pass to another object while the entry lives."""
    from arborcc.topology.model import Topology

    if isinstance(value, Topology) or type(value).__hash__ is object.__hash__:
        objects.append(value)
        return ("object", len(objects) - 1)
    if isinstance(value, (list, tuple)):
        return tuple(_value_key(v, objects) for v in value)
    return value
