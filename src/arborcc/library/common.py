"""Parameter checks shared by the library algorithms."""

from __future__ import annotations

from arborcc.errors import InputError


def positive(value: object, name: str, algorithm: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}", source=algorithm)
    return value


def channels_ok(channels: int, algorithm: str) -> int:
    channels = positive(channels, "channels", algorithm)
    if channels > 32:
        raise InputError(f"channels must be at most 32 (the MSCCL limit), got {channels}", source=algorithm)
    return channels
