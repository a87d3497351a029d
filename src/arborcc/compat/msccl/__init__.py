"""The public GC3 tools' package surface (``msccl``), implemented on arborcc.

``arborcc.compat.msccl.language`` (the DSL), ``arborcc.compat.msccl.topologies``
(topology constructors). See ``docs/dsl.md``, "Compatibility".
"""

_arborcc_compat = True
