"""``arborcc.init()``: join the job torchrun (or ``arborcc run``) started, on the arborcc backend."""

from __future__ import annotations

import os
from datetime import timedelta

from arborcc.errors import InputError


def init(backend: str = "arborcc", timeout: float | None = None) -> None:
    """``dist.init_process_group`` from torchrun's environment (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT), with ``"arborcc"`` registered first; ``timeout`` in
    seconds (default torch's). Does nothing if the default group already exists."""
    import torch.distributed as dist

    from arborcc.runtime.environment import runtime_settings
    from arborcc.torch.registration import register_backend

    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise InputError(f"{', '.join(missing)} not set: launch with torchrun or `arborcc run`",
                         source="environment")
    runtime_settings()  # every variable the backend and the runtime read, checked before any rank waits
    register_backend()
    if dist.is_initialized():
        return
    kwargs = {} if timeout is None else {"timeout": timedelta(seconds=timeout)}
    dist.init_process_group(backend, init_method="env://", **kwargs)
