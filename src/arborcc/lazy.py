"""Package attributes imported on first use (PEP 562, "Module __getattr__ and __dir__").

A package ``__init__`` names its entry points and the modules that define them::

    EXPORTS = {"verify_algorithm": "arborcc.verify.checker", ...}
    __getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
    __all__ = list(EXPORTS)

``from arborcc.verify import verify_algorithm`` then imports ``arborcc.verify.checker``
only at that moment, so importing a package (or one light module of it) costs nothing
beyond what that module needs - ``arborcc --help`` stays fast however heavy the stages
behind the commands are. An exported name must not be the name of a submodule (the
import system would overwrite one with the other); the import-graph test checks that.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``exports`` (name -> module)."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
