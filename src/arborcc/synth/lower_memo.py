"""What one search for a version within the limits keeps (call-scoped).

:func:`arborcc.synth.lower_search.within_limits` lowers one schedule in many versions
(rounds, fusion, spreads); the versions ask the channel planning
(:mod:`.lower_channels`) and the block arithmetic (:mod:`.lower_blocks`) the same
questions again, so the answers are kept for the versions of that one call
(:func:`one_search`), not from one synthesis to the next.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

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
