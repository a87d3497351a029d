"""Python's cyclic garbage collector, paused for passes that allocate many acyclic objects.

Tracing, compiling, verifying, simulating and synthesizing allocate one small tuple, list
or object per chunk, step or tree hop - millions on a 1024-rank ring - and none of them
form reference cycles, so reference counting frees every one. The cyclic collector would
still walk all live objects each time its allocation threshold trips, which makes such a
pass quadratic in its size; :func:`collector_paused` turns it off for the pass and back on
(only if it was on) afterwards, whatever the pass raises.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the ``with`` block; restore its state after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: :func:`gc.set_threshold` of the processes arborcc runs itself: a young-generation
#: collection every 50,000 net allocations instead of Python's 700, and older generations
#: examined every 20 younger collections instead of 10
COMMAND_THRESHOLDS = (50_000, 20, 20)


def collect_less_often() -> None:
    """Set :data:`COMMAND_THRESHOLDS` for this process: the ``arborcc`` command (and the
    test suite's processes) run passes outside :func:`collector_paused` too - parsing,
    writing and checking files, simulating candidates - whose objects are acyclic as well,
    and with Python's thresholds full collections walk every live algorithm again and
    again. Measured on a 2-core machine: ``arborcc tune --machine dgx1v --gpus 0,1,2,3
    --collective allreduce --sizes 1K:64M --format mscclpp`` took 7.7 s with 2,971
    collections (1.8 s, 1.5 s of it in 20 full ones) and 6.1-6.7 s with 30 (0.4 s), the
    same peak memory (170 MB). Cycles are still collected; a library caller's process keeps
    its own settings."""
    gc.set_threshold(*COMMAND_THRESHOLDS)
