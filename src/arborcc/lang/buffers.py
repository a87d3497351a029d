"""Buffer names of the DSL.

GC3 section 3.1: every rank has three buffers, ``input`` (holding the input data),
``output`` and ``scratch`` (uninitialized). Any other hashable name denotes a *named
scratch region* that the compiler lays out inside the scratch buffer. Buffers are
written with :class:`arborcc.ir.model.Buffer` members, or with the strings
``"input"``/``"in"``/``"i"``, ``"output"``/``"out"``/``"o"``, ``"scratch"``/``"sc"``/``"s"``.

Inside a traced program each buffer of a rank has a small integer *code*: 0 input,
1 output, 2 scratch, 3.. named regions (codes are shared by all ranks).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.ir.model import Buffer

INPUT, OUTPUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
CODE_INPUT, CODE_OUTPUT, CODE_SCRATCH = 0, 1, 2

_ALIASES = {
    "input": INPUT, "in": INPUT, "i": INPUT,
    "output": OUTPUT, "out": OUTPUT, "o": OUTPUT,
    "scratch": SCRATCH, "sc": SCRATCH, "s": SCRATCH,
}


def resolve_buffer(buffer: object) -> object:
    """Canonical name of a buffer: a :class:`Buffer` member or a named-scratch name."""
    if buffer is INPUT or buffer is OUTPUT or buffer is SCRATCH:
        return buffer
    if isinstance(buffer, str):
        return _ALIASES.get(buffer.lower(), buffer)
    if isinstance(buffer, Buffer):  # pragma: no cover - enum members are caught above
        return buffer
    # objects of other buffer enums (e.g. a compat layer's) carry the IR letter as value
    value = getattr(buffer, "value", None)
    if isinstance(value, str) and value in ("i", "o", "s"):
        return _ALIASES[value]
    try:
        hash(buffer)
    except TypeError:
        raise TypeError(f"a buffer name must be hashable, got {buffer!r}") from None
    return buffer


def buffer_label(buffer: object) -> str:
    """How a buffer is named in messages: ``input``, ``output``, ``scratch`` or ``scratch 'x'``."""
    if buffer is INPUT:
        return "input"
    if buffer is OUTPUT:
        return "output"
    if buffer is SCRATCH:
        return "scratch"
    return f"scratch {buffer!r}"


def is_scratch(buffer: object) -> bool:
    return buffer is not INPUT and buffer is not OUTPUT
