"""The synthesis strategies, one module each, named after the strategy (``nccl-ring`` in
``nccl_ring.py``): each module's ``synth_<name>`` turns a
:class:`~arborcc.synth.result.SynthesisRequest` into a
:class:`~arborcc.synth.result.SynthesisResult` holding a compiled (not yet verified)
algorithm.

The registry (:mod:`arborcc.synth.registry`) imports each function by name, says which
collectives it builds and describes it; :func:`arborcc.synth.synthesis.synthesize`
checks the request once (collective, ranks, routes), computes the bound once, runs one
strategy or - with ``auto`` - every one that applies, and verifies the algorithm it
returns. So a strategy starts from a valid request and only builds. Importing a
strategy module is light (the registry, and with it ``arborcc --help``, imports them
all): each function imports what it builds with.
"""
