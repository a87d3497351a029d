"""Message sizes as users type them, the one syntax of every command and variable.

A size is a number of bytes with an optional binary unit, as nccl-tests reads them:
``4096``, ``64K``, ``1.5M``, ``1G``, ``2T``; K = 1024 bytes, M = 1024 K, G = 1024 M,
T = 1024 G, and ``KB``/``KiB`` (``MB``/``MiB``, ...) mean the same as ``K``. The
result must be a whole number of bytes from 1 to 2^63 - 1 (the runtimes count bytes in
signed 64-bit integers). A list of sizes is a sweep ``MIN:MAX[:FACTOR]`` (nccl-tests'
``-b MIN -e MAX -f FACTOR``, factor 2 by default; MIN, MIN x FACTOR, ... up to MAX) or
a comma list ``4K,1M,64M``, at most :data:`MAX_SIZES` sizes.
"""

from __future__ import annotations

import argparse
import math
import re

from arborcc.errors import InputError

__all__ = ["MAX_BYTES", "MAX_SIZES", "format_size", "parse_size", "parse_sizes", "size_argument"]

#: the largest size: the runtimes count bytes in signed 64-bit integers
MAX_BYTES = 2**63 - 1
#: the most sizes one list or sweep may hold: a sweep is simulated size by size, and 256
#: sizes of 1K-1G on DGX-1V took compare 19 s and tune 24 s on the shared 2-core machine
#: (4,096: compare 443 s); nccl-tests sweeps are tens of sizes
MAX_SIZES = 256
#: unit letter -> bytes
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
EXAMPLES = "examples: 4096, 64K, 1.5M, 1G"

_SIZE = re.compile(r"(?P<number>[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9_]+(?:[eE][+-]?[0-9]+)?)"
                   r"\s*(?P<unit>[KMGT]?)(?:I?B)?", re.IGNORECASE)


def parse_size(text: str, source: str = "size") -> int:
    """Bytes of ``text`` (module doc); :class:`InputError` naming ``source`` otherwise."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise InputError(f"not a size: {text!r} ({EXAMPLES})", source=source)
    number, unit = m.group("number"), UNITS[m.group("unit").upper()]
    try:
        if re.fullmatch(r"[0-9_]+", number):  # integers exactly, whatever their length
            value: float | int = int(number) * unit
        else:
            value = float(number) * unit
    except ValueError:
        raise InputError(f"not a size: {text!r} ({EXAMPLES})", source=source) from None
    if not math.isfinite(value) or value > MAX_BYTES:
        raise InputError(f"{text!r} is over the largest size, 2^63 - 1 bytes", source=source)
    if value < 1:
        raise InputError(f"a size must be at least 1 byte, got {text!r}", source=source)
    if value != int(value):
        raise InputError(f"{text!r} is not a whole number of bytes ({value:g})", source=source)
    return int(value)


def parse_sizes(text: str, source: str = "--sizes") -> list[int]:
    """The sizes of ``MIN:MAX[:FACTOR]``, ``A,B,C`` or one size, increasing, without repeats."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise InputError(f"expected MIN:MAX or MIN:MAX:FACTOR, got {text!r}", source=source)
        lo, hi = parse_size(parts[0], source), parse_size(parts[1], source)
        factor = parse_factor(parts[2], source) if len(parts) == 3 else 2.0
        return sweep(lo, hi, factor, source)
    sizes = sorted({parse_size(p, source) for p in text.split(",") if p.strip()})
    if not sizes:
        raise InputError(f"no size given ({EXAMPLES}, or MIN:MAX[:FACTOR])", source=source)
    if len(sizes) > MAX_SIZES:
        raise InputError(f"{len(sizes)} sizes, more than {MAX_SIZES}", source=source)
    return sizes


def parse_factor(text: str, source: str = "--sizes") -> float:
    """A sweep's step factor: a finite number greater than 1."""
    try:
        factor = float(text)
    except ValueError:
        raise InputError(f"the factor must be a number, got {text!r}", source=source) from None
    if not (math.isfinite(factor) and factor > 1):
        raise InputError(f"the factor must be a finite number greater than 1, got {text!r}", source=source)
    return factor


def sweep(lo: int, hi: int, factor: float, source: str = "--sizes") -> list[int]:
    """``lo``, ``lo * factor``, ... up to ``hi`` (each rounded down to whole bytes)."""
    if hi < lo:
        raise InputError(f"the largest size {format_size(hi)} is below the smallest {format_size(lo)}",
                         source=source)
    count = math.floor(math.log(hi / lo, factor) + 1e-9) + 1
    if count > MAX_SIZES:
        raise InputError(f"{format_size(lo)} to {format_size(hi)} by {factor:g} makes {count} sizes, "
                         f"more than {MAX_SIZES}", source=source)
    out: list[int] = []
    for i in range(count):
        s = min(hi, int(lo * factor**i)) if i else lo
        if not out or s > out[-1]:
            out.append(s)
    return out


def format_size(size: int) -> str:
    """``4K``, ``64M``, ``1G``: the largest binary unit that divides ``size``, else bytes."""
    for shift, unit in ((40, "T"), (30, "G"), (20, "M"), (10, "K")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def size_argument(text: str) -> int:
    """:func:`parse_size` as an argparse ``type=``: argparse names the flag in the error."""
    try:
        return parse_size(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(e.problem) from None
