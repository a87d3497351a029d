"""The GC3 compiler: a traced DSL program -> an IR :class:`~arborcc.ir.model.Algorithm`.

Passes (GC3 sections 4-5), one module each, in the order data flows:

====================  ==========================================================
``layout``            logical chunk indices -> physical offsets (scratch regions,
                      parallelize, instances)
``instructions``      chunk operations -> send / recv / rrc / cpy / re
``dag``               processing edges, dependency depths (instruction DAG)
``fusion``            recv+send -> rcs, rrc+send -> rrcs / rrs
``order``             the global topological order all thread blocks follow
``threadblocks``      thread-block and channel assignment (auto or manual)
``sync``              cross-thread-block dependencies, nop steps
``emit``              IR objects, replicated for instances
====================  ==========================================================

``compile_program(program)`` runs them all (:mod:`arborcc.compiler.pipeline`).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {"compile_program": "arborcc.compiler.pipeline", "CompileStats": "arborcc.compiler.pipeline"}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
