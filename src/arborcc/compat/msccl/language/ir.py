"""Names the public GC3 tools keep in ``msccl.language.ir``: :class:`Buffer`,
:class:`ThreadblockPolicy`, :class:`Instruction` (the step types).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import enum

from arborcc.ir.model import Buffer as _IRBuffer
from arborcc.ir.model import Op as Instruction
from arborcc.lang.directives import ThreadblockPolicy

_arborcc_compat = True


class Buffer:
    """``Buffer.input`` / ``Buffer.output`` / ``Buffer.scratch``: arborcc's IR buffers."""

    input = _IRBuffer.INPUT
    output = _IRBuffer.OUTPUT
    scratch = _IRBuffer.SCRATCH


class ChannelType(enum.Enum):  # accepted for signature compatibility; arborcc has one kind
    proxy = "proxy"
    sm = "sm"
    none = "none"


__all__ = ["Buffer", "ThreadblockPolicy", "Instruction", "ChannelType"]
