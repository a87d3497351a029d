"""``msccl.collectives``: in the public GC3 tools, the collectives of their synthesizer (a
separate tool from the DSL). arborcc does not provide them; the module exists so that
DSL programs that import it without using it (``examples/mscclang/simple/allreduce_ring.py``)
run unchanged. The DSL's collectives are in :mod:`arborcc.compat.msccl.language.collectives`.
"""

_arborcc_compat = True

__all__: list[str] = []
