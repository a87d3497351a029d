"""The values of the DSL's scheduling directives (GC3 section 5.1).

* ``ch=`` on copy/reduce picks the channel of a transfer; ``sendtb=``/``recvtb=`` pick
  thread blocks when the program's :class:`ThreadblockPolicy` is manual.
* :func:`~arborcc.lang.program.parallelize` (a ``with`` region) creates n parallel
  instances of the operations inside, each on 1/n of the data, on disjoint channels.
* Aggregation is expressed with multi-count references (``chunk(r, buf, i, size=4)``).
* ``instances=`` and ``protocol=`` are arguments of :class:`~arborcc.lang.program.Program`.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import enum

from arborcc.ir.model import Protocol


class ThreadblockPolicy(str, enum.Enum):
    """Who assigns thread blocks: the compiler (``auto``) or the program (``manual``)."""

    auto = "auto"
    manual = "manual"

    def __str__(self) -> str:
        return self.value


def parse_policy(value: object) -> ThreadblockPolicy:
    if isinstance(value, ThreadblockPolicy):
        return value
    text = getattr(value, "value", value)
    try:
        return ThreadblockPolicy(str(text).lower())
    except ValueError:
        raise ValueError(f"thread-block policy must be 'auto' or 'manual', got {value!r}") from None


def parse_protocol(value: object) -> Protocol:
    if isinstance(value, Protocol):
        return value
    for p in Protocol:
        if str(value).lower() == p.value.lower():
            return p
    raise ValueError(f"protocol must be Simple, LL or LL128, got {value!r}")

