"""An MSCCL++ execution plan: its model, and the reader that checks every rule.

The reader (:func:`read_mscclpp_plan`) reads through :func:`arborcc.files.read_input_bytes`
and :func:`arborcc.documents.load_json` (size, nesting and non-finite numbers are checked
there), then checks what MSCCL++'s parser and executor require (:mod:`.rules`): every
required field present with the right type, operation, buffer and channel names known,
each operation's buffer lists of the right kinds, every index into a list (a thread
block's channel ids, a remote buffer id, a peer rank, a chunk range within its buffer) in
range, and the device plan's limits. The first problem found is one
:class:`~arborcc.errors.IRFormatError` line naming the file and the field
(``plan.json: gpus[1].threadblocks[0].ops[3].dst_buff[0].buffer_id: ...``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arborcc.documents import clipped, load_json
from arborcc.errors import IRFormatError
from arborcc.files import read_input_bytes
from arborcc.ir.mscclpp import rules
from arborcc.limits import limit


@dataclass(frozen=True)
class BufferRef:
    """One entry of an operation's ``src_buff``/``dst_buff``: ``kind`` ``L`` (local buffer
    ``type``), ``R`` (the thread block's remote buffer ``ref``) or ``S`` (switch channel ``ref``)."""

    kind: str
    type: str | None
    ref: int
    index: int
    size: int


@dataclass
class Operation:
    name: str
    channel_type: str | None = None
    channel_ids: tuple[int, ...] = ()
    src: tuple[BufferRef, ...] = ()
    dst: tuple[BufferRef, ...] = ()
    barrier_id: int | None = None
    num_threadblocks: int | None = None
    semaphore_ids: tuple[int, ...] = ()
    tbg: tuple[int, int] | None = None  #: (tb_id, tbg_size) of a thread-block group
    iter_context: tuple[int, int] | None = None  #: (unit_size, num_chunks) of a pipeline
    ops: list[Operation] = field(default_factory=list)  #: a pipeline's inner operations


@dataclass
class ChannelDecl:
    """One entry of a GPU's ``channels``: a channel to each of ``peers`` (memory/port), or
    a switch channel over ``groups`` ((size, ranks) per rank group) on ``buffer_type``."""

    type: str
    peers: tuple[int, ...] = ()
    buffer_type: str | None = None
    groups: tuple[tuple[int, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class RemoteBuffer:
    rank: int  #: the rank that owns the buffer
    type: str
    access: tuple[str, ...]


@dataclass
class PlanThreadBlock:
    id: int
    channels: dict[str, list[int]]  #: channel type -> the rank's channel index of each local id
    buffer_refs: dict[str, list[int]]  #: access channel type -> the GPU's remote buffer index of each local id
    ops: list[Operation]


@dataclass
class PlanGpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    channels: list[ChannelDecl]
    remote_buffers: list[RemoteBuffer]
    semaphores: list[int]
    threadblocks: list[PlanThreadBlock]

    def channel_peers(self, channel_type: str) -> list[int]:
        """The peer of each channel of ``channel_type``, by the rank's channel index (the
        executor flattens the ``connected_to`` lists of the entries in order)."""
        return [p for c in self.channels if c.type == channel_type for p in c.peers]

    def switch_channels(self) -> list[tuple[str, tuple[int, ...]]]:
        """(buffer type, member ranks) of each switch channel, by the rank's switch channel
        index: the executor numbers one per rank group, in the order of the entries."""
        return [(c.buffer_type, ranks) for c in self.channels if c.type == "switch" for _size, ranks in c.groups]

    def chunks(self, buffer_type: str) -> int:
        return {"i": self.input_chunks, "o": self.output_chunks, "s": self.scratch_chunks}[buffer_type]


@dataclass
class ExecutionPlan:
    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: list[PlanGpu]
    reuse_resources: bool = False
    use_double_scratch_buffer: bool = False
    buffer_alignment: int = rules.DEFAULT_BUFFER_ALIGNMENT
    num_threads_per_block: int = rules.DEFAULT_THREADS_PER_BLOCK
    min_message_size: int = 0
    max_message_size: int = rules.MAX_MESSAGE_SIZE

    @property
    def num_ranks(self) -> int:
        return len(self.gpus)


def is_mscclpp_plan(doc: Any) -> bool:
    """Whether a parsed JSON document is meant as an MSCCL++ plan (it has ``gpus``)."""
    return isinstance(doc, dict) and "gpus" in doc and "format" not in doc


def read_mscclpp_plan(path: str | os.PathLike, source: str | None = None) -> ExecutionPlan:
    """Read and check the plan file ``path``."""
    source = source or str(path)
    text = read_input_bytes(Path(path), IRFormatError, "algorithm-bytes")
    items = text.count(b"{") + text.count(b"[")  # bounds the document before it is parsed
    limit("algorithm-items").check(items, source, what="objects and arrays", error=IRFormatError)
    doc, _ = load_json(text, source, IRFormatError, exact=False)
    return plan_from_document(doc, source)


def plan_from_document(doc: Any, source: str = "<plan>") -> ExecutionPlan:
    """Check a parsed plan document against :mod:`.rules` and build the model."""
    return _Reader(source).plan(doc)


class _Reader:
    def __init__(self, source: str):
        self.source = source
        self.most_chunks = limit("chunks").value  # the limit in force, read once per plan

    # --- primitives -------------------------------------------------------------------
    def fail(self, where: str, problem: str):
        raise IRFormatError(problem, source=self.source, place=where or None)

    def obj(self, value: Any, where: str, fields: dict[str, bool]) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected an object, got {_kind(value)}")
        for name, required in fields.items():
            if required and name not in value:
                self.fail(where, f"missing required field {name!r} (MSCCL++'s parser reads it)")
        return value

    def integer(self, value: Any, where: str, low: int = 0, high: int = 2**32 - 1, what: str = "") -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected an integer, got {_kind(value)}")
        if not low <= value <= high:
            self.fail(where, f"expected {what or 'an integer'} from {low:,} to {high:,}, got {_number(value)}")
        return value

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            self.fail(where, f"expected true or false, got {_kind(value)}")
        return value

    def string(self, value: Any, where: str, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(value, str):
            self.fail(where, f"expected a string, got {_kind(value)}")
        if choices is not None and value not in choices:
            self.fail(where, f"expected one of {', '.join(choices)}, got {clipped(value)!r}")
        return value

    def array(self, value: Any, where: str, most: int | None = None, least: int = 0) -> list:
        if not isinstance(value, list):
            self.fail(where, f"expected an array, got {_kind(value)}")
        if len(value) < least:
            self.fail(where, f"expected at least {least} entr{'y' if least == 1 else 'ies'}, got {len(value)}")
        if most is not None and len(value) > most:
            self.fail(where, f"{len(value):,} entries; MSCCL++ allows at most {most}")
        return value

    # --- the document -----------------------------------------------------------------
    def plan(self, doc: Any) -> ExecutionPlan:
        top = self.obj(doc, "", rules.PLAN_FIELDS)
        name = self.string(top["name"], "name")
        collective = self.string(top["collective"], "collective")
        protocol = self.string(top["protocol"], "protocol", rules.PROTOCOLS)
        inplace = self.boolean(top["inplace"], "inplace")
        flags = {k: self.boolean(top[k], k) for k in ("reuse_resources", "use_double_scratch_buffer") if k in top}
        alignment = self.integer(top.get("buffer_alignment", rules.DEFAULT_BUFFER_ALIGNMENT), "buffer_alignment",
                                 1, 2**20, "an alignment in bytes")
        threads = self.integer(top.get("num_threads_per_block", rules.DEFAULT_THREADS_PER_BLOCK),
                               "num_threads_per_block", 1, 1024, "a number of threads")
        low = self.integer(top.get("min_message_size", 0), "min_message_size", 0, rules.MAX_MESSAGE_SIZE, "a size")
        high = self.integer(top.get("max_message_size", rules.MAX_MESSAGE_SIZE), "max_message_size", 0,
                            rules.MAX_MESSAGE_SIZE, "a size")
        if high < low:
            self.fail("max_message_size", f"{high:,} is below min_message_size {low:,}")
        gpus_raw = self.array(top["gpus"], "gpus", least=1)
        limit("ranks").check(len(gpus_raw), self.source, what="GPUs", error=IRFormatError)
        n = len(gpus_raw)
        heads = [self._gpu_head(g, f"gpus[{r}]", r, n) for r, g in enumerate(gpus_raw)]
        gpus = [self._gpu_body(raw, f"gpus[{r}]", head, heads, n) for r, (raw, head) in
                enumerate(zip(gpus_raw, heads))]
        return ExecutionPlan(name, collective, protocol, inplace, gpus, flags.get("reuse_resources", False),
                             flags.get("use_double_scratch_buffer", False), alignment, threads, low, high)

    def _gpu_head(self, raw: Any, where: str, rank: int, n: int) -> PlanGpu:
        g = self.obj(raw, where, rules.GPU_FIELDS)
        if self.integer(g["id"], f"{where}.id", 0, n - 1, "a rank") != rank:
            self.fail(f"{where}.id", f"is {g['id']}, but MSCCL++ reads gpus[{rank}] as rank {rank}")
        chunks = [self.integer(g[k], f"{where}.{k}", 0, self.most_chunks, "a chunk count")
                  for k in ("input_chunks", "output_chunks", "scratch_chunks")]
        if not chunks[0] and not chunks[1]:
            self.fail(where, "input_chunks and output_chunks are both 0 (MSCCL++: 'Output or Input chunks must "
                             "be greater than 0')")
        channels = []
        for c, ch in enumerate(self.array(g["channels"], f"{where}.channels")):
            at = f"{where}.channels[{c}]"
            self.obj(ch, at, {"channel_type": True})
            ctype = self.string(ch["channel_type"], f"{at}.channel_type", rules.CHANNEL_TYPES)
            if ctype == "switch":
                # "buff": the key before mscclpp#692 (test/execution-files/allreduce_pipeline.json still has it)
                key = "buffer_type" if "buffer_type" in ch or "buff" not in ch else "buff"
                self.obj(ch, at, {key: True, "rank_groups": True})
                btype = self.string(ch[key], f"{at}.{key}", rules.BUFFER_TYPES)
                groups = []
                for k, grp in enumerate(self.array(ch["rank_groups"], f"{at}.rank_groups", least=1)):
                    gat = f"{at}.rank_groups[{k}]"
                    self.obj(grp, gat, {"size": True, "ranks": True})
                    size = self.integer(grp["size"], f"{gat}.size", 0, self.most_chunks, "a chunk count")
                    ranks = tuple(self.integer(x, f"{gat}.ranks[{j}]", 0, n - 1, "a rank")
                                  for j, x in enumerate(self.array(grp["ranks"], f"{gat}.ranks", least=1)))
                    groups.append((size, ranks))
                channels.append(ChannelDecl(ctype, buffer_type=btype, groups=tuple(groups)))
            else:
                self.obj(ch, at, {"connected_to": True})
                peers = []
                for j, p in enumerate(self.array(ch["connected_to"], f"{at}.connected_to")):
                    peers.append(self.integer(p, f"{at}.connected_to[{j}]", 0, n - 1, "a rank"))
                    if p == rank:
                        self.fail(f"{at}.connected_to[{j}]", f"rank {rank} cannot have a channel to itself")
                channels.append(ChannelDecl(ctype, peers=tuple(peers)))
        remote = []
        for b, rb in enumerate(self.array(g["remote_buffers"], f"{where}.remote_buffers")):
            at = f"{where}.remote_buffers[{b}]"
            self.obj(rb, at, {"rank": True, "type": True, "access_channel_types": True})
            owner = self.integer(rb["rank"], f"{at}.rank", 0, n - 1, "a rank")
            btype = self.string(rb["type"], f"{at}.type", rules.BUFFER_TYPES)
            access = tuple(self.string(x, f"{at}.access_channel_types[{j}]", rules.CHANNEL_TYPES)
                           for j, x in enumerate(self.array(rb["access_channel_types"],
                                                            f"{at}.access_channel_types")))
            remote.append(RemoteBuffer(owner, btype, access))
        sems = []
        for s, sem in enumerate(self.array(g.get("semaphores", []), f"{where}.semaphores")):
            self.obj(sem, f"{where}.semaphores[{s}]", {"init_value": True})
            sems.append(self.integer(sem["init_value"], f"{where}.semaphores[{s}].init_value", 0, 2**31 - 1,
                                     "an initial value"))
        return PlanGpu(rank, chunks[0], chunks[1], chunks[2], channels, remote, sems, [])

    def _gpu_body(self, raw: dict, where: str, gpu: PlanGpu, heads: list[PlanGpu], n: int) -> PlanGpu:
        tbs_raw = self.array(raw["threadblocks"], f"{where}.threadblocks")
        seen: set[int] = set()
        for t, tb in enumerate(tbs_raw):
            at = f"{where}.threadblocks[{t}]"
            self.obj(tb, at, rules.THREADBLOCK_FIELDS)
            tid = self.integer(tb["id"], f"{at}.id", 0, len(tbs_raw) - 1, "a thread block id (0 to the count - 1)")
            if tid in seen:
                self.fail(f"{at}.id", f"thread block id {tid} given twice")
            seen.add(tid)
            gpu.threadblocks.append(self._threadblock(tb, at, tid, gpu, heads))
        gpu.threadblocks.sort(key=lambda tb: tb.id)
        return gpu

    def _threadblock(self, tb: dict, where: str, tid: int, gpu: PlanGpu, heads: list[PlanGpu]) -> PlanThreadBlock:
        channels: dict[str, list[int]] = {}
        for c, ch in enumerate(self.array(tb["channels"], f"{where}.channels")):
            at = f"{where}.channels[{c}]"
            self.obj(ch, at, {"channel_type": True, "channel_ids": True})
            ctype = self.string(ch["channel_type"], f"{at}.channel_type", rules.CHANNEL_TYPES)
            if "buff" in ch:
                self.string(ch["buff"], f"{at}.buff", rules.BUFFER_TYPES)
            count = (sum(len(c.groups) for c in gpu.channels if c.type == "switch") if ctype == "switch"
                     else len(gpu.channel_peers(ctype)))
            ids = channels.setdefault(ctype, [])
            for j, x in enumerate(self.array(ch["channel_ids"], f"{at}.channel_ids")):
                if count == 0:
                    self.fail(f"{at}.channel_ids[{j}]", f"rank {gpu.id} declares no {ctype} channel")
                ids.append(self.integer(x, f"{at}.channel_ids[{j}]", 0, count - 1,
                                        f"one of rank {gpu.id}'s {ctype} channels"))
            if len(ids) > rules.MAX_CHANNELS_PER_THREADBLOCK:
                self.fail(f"{at}.channel_ids", f"{len(ids)} {ctype} channels in one thread block; MSCCL++ allows "
                                               f"at most {rules.MAX_CHANNELS_PER_THREADBLOCK} (MAX_CHANNEL)")
        refs: dict[str, list[int]] = {}
        for k, ref in enumerate(self.array(tb.get("remote_buffer_refs", []), f"{where}.remote_buffer_refs")):
            at = f"{where}.remote_buffer_refs[{k}]"
            self.obj(ref, at, {"access_channel_type": True, "remote_buffer_ids": True})
            ctype = self.string(ref["access_channel_type"], f"{at}.access_channel_type", rules.CHANNEL_TYPES)
            ids = refs.setdefault(ctype, [])
            for j, x in enumerate(self.array(ref["remote_buffer_ids"], f"{at}.remote_buffer_ids")):
                if not gpu.remote_buffers:
                    self.fail(f"{at}.remote_buffer_ids[{j}]", f"rank {gpu.id} declares no remote_buffers")
                b = self.integer(x, f"{at}.remote_buffer_ids[{j}]", 0, len(gpu.remote_buffers) - 1,
                                 f"an index into gpus[{gpu.id}].remote_buffers")
                if ctype not in gpu.remote_buffers[b].access:
                    self.fail(f"{at}.remote_buffer_ids[{j}]", f"remote buffer {b} is not accessed through {ctype} "
                                                              f"channels (its access_channel_types)")
                ids.append(b)
        block = PlanThreadBlock(tid, channels, refs, [])
        ops_raw = self.array(tb["ops"], f"{where}.ops")
        total = 0
        for o, op in enumerate(ops_raw):
            parsed = self._operation(op, f"{where}.ops[{o}]", block, gpu, heads, inner=False)
            block.ops.append(parsed)
            total += 1 + len(parsed.ops)
        if total > rules.MAX_OPERATIONS_PER_THREADBLOCK:
            self.fail(f"{where}.ops", f"{total} operations (pipelines' inner ones included); MSCCL++'s device plan "
                                      f"holds at most {rules.MAX_OPERATIONS_PER_THREADBLOCK} (MAX_OPERATION)")
        return block

    def _operation(self, raw: Any, where: str, tb: PlanThreadBlock, gpu: PlanGpu, heads: list[PlanGpu],
                   inner: bool) -> Operation:
        op = self.obj(raw, where, {"name": True})
        name = self.string(op["name"], f"{where}.name")
        rule = rules.OPERATIONS.get(name)
        if rule is None:
            self.fail(f"{where}.name", f"unknown operation {clipped(name)!r} (MSCCL++ knows "
                                       f"{', '.join(rules.OPERATIONS)})")
        self.obj(op, where, {f: True for f in rule.fields})
        if rule.channels or rule.src and "R" in rule.src or rule.dst and "R" in rule.dst:
            self.obj(op, where, {"channel_type": True})
        out = Operation(name)
        if "channel_type" in op:
            out.channel_type = self.string(op["channel_type"], f"{where}.channel_type", rules.CHANNEL_TYPES)
        if rule.channels:
            self.obj(op, where, {"channel_ids": True})
        if "channel_ids" in op:
            ids = self.array(op["channel_ids"], f"{where}.channel_ids", rules.MAX_CHANNELS_PER_OPERATION)
            have = len(tb.channels.get(out.channel_type or "", []))
            for j, x in enumerate(ids):
                if have == 0:
                    self.fail(f"{where}.channel_ids[{j}]", f"thread block {tb.id} lists no {out.channel_type} "
                                                           f"channels")
                self.integer(x, f"{where}.channel_ids[{j}]", 0, have - 1, f"one of thread block {tb.id}'s "
                                                                        f"{out.channel_type} channels")
            out.channel_ids = tuple(ids)
        if "tbg_info" in op:
            t = self.obj(op["tbg_info"], f"{where}.tbg_info", {"tb_id": True, "tbg_size": True})
            size = self.integer(t["tbg_size"], f"{where}.tbg_info.tbg_size", 1, 2**16, "a group size")
            out.tbg = (self.integer(t["tb_id"], f"{where}.tbg_info.tb_id", 0, size - 1, "a member of the group"),
                       size)
        for key, pattern in (("src_buff", rule.src), ("dst_buff", rule.dst)):
            if pattern is None:
                continue
            self.obj(op, where, {key: True})
            refs = [self._buffer(b, f"{where}.{key}[{j}]", out.channel_type, tb, gpu, heads)
                    for j, b in enumerate(self.array(op[key], f"{where}.{key}", least=1))]
            kinds = "".join(r.kind for r in refs)
            problem = rules.buffer_pattern_problem(pattern, kinds)
            if problem:
                self.fail(f"{where}.{key}", f"{name}: {problem}")
            most = rules.MAX_LOCAL_BUFFERS_PER_OPERATION + rules.MAX_CHANNELS_PER_OPERATION
            if len(refs) > most:
                self.fail(f"{where}.{key}", f"{len(refs)} buffers; MSCCL++ holds at most {most} per operation")
            setattr(out, "src" if key == "src_buff" else "dst", tuple(refs))
        if "barrier_id" in op:
            out.barrier_id = self.integer(op["barrier_id"], f"{where}.barrier_id", 0, rules.MAX_BARRIERS - 1,
                                          "a barrier id")
        if "num_threadblocks" in op:
            out.num_threadblocks = self.integer(op["num_threadblocks"], f"{where}.num_threadblocks", 1, 2**16,
                                                "a number of thread blocks")
        if "semaphore_ids" in op:
            ids = self.array(op["semaphore_ids"], f"{where}.semaphore_ids", rules.MAX_SEMAPHORES, least=1)
            for j, x in enumerate(ids):
                if not gpu.semaphores:
                    self.fail(f"{where}.semaphore_ids[{j}]", f"rank {gpu.id} declares no semaphores")
                self.integer(x, f"{where}.semaphore_ids[{j}]", 0, len(gpu.semaphores) - 1,
                             f"an index into gpus[{gpu.id}].semaphores")
            out.semaphore_ids = tuple(ids)
        if name == "pipeline":
            if inner:
                self.fail(where, "a pipeline inside a pipeline (MSCCL++ runs inner operations only once deep)")
            ctx = self.obj(op["iter_context"], f"{where}.iter_context", {"unit_size": True, "num_chunks": True})
            out.iter_context = (self.integer(ctx["unit_size"], f"{where}.iter_context.unit_size", 1, 2**32 - 1,
                                             "a unit size in bytes"),
                                self.integer(ctx["num_chunks"], f"{where}.iter_context.num_chunks", 1,
                                             self.most_chunks, "a chunk count"))
            out.ops = [self._operation(x, f"{where}.ops[{j}]", tb, gpu, heads, inner=True)
                       for j, x in enumerate(self.array(op["ops"], f"{where}.ops", least=1))]
        return out

    def _buffer(self, raw: Any, where: str, channel_type: str | None, tb: PlanThreadBlock, gpu: PlanGpu,
                heads: list[PlanGpu]) -> BufferRef:
        b = self.obj(raw, where, {"index": True, "size": True})
        index = self.integer(b["index"], f"{where}.index", 0, self.most_chunks, "a chunk index")
        size = self.integer(b["size"], f"{where}.size", 0, self.most_chunks, "a chunk count")
        if "switch_channel_id" in b:
            have = len(tb.channels.get("switch", []))
            if have == 0:
                self.fail(f"{where}.switch_channel_id", f"thread block {tb.id} lists no switch channels")
            ref = self.integer(b["switch_channel_id"], f"{where}.switch_channel_id", 0, have - 1,
                               f"one of thread block {tb.id}'s switch channels")
            return BufferRef("S", None, ref, index, size)
        if "buffer_id" in b:
            refs = tb.buffer_refs.get(channel_type or "", [])
            if not refs:
                self.fail(f"{where}.buffer_id", f"thread block {tb.id} has no remote_buffer_refs for "
                                                f"{channel_type} channels")
            ref = self.integer(b["buffer_id"], f"{where}.buffer_id", 0, len(refs) - 1,
                               f"an index into thread block {tb.id}'s {channel_type} remote buffers")
            remote = gpu.remote_buffers[refs[ref]]
            self._range(f"{where}", index, size, heads[remote.rank].chunks(remote.type),
                        f"rank {remote.rank}'s {remote.type} buffer")
            return BufferRef("R", remote.type, ref, index, size)
        if "type" not in b:
            self.fail(where, "names no buffer: expected type, buffer_id or switch_channel_id")
        btype = self.string(b["type"], f"{where}.type", rules.BUFFER_TYPES)
        self._range(where, index, size, gpu.chunks(btype), f"rank {gpu.id}'s {btype} buffer")
        return BufferRef("L", btype, -1, index, size)

    def _range(self, where: str, index: int, size: int, chunks: int, what: str) -> None:
        if index + size > chunks:
            self.fail(where, f"chunks {index}..{index + size - 1} lie outside {what} ({chunks} chunks)")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {clipped(str(value))}"
    if isinstance(value, str):
        return f"the string {clipped(value)!r}"
    return {dict: "an object", list: "an array"}.get(type(value), type(value).__name__)


def _number(value: int) -> str:
    digits = len(str(abs(value)))
    return f"{value:,}" if digits <= 30 else f"a {digits}-digit number"
