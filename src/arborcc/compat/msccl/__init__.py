"""The public GC3 tools' package surface (``msccl``), implemented on arborcc.

``arborcc.compat.msccl.language`` (the DSL), ``arborcc.compat.msccl.topologies``
(topology constructors). See ``docs/dsl.md``, "Compatibility".

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

_arborcc_compat = True
