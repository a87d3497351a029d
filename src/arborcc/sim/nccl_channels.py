"""How many channels NCCL runs its rings on (its channel choice, beside
:mod:`arborcc.sim.nccl_model`, the cost model it tunes with)."""

from __future__ import annotations

#: the most channels NCCL runs (MAXCHANNELS)
MAX_NCCL_CHANNELS = 32


def nccl_channel_count(distinct_rings: int, switch_channels: int = 0) -> int:
    """The channels NCCL runs on ``distinct_rings`` rings: every ring twice
    (``ncclTopoPostset`` duplicates the channels), or, where its search found a single
    ring order on a switch machine, ``switch_channels`` rings of that order (the fidelity
    profile's ``nccl_channels``: 24 on DGX A100, 32 on DGX H100); at most
    :data:`MAX_NCCL_CHANNELS`."""
    wanted = switch_channels if distinct_rings == 1 and switch_channels else 2 * distinct_rings
    return max(1, min(MAX_NCCL_CHANNELS, wanted))
