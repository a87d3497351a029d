"""Collectives arborcc does not run go to gloo, with one warning per kind of call.

The backend keeps a gloo process group over the same ranks (created with the backend,
on its own prefix of torch's store) and hands it whatever arborcc cannot run: an
element type, reduction or device the runtime lacks, unequal all-to-all splits,
point-to-point operations, gather and scatter. Never silently: the first such call of
each kind warns, naming the call and the reason.
"""

from __future__ import annotations

import warnings


class FallbackWarning(UserWarning):
    """A collective ran on gloo because arborcc does not implement it."""


class GlooFallback:
    """A gloo process group over the backend's ranks, and the warnings already given."""

    def __init__(self, store, rank: int, size: int, timeout) -> None:
        import torch.distributed as dist

        self.group = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        self.warned: set[tuple[str, str]] = set()

    def call(self, collective: str, reason: str, *args, method: str | None = None):
        """Run ``collective`` (torch.distributed's name; ``method`` the ProcessGroupGloo
        method, by default the same name) with ``args`` on gloo."""
        key = (collective, reason)
        if key not in self.warned:
            self.warned.add(key)
            warnings.warn(f"arborcc does not implement {collective} for {reason}; running it on gloo "
                          f"(warned once)", FallbackWarning, stacklevel=3)
        return getattr(self.group, method or collective)(*args)
