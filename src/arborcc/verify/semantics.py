"""What each step type does, as the MSCCL runtimes execute it.

From the GC3 paper (section 4.2, instruction list) and the MSCCL parsers
(``msccl_parser.cc``: which step types send, receive, and check their source or
destination bounds). ``recv`` below is the data popped from the thread block's
receive connection; ``src``/``dst`` are local chunk ranges.

=======  =====================================  =====  ====  ==========  =========
type     effect                                  send   recv  reads       writes
=======  =====================================  =====  ====  ==========  =========
``s``    push src                                yes    -     src         -
``r``    dst := recv                             -      yes   -           dst
``re``   dst := dst + src                        -      -     src, dst    dst
``cpy``  dst := src                              -      -     src         dst
``rrc``  dst := src + recv                       -      yes   src         dst
``rrs``  push src + recv                         yes    yes   src         -
``rcs``  dst := recv; push recv                  yes    yes   -           dst
``rrcs`` dst := src + recv; push dst             yes    yes   src         dst
``nop``  nothing (carries a dependency)          -      -     -           -
``ra``   dst := dst + src (residual add; legacy)  -      -     src, dst    dst
=======  =====================================  =====  ====  ==========  =========

For ``s`` the destination fields and for ``r`` the source fields name the remote
chunk; the runtime does not use them and neither does the verifier. A write made by a
receiving step carries received data, so it cannot start before the matching send
has started (used by the race check, :mod:`arborcc.verify.races`).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from typing import NamedTuple

from arborcc.ir.model import Op


class OpInfo(NamedTuple):
    sends: bool
    receives: bool
    reads_src: bool
    reads_dst: bool
    writes_dst: bool


OPS: dict[Op, OpInfo] = {
    Op.SEND: OpInfo(True, False, True, False, False),
    Op.RECV: OpInfo(False, True, False, False, True),
    Op.REDUCE: OpInfo(False, False, True, True, True),
    Op.COPY: OpInfo(False, False, True, False, True),
    Op.RECV_REDUCE_COPY: OpInfo(False, True, True, False, True),
    Op.RECV_REDUCE_SEND: OpInfo(True, True, True, False, False),
    Op.RECV_COPY_SEND: OpInfo(True, True, False, False, True),
    Op.RECV_REDUCE_COPY_SEND: OpInfo(True, True, True, False, True),
    Op.NOP: OpInfo(False, False, False, False, False),
    Op.RESIDUAL_ADD: OpInfo(False, False, True, True, True),
}
