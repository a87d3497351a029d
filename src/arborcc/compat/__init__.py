"""Compatibility surfaces for programs written for other tools.

:mod:`arborcc.compat.msccl` runs programs written for the public GC3 tools
(msccl-tools' ``msccl.language`` / ``msccl.topologies``) with only their import lines
changed, e.g. ``from msccl.language import *`` -> ``from arborcc.compat.msccl.language
import *``. :func:`install_msccl_alias` makes even that change unnecessary: it lets
``import msccl...`` find this package (only when no real ``msccl`` is installed).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

_ALIASED = ("msccl", "msccl.collectives", "msccl.language", "msccl.language.collectives", "msccl.language.ir",
            "msccl.topologies", "msccl.topologies.generic", "msccl.topologies.distributed",
            "msccl.topologies.nvidia", "msccl.topologies.topology")


def install_msccl_alias(force: bool = False) -> bool:
    """Make ``msccl`` imports resolve to :mod:`arborcc.compat.msccl`.

    Does nothing (returns False) when a real ``msccl`` package is importable, unless
    ``force``. Returns True when the alias is in place.
    """
    if not force and "msccl" not in sys.modules and importlib.util.find_spec("msccl") is not None:
        return False
    if sys.modules.get("msccl") is not None and not getattr(sys.modules["msccl"], "_arborcc_compat", False):
        if not force:
            return False
    for name in _ALIASED:
        sys.modules[name] = importlib.import_module("arborcc.compat." + name)
    return True


def remove_msccl_alias() -> None:
    for name in _ALIASED:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__name__", "").startswith("arborcc.compat."):
            del sys.modules[name]


__all__ = ["install_msccl_alias", "remove_msccl_alias"]
