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
