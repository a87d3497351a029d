"""What MSCCL++ requires of an execution plan, as data the reader checks and tests cite.

Derived from microsoft/mscclpp at commit 1f5f065d7b13ab02df32c22568f38785d1eeec01
(2026-08-20):

* ``src/core/executor/execution_plan.cc`` - the parser: the fields it reads with
  ``obj["..."]`` (required: a missing one is undefined behaviour in nlohmann::json) and
  with ``obj.value(..., default)`` / ``contains`` (optional), the operation names of
  ``getOpType``, buffer types ``i o s`` (``convertToBufferType``) and channel types
  ``memory port switch none`` (``convertToChannelType``);
* ``src/core/include/execution_common.hpp`` - the device plan's limits: 64 operations
  per thread block (``MAX_OPERATION``, a pipeline's inner operations included), 16
  channels of a type per thread block (``MAX_CHANNEL``), 8 per operation
  (``MAX_CHANNEL_PER_OPERATION``), 2 local buffers per operation, 16 barriers and 16
  semaphores, and the 64 MB scratch buffer (``PREDFINED_SCRATCH_SIZE``);
* ``src/core/include/execution_kernel.hpp`` - what each operation reads and writes (the
  buffer lists below: ``L`` a local buffer ``{type, index, size}``, ``R`` a peer's
  buffer through a channel ``{buffer_id, index, size}``, ``S`` a switch channel
  ``{switch_channel_id, index, size}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the commit the rules were read at
MSCCLPP_COMMIT = "1f5f065d7b13ab02df32c22568f38785d1eeec01"

PROTOCOLS = ("Simple", "LL")
BUFFER_TYPES = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch", "none")

MAX_OPERATIONS_PER_THREADBLOCK = 64
MAX_CHANNELS_PER_THREADBLOCK = 16
MAX_CHANNELS_PER_OPERATION = 8
MAX_LOCAL_BUFFERS_PER_OPERATION = 2
MAX_BARRIERS = 16
MAX_SEMAPHORES = 16
SCRATCH_BYTES = 1 << 26  #: 64 MB, PREDFINED_SCRATCH_SIZE
DEFAULT_BUFFER_ALIGNMENT = 16
DEFAULT_THREADS_PER_BLOCK = 1024
MAX_MESSAGE_SIZE = 2**64 - 1  #: the parser's default max_message_size (uint64 max)

#: top-level fields: name -> required (execution_plan.cc: ``obj["name"]`` vs ``obj.value``)
PLAN_FIELDS = {
    "name": True, "collective": True, "protocol": True, "inplace": True, "gpus": True,
    "reuse_resources": False, "use_double_scratch_buffer": False, "buffer_alignment": False,
    "num_threads_per_block": False, "min_message_size": False, "max_message_size": False,
}
GPU_FIELDS = {"id": True, "input_chunks": True, "output_chunks": True, "scratch_chunks": True, "channels": True,
              "remote_buffers": True, "threadblocks": True, "semaphores": False}
THREADBLOCK_FIELDS = {"id": True, "ops": True, "channels": True, "remote_buffer_refs": False}


@dataclass(frozen=True)
class OperationRule:
    """What one operation needs: a channel list, and its source and destination buffer
    lists as a pattern of ``L``/``R``/``S`` (see the module doc); None: no such list."""

    meaning: str
    channels: bool = False  #: needs channel_ids (sync operations; data operations name peers by buffer_id)
    src: str | None = None
    dst: str | None = None
    fields: tuple[str, ...] = ()


OPERATIONS: dict[str, OperationRule] = {
    "nop": OperationRule("__syncthreads() of the thread block"),
    "barrier": OperationRule("all num_threadblocks thread blocks of the rank meet", fields=("barrier_id",
                                                                                          "num_threadblocks")),
    "signal": OperationRule("signal the peer of each channel", channels=True),
    "wait": OperationRule("wait for one signal on each channel", channels=True),
    "rlxsignal": OperationRule("signal, relaxed ordering", channels=True),
    "rlxwait": OperationRule("wait, relaxed ordering", channels=True),
    "flush": OperationRule("flush a port channel's puts", channels=True),
    "put": OperationRule("peer dst[k] := src", src="L+", dst="R+"),
    "pws": OperationRule("put, then signal (port channels)", src="L+", dst="R+"),
    "pwsf": OperationRule("put, signal and flush (port channels)", src="L+", dst="R+"),
    "get": OperationRule("dst[k] := peer src[k]", src="R+", dst="L+"),
    "copy": OperationRule("dst := src", src="L", dst="L"),
    "re": OperationRule("dst := src[0] + src[1] + ...", src="LL+", dst="L"),
    "res": OperationRule("dst[0] := src[0] + src[1] + ...; peer dst[k] := the same", src="LL*",
                         dst="LR+"),
    "rre": OperationRule("dst := src[0] + peer src[k]...", src="LR+", dst="L"),
    "rres": OperationRule("dst[0] := src[0] + peer src[k]...; peer dst[k] := the same", src="LR+",
                          dst="LR+"),
    "ppkt": OperationRule("peer scratch dst[k] := packets of src", src="L+", dst="R+"),
    "rppkt": OperationRule("peer scratch dst[k] := packets read from local scratch src", src="L",
                           dst="R+"),
    "cpkt": OperationRule("local scratch dst := packets of src", src="L", dst="L"),
    "upkt": OperationRule("dst := data of the packets in local scratch src", src="L", dst="L"),
    "repkt": OperationRule("dst := src[0] + packets src[1]...", src="LL+", dst="L"),
    "respkt": OperationRule("dst[0] := src[0] + packets src[1]...; peer dst[k] := its packets",
                            src="LL+", dst="LR+"),
    "recpkt": OperationRule("dst[0] := src[0] + packets src[1]...; local scratch dst[1] := its packets",
                            src="LL+", dst="LL"),
    "recspkt": OperationRule("recpkt, and peer dst[k] := its packets", src="LL+", dst="LLR+"),
    "glres": OperationRule("NVLS multimem load-reduce-store through a switch channel", src="S", dst="S"),
    "gstore": OperationRule("NVLS multimem store through a switch channel", src="L", dst="S"),
    "gstorepkt": OperationRule("NVLS multimem store of packets through a switch channel", src="L", dst="S"),
    "pipeline": OperationRule("repeat the inner ops over units of iter_context.unit_size bytes",
                              fields=("iter_context", "ops")),
    "sem_acquire": OperationRule("acquire the rank's semaphores", fields=("semaphore_ids",)),
    "sem_release": OperationRule("release the rank's semaphores", fields=("semaphore_ids",)),
}

#: operations that read packets (LL protocol) from the local scratch buffer: which src entries
PACKET_READS = {"rppkt": 0, "upkt": 0, "repkt": 1, "respkt": 1, "recpkt": 1, "recspkt": 1}
#: operations that write packets: which dst entries are packets (from that index on)
PACKET_WRITES = {"ppkt": 0, "rppkt": 0, "cpkt": 0, "respkt": 1, "recpkt": 1, "recspkt": 1}


def buffer_pattern_problem(pattern: str, kinds: str) -> str | None:
    """Why the buffer list of kinds ``kinds`` (``"LR"``...) does not fit ``pattern``, or None."""
    if re.fullmatch(pattern, kinds):
        return None
    names = {"L": "a local buffer {type, index, size}", "R": "a peer's buffer {buffer_id, index, size}",
             "S": "a switch channel {switch_channel_id, index, size}"}
    parts = []
    for m in re.finditer(r"([LRS])([+*]?)", pattern):
        what = names[m.group(1)]
        parts.append(what if not m.group(2) else f"{'one or more' if m.group(2) == '+' else 'any number of'} "
                                                 f"of {what}")
    return "expected " + ", then ".join(parts)
