"""Message sizes as users type them: ``4096``, ``64K``, ``1.5M``, ``1G`` (nccl-tests'
units: K = 1024 bytes, M = 1024 K, G = 1024 M; ``KB``/``KiB`` mean the same), and
sweeps ``MIN:MAX[:FACTOR]`` (nccl-tests' ``-b MIN -e MAX -f FACTOR``, factor 2 by
default) or comma lists."""

from __future__ import annotations

from arborcc.errors import InputError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, source: str = "size") -> int:
    """Bytes of ``text`` (module doc)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    num = t.rstrip("KMGT")
    unit = t[len(num):]
    try:
        value = float(num) * _UNITS[unit]
    except (ValueError, KeyError):
        raise InputError(f"not a size: {text!r} (examples: 4096, 64K, 1.5M, 1G)", source=source) from None
    if not value >= 1:
        raise InputError(f"a size must be at least 1 byte, got {text!r}", source=source)
    return int(value)


def parse_sizes(text: str, source: str = "--sizes") -> list[int]:
    """The sizes of ``MIN:MAX[:FACTOR]``, ``A,B,C`` or one size, increasing."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise InputError(f"expected MIN:MAX or MIN:MAX:FACTOR, got {text!r}", source=source)
        lo, hi = parse_size(parts[0], source), parse_size(parts[1], source)
        try:
            factor = float(parts[2]) if len(parts) == 3 else 2.0
        except ValueError:
            raise InputError(f"the factor must be a number, got {parts[2]!r}", source=source) from None
        if hi < lo:
            raise InputError(f"the largest size {hi} is below the smallest {lo}", source=source)
        if not factor > 1:
            raise InputError(f"the factor must be greater than 1, got {factor:g}", source=source)
        out, s = [], float(lo)
        while s <= hi * (1 + 1e-12):
            out.append(int(s))
            s *= factor
            if len(out) > 4096:
                raise InputError(f"{text!r} makes more than 4096 sizes", source=source)
        return out
    return sorted({parse_size(p, source) for p in text.split(",") if p.strip()})
