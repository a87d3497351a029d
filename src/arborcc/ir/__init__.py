"""The IR: an algorithm as the MSCCL runtimes model it, and its file forms.

The bottom layer of arborcc: every stage that makes an algorithm produces an
:class:`~arborcc.ir.model.Algorithm`, every stage that consumes one takes it.

* :mod:`.model` - the data types (algorithm, rank, thread block, step);
* :mod:`.collectives` - the collectives' names and facts; :mod:`.aliasing` - where the
  buffers live in an in-place or out-of-place call; :mod:`.reference` - the numpy
  reference executor (the semantics every runtime must match);
* :mod:`.limits` - what each MSCCL runtime (dialect) accepts; :mod:`.report` - the
  vocabulary of what is wrong with an algorithm;
* :mod:`.msccl_xml`, :mod:`.json_io`, :mod:`.load` - reading and writing files;
  :mod:`.convert` - rewriting an algorithm for another MSCCL runtime.
"""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "Algorithm": "arborcc.ir.model",
    "RankProgram": "arborcc.ir.model",
    "ThreadBlock": "arborcc.ir.model",
    "Step": "arborcc.ir.model",
    "Dependency": "arborcc.ir.model",
    "Buffer": "arborcc.ir.model",
    "Op": "arborcc.ir.model",
    "Protocol": "arborcc.ir.model",
    "load_algorithm": "arborcc.ir.load",
    "read_msccl_xml": "arborcc.ir.msccl_xml",
    "write_msccl_xml": "arborcc.ir.msccl_xml",
    "algorithm_to_json": "arborcc.ir.json_io",
    "algorithm_from_json": "arborcc.ir.json_io",
    "check_dialect_limits": "arborcc.ir.limits",
    "Mode": "arborcc.ir.aliasing",
    "layouts": "arborcc.ir.aliasing",
    "rank_layout": "arborcc.ir.aliasing",
    "declared_modes": "arborcc.ir.aliasing",
    "with_modes": "arborcc.ir.aliasing",
    "convert_for_dialect": "arborcc.ir.convert",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
