"""Executing algorithms: the numpy reference executor (:mod:`.reference`), whose results
every runtime must match."""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "run": "arborcc.runtime.reference",
    "make_inputs": "arborcc.runtime.reference",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
