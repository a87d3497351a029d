"""Parameter checks shared by the library algorithms."""

from __future__ import annotations

from arborcc.errors import InputError
from arborcc.ir.limits import MAX_CHANNELS


def positive(value: object, name: str, algorithm: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}", source=algorithm)
    return value


def channels_ok(channels: int, algorithm: str) -> int:
    channels = positive(channels, "channels", algorithm)
    if channels > MAX_CHANNELS:
        raise InputError(f"channels must be at most {MAX_CHANNELS} (the MSCCL runtimes' limit), got {channels}",
                         source=algorithm)
    return channels
