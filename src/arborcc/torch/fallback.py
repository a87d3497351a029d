"""Collectives arborcc does not run go to gloo, with one warning per job for each kind.

The backend keeps a gloo process group over the same ranks (created with the backend,
on its own prefix of torch's store) and hands it whatever arborcc cannot run: an
element type, reduction or device the runtime lacks, unequal all-to-all splits,
point-to-point operations, gather and scatter. Never silently, and not once per rank:
each distinct fallback - the call, its reduction operator and element types where they
decide, and the reason, e.g. "all_reduce with op BAND on int8 tensors goes to gloo (not
in arborcc: reduction operator)" - is warned about once in the whole job, by the first
rank that makes it (ranks agree through a counter in torch's store, so a fallback that
only some ranks make, such as a send, is still warned about). Every rank logs its own
first fallback of each kind at INFO (logger ``arborcc.torch.fallback``).
"""

from __future__ import annotations

import logging
import warnings

from arborcc.torch.ops import dtype_label, reduction_label

log = logging.getLogger(__name__)  # under "arborcc.torch"

#: the prefix of the store's counters, one per distinct fallback
WARNED_KEY = "arborcc/fallback-warned/"


class FallbackWarning(UserWarning):
    """A collective ran on gloo because arborcc does not implement it."""


def fallback_description(collective: str, reason: str, tensors=(), reduce_op=None) -> str:
    """What goes to gloo and why: ``collective`` (torch.distributed's name), with its
    reduction operator and the element types of ``tensors`` when they decide."""
    words = [collective]
    if reduce_op is not None:
        words.append(f"with op {reduction_label(reduce_op)}")
    dtypes = sorted({dtype_label(t.dtype) for t in tensors})
    if dtypes:
        words.append(f"on {' and '.join(dtypes)} tensors")
    return f"{' '.join(words)} goes to gloo (not in arborcc: {reason})"


def job_store(store):
    """The store every group of the job shares: the one under torch's prefixes (each group
    gets its own ``PrefixStore`` of it)."""
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    return store


class GlooFallback:
    """A gloo process group over the backend's ranks, and the fallbacks this rank has seen."""

    def __init__(self, store, rank: int, size: int, timeout) -> None:
        import torch.distributed as dist

        self.group = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        self.rank = rank
        self.store = job_store(store)
        self.seen: set[str] = set()

    def call(self, collective: str, reason: str, *args, method: str | None = None, tensors=(), reduce_op=None):
        """Run ``collective`` (torch.distributed's name; ``method`` the ProcessGroupGloo
        method, by default the same name) with ``args`` on gloo; the first time this rank
        makes this fallback, log it, and warn if no rank of the job has warned yet."""
        description = fallback_description(collective, reason, tensors, reduce_op)
        if description not in self.seen:
            self.seen.add(description)
            log.info("rank %d: %s", self.rank, description)
            if self.first_in_job(description):
                warnings.warn(f"arborcc: {description}; warned once per job, by rank {self.rank}",
                              FallbackWarning, stacklevel=3)
        return getattr(self.group, method or collective)(*args)

    def first_in_job(self, description: str) -> bool:
        """Whether this rank is the job's first to make this fallback (the store's counter)."""
        return self.store.add(WARNED_KEY + description, 1) == 1
