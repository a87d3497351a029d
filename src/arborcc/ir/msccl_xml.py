"""MSCCL XML: write an :class:`Algorithm` in either dialect, read XML from any tool.

The format is the one GC3's public tools write (msccl-tools,
https://github.com/microsoft/msccl-tools, ``msccl/language/ir.py``: ``ir_to_xml``, whose
attribute names and order are kept) and the MSCCL runtimes load (their
``msccl_parser.cc``, see :mod:`arborcc.ir.limits`)::

    <algo name=".." proto="Simple" nchannels="1" nchunksperloop="4" ngpus="4" coll="allreduce" inplace="1" ...>
      <gpu id="0" i_chunks="4" o_chunks="4" s_chunks="0">
        <tb id="0" send="1" recv="3" chan="0">
          <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>

Dialects (see :mod:`arborcc.ir.limits`): ``executor`` always writes ``outofplace``,
``minBytes`` and ``maxBytes`` (0 = no limit) and spells reduce-scatter
``reducescatter``; ``legacy`` writes msccl-tools' old attribute set, adding
``outofplace``/``minBytes``/``maxBytes`` only when they differ from what the old
runtime assumes when they are absent (out-of-place = not in-place, no size limit),
and spells it ``reduce_scatter``.

Round trips: ``read_msccl_xml(write_msccl_xml(a, d)) == a`` for both dialects, and
XML read from elsewhere writes back the same (``nop`` steps are kept as steps). What
MSCCL XML cannot say is normalized the way MSCCL's tools do it: an absent buffer
(``None``) is written as ``srcbuf="i" srcoff="-1"`` / ``dstbuf="o" dstoff="-1"`` and
an offset of -1 reads back as an absent buffer (offset -1); ``depid="-1"`` means no
dependency whatever ``deps`` says. ``root`` (rooted collectives) is an extra
attribute the runtimes ignore. A declared ``nchannels`` above what the thread blocks
use, and the legacy ``redop`` attribute, are not kept.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from xml.parsers import expat

from arborcc.documents import clipped
from arborcc.errors import IRFormatError
from arborcc.files import read_input_bytes
from arborcc.ir.limits import (
    DIALECTS,
    REQUIRED_GPU_ATTRIBUTES,
    REQUIRED_STEP_ATTRIBUTES,
    REQUIRED_TB_ATTRIBUTES,
    XML_COLLECTIVE_NAMES,
    dialect_limits,
)
from arborcc.ir.model import (
    Algorithm,
    Buffer,
    Dependency,
    Op,
    Protocol,
    RankProgram,
    Step,
    MAX_INDEX,
    ThreadBlock,
    check_written_size,
    field_bounds,
    field_problem,
)
from arborcc.limits import limit

_OPS = {op.value: op for op in Op}
_OPS["res"] = Op.RESIDUAL_ADD  # an older spelling of the legacy fork's residual add
_BUFFERS = {b.value: b for b in Buffer}
_PROTOCOLS = {p.value: p for p in Protocol}
_REDOPS = {"sum", "prod", "max", "min", "nop"}
#: characters outside XML 1.0's Char production (not even a character reference can hold them)
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
#: what an attribute value (in double quotes) must escape; whitespace other than spaces is
#: written as character references so that a reader's attribute normalization keeps it
_ATTR_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;",
                               "\t": "&#9;", "\r": "&#13;"})


# ------------------------------------------------------------------------------ writing
def write_msccl_xml(algo: Algorithm, dialect: str = "executor") -> str:
    """The MSCCL XML text of ``algo`` in ``dialect`` ("executor" or "legacy"); refused
    when it is over the ``algorithm-bytes`` limit (arborcc writes no algorithm file it
    would not read back)."""
    lim = dialect_limits(dialect)
    coll = lim.collective_names.get(algo.collective)
    if coll is None:
        raise IRFormatError(
            f"collective {algo.collective!r} cannot be written in the {dialect} dialect, which knows "
            f"{', '.join(sorted(lim.collective_names))}",
            source=f"algorithm {algo.name!r}", place="<algo>: attribute coll")
    bad = _XML_INVALID.search(algo.name)
    if bad:
        raise IRFormatError(f"the name contains {bad.group()!r}, which XML 1.0 cannot hold",
                            source=f"algorithm {algo.name!r}", place="<algo>: attribute name")
    attrs = [("name", algo.name), ("proto", _value(algo.protocol)), ("nchannels", algo.num_channels),
             ("nchunksperloop", algo.chunks_per_loop), ("ngpus", algo.num_ranks), ("coll", coll),
             ("inplace", int(algo.inplace))]
    if dialect == "executor" or algo.outofplace != (not algo.inplace):
        attrs.append(("outofplace", int(algo.outofplace)))
    if dialect == "executor" or algo.min_bytes:
        attrs.append(("minBytes", algo.min_bytes))
    if dialect == "executor" or algo.max_bytes:
        attrs.append(("maxBytes", algo.max_bytes))
    if algo.root is not None:
        attrs.append(("root", algo.root))
    head = "<algo " + " ".join(f'{k}="{_attr(v)}"' for k, v in attrs)
    if not algo.ranks:
        return head + "/>\n"
    lines = [head + ">"]
    for prog in algo.ranks:
        gpu = (f'  <gpu id="{prog.rank}" i_chunks="{prog.input_chunks}" o_chunks="{prog.output_chunks}" '
               f's_chunks="{prog.scratch_chunks}"')
        if not prog.threadblocks:
            lines.append(gpu + "/>")
            continue
        lines.append(gpu + ">")
        for tb in prog.threadblocks:
            head_tb = f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.channel}"'
            if not tb.steps:
                lines.append(head_tb + "/>")
                continue
            lines.append(head_tb + ">")
            for i, st in enumerate(tb.steps):
                lines.append(_step_line(i, st))
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    text = "\n".join(lines) + "\n"
    check_written_size(text, xml_items(text), algo, "MSCCL XML")
    return text


def xml_items(text: str | bytes) -> int:
    """The elements of XML ``text`` at most (start and empty-element tags; a ``<`` in a
    comment counts too): what the ``algorithm-items`` limit bounds, counted before parsing."""
    if isinstance(text, bytes):
        return text.count(b"<") - text.count(b"</")
    return text.count("<") - text.count("</")


def _value(v) -> str:
    return v.value if hasattr(v, "value") else str(v)


def _attr(v) -> str:
    return str(v).translate(_ATTR_ESCAPES)


def _step_line(i: int, st: Step) -> str:
    if st.src_buf is None:
        sb, so = "i", -1
    else:
        sb, so = st.src_buf.value, st.src_off
    if st.dst_buf is None:
        db, do = "o", -1
    else:
        db, do = st.dst_buf.value, st.dst_off
    if st.dep is None:
        di, ds = -1, -1
    else:
        di, ds = st.dep.tb, st.dep.step
    return (f'      <step s="{i}" type="{st.op.value}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" '
            f'dstoff="{do}" cnt="{st.count}" depid="{di}" deps="{ds}" hasdep="{int(st.has_dep)}"/>')


# ------------------------------------------------------------------------------ reading
def read_msccl_xml(text_or_path: str | bytes | os.PathLike, source: str | None = None,
                   dialect: str | None = None) -> Algorithm:
    """Read MSCCL XML of either dialect (text, or a path to a file).

    Attributes the runtimes require but other tools omit get their defaults unless
    ``dialect`` is given, in which case that dialect's required attributes and
    collective spelling are enforced. Every problem is an :class:`IRFormatError`
    naming the line, the element and the attribute.
    """
    text, source = _read_source(text_or_path, source)
    limit("algorithm-items").check(xml_items(text), source, what="elements", error=IRFormatError)
    if dialect is not None:
        dialect_limits(dialect)
    return _Reader(source, dialect).parse(text)


def _read_source(text_or_path, source: str | None) -> tuple[str | bytes, str]:
    if isinstance(text_or_path, bytes):
        return text_or_path, source or "<xml>"
    if isinstance(text_or_path, str) and (text_or_path.lstrip().startswith("<") or not text_or_path.strip()):
        return text_or_path, source or "<xml>"
    path = Path(text_or_path)
    return read_input_bytes(path, IRFormatError, "algorithm-bytes"), source or str(path)


class _Reader:
    """An expat-driven reader building the IR as elements arrive (line numbers kept)."""

    def __init__(self, source: str, dialect: str | None):
        self.source = source
        self.dialect = dialect
        self.lim = DIALECTS[dialect] if dialect else None
        self.parser = expat.ParserCreate()
        self.parser.StartElementHandler = self._start
        self.parser.EndElementHandler = self._end
        self.parser.CharacterDataHandler = self._text
        self.stack: list[str] = []
        self.algo_attrs: dict[str, object] | None = None
        self.ranks: list[RankProgram] = []
        self.tb: ThreadBlock | None = None
        self.gpu: RankProgram | None = None
        self.max_channel = -1
        self.max_chunks = limit("chunks").value  #: the highest offset or count a step may name
        self.bounds = field_bounds()  # the limits in force, looked up once per file

    # -- errors -----------------------------------------------------------------------
    def _fail(self, what: str, problem: str):
        raise IRFormatError(problem, source=self.source, place=f"{self.parser.CurrentLineNumber}: {what}")

    def _need(self, attrs: dict, required: tuple[str, ...], what: str) -> None:
        if self.lim is None:
            return
        for key in required:
            if key not in attrs:
                self._fail(f"{what}: attribute {key}", f"missing (required by the {self.dialect} dialect)")

    def _int(self, attrs: dict, key: str, what: str, default: int | None = None, kind: str | None = None) -> int:
        """The integer attribute ``key`` (``default`` when absent; missing when that is None);
        with ``kind``, within that kind's range (:data:`arborcc.ir.model.FIELD_RANGES`)."""
        raw = attrs.get(key)
        if raw is None:
            if default is None:
                self._fail(f"{what}: attribute {key}", "missing")
            return default
        try:
            value = int(raw)
        except ValueError:
            self._fail(f"{what}: attribute {key}", f"{clipped(raw)!r} is not an integer")
        if kind is not None:
            low, high = self.bounds[kind]
            if not low <= value <= high:
                self._fail(f"{what}: attribute {key}", field_problem(value, kind))
        return value

    def _flag(self, attrs: dict, key: str, what: str, default: bool) -> bool:
        """A 0/1 attribute (inplace, outofplace)."""
        raw = attrs.get(key)
        if raw is None:
            return default
        if raw not in ("0", "1"):
            self._fail(f"{what}: attribute {key}", f"expected 0 or 1, got {clipped(raw)!r}")
        return raw == "1"

    def _count(self, attrs: dict, key: str, what: str, limit_name: str, default: int | None = None) -> int:
        """A count (chunks, ranks): not negative and within its limit (:mod:`arborcc.limits`),
        checked before anything is sized by it."""
        value = self._int(attrs, key, what, default)
        if value < 0:
            self._fail(f"{what}: attribute {key}", f"{value} is negative")
        if value > limit(limit_name).value:
            self._fail(f"{what}: attribute {key}", limit(limit_name).message(value))
        return value

    # -- parsing ------------------------------------------------------------------------
    def parse(self, text) -> Algorithm:
        try:
            self.parser.Parse(text, True)
        except expat.ExpatError as e:
            raise IRFormatError(f"not well-formed XML: {expat.ErrorString(e.code)} (column {e.offset})",
                                source=self.source, place=e.lineno) from None
        if self.algo_attrs is None:
            raise IRFormatError("no <algo> element", source=self.source)
        return self._finish()

    def _text(self, data: str) -> None:
        if data.strip():
            where = f"<{self.stack[-1]}>" if self.stack else "document"
            self._fail(where, f"unexpected text {data.strip()[:20]!r}")

    def _start(self, name: str, attrs: dict) -> None:
        parent = self.stack[-1] if self.stack else None
        expected_parent = {"algo": None, "gpu": "algo", "tb": "gpu", "step": "tb"}
        if name not in expected_parent:
            where = f"<{parent}>" if parent else "document"
            self._fail(f"<{name}> in {where}",
                       "unsupported element (an MSCCL algorithm has <algo>, <gpu>, <tb> and <step>)")
        if expected_parent[name] != parent:
            inside = f"<{expected_parent[name]}>" if expected_parent[name] else "the top level"
            self._fail(f"<{name}>", f"must be inside {inside}, not {'<' + parent + '>' if parent else 'the top level'}")
        self.stack.append(name)
        if name == "step":
            self._step(attrs)
        elif name == "tb":
            self._threadblock(attrs)
        elif name == "gpu":
            self._gpu(attrs)
        else:
            self._algo(attrs)

    def _end(self, name: str) -> None:
        self.stack.pop()
        if name == "tb":
            self.tb = None
        elif name == "gpu":
            self.gpu = None

    def _algo(self, attrs: dict) -> None:
        what = "<algo>"
        if self.lim is not None:
            self._need(attrs, self.lim.required_algo_attributes, what)
        coll_raw = attrs.get("coll")
        if coll_raw is None:
            self._fail(f"{what}: attribute coll", "missing")
        coll = XML_COLLECTIVE_NAMES.get(coll_raw)
        if coll is None:
            self._fail(f"{what}: attribute coll",
                       f"unknown collective {clipped(coll_raw)!r} (known: {', '.join(sorted(XML_COLLECTIVE_NAMES))})")
        if self.lim is not None and self.lim.collective_names.get(coll) != coll_raw:
            self._fail(f"{what}: attribute coll",
                       f"{clipped(coll_raw)!r} is not a collective of the {self.dialect} dialect "
                       f"({', '.join(sorted(self.lim.collective_names.values()))})")
        proto_raw = attrs.get("proto", "Simple")
        proto = _PROTOCOLS.get(proto_raw)
        if proto is None:
            self._fail(f"{what}: attribute proto", f"unknown protocol {clipped(proto_raw)!r} (Simple, LL or LL128)")
        redop = attrs.get("redop")
        if redop is not None and redop not in _REDOPS:
            self._fail(f"{what}: attribute redop", f"unknown reduction {clipped(redop)!r} ({', '.join(sorted(_REDOPS))})")
        inplace = self._flag(attrs, "inplace", what, False)
        values = {
            "name": attrs.get("name", ""),
            "collective": coll,
            "protocol": proto,
            "chunks_per_loop": self._count(attrs, "nchunksperloop", what, "chunks"),
            "nchannels": self._int(attrs, "nchannels", what, -1, "channels") if "nchannels" in attrs else -1,
            "num_ranks": self._count(attrs, "ngpus", what, "ranks") if "ngpus" in attrs else -1,
            "inplace": inplace,
            "outofplace": self._flag(attrs, "outofplace", what, not inplace),
            "min_bytes": self._int(attrs, "minBytes", what, 0, "bytes"),
            "max_bytes": self._int(attrs, "maxBytes", what, 0, "bytes"),
            "root": self._int(attrs, "root", what, kind="rank") if "root" in attrs else None,
        }
        if values["max_bytes"] and values["min_bytes"] > values["max_bytes"]:
            self._fail(f"{what}: attribute minBytes", f"{values['min_bytes']:,} is above maxBytes "
                                                      f"{values['max_bytes']:,} (0 means no upper limit)")
        self.algo_attrs = values

    def _gpu(self, attrs: dict) -> None:
        what = f"<gpu> #{len(self.ranks)}"
        rank = self._int(attrs, "id", what, kind="rank")
        what = f"<gpu> {rank}"
        self._need(attrs, REQUIRED_GPU_ATTRIBUTES, what)
        sizes = [self._count(attrs, key, what, "chunks", 0) for key in ("i_chunks", "o_chunks", "s_chunks")]
        self.gpu = RankProgram(rank, sizes[0], sizes[1], sizes[2])
        self.ranks.append(self.gpu)

    def _threadblock(self, attrs: dict) -> None:
        gpu = self.gpu
        what = f"<tb> of gpu {gpu.rank} #{len(gpu.threadblocks)}"
        tb_id = self._int(attrs, "id", what, kind="threadblock")
        what = f"<tb> of gpu {gpu.rank} tb {tb_id}"
        self._need(attrs, REQUIRED_TB_ATTRIBUTES, what)
        tb = ThreadBlock(tb_id, self._int(attrs, "send", what, -1, "peer"), self._int(attrs, "recv", what, -1, "peer"),
                         self._int(attrs, "chan", what, 0, "channel"))
        if tb.channel > self.max_channel:
            self.max_channel = tb.channel
        gpu.threadblocks.append(tb)
        self.tb = tb

    def _step(self, attrs: dict) -> None:
        tb = self.tb
        i = len(tb.steps)
        try:  # the fast path; any irregularity is diagnosed by the slow one below
            if self.lim is not None or len(attrs) != 10:
                raise LookupError
            srcoff = int(attrs["srcoff"])
            dstoff = int(attrs["dstoff"])
            srcbuf = _BUFFERS[attrs["srcbuf"]]
            dstbuf = _BUFFERS[attrs["dstbuf"]]
            cnt = int(attrs["cnt"])
            depid = int(attrs["depid"])
            deps = int(attrs["deps"])
            hasdep = attrs["hasdep"]
            top, most = self.max_chunks, MAX_INDEX
            if (int(attrs["s"]) != i or hasdep not in ("0", "1") or not -1 <= srcoff <= top
                    or not -1 <= dstoff <= top or not 0 <= cnt <= top or not -1 <= depid <= most
                    or not (0 if depid >= 0 else -1) <= deps <= most):
                raise LookupError
            step = Step(_OPS[attrs["type"]],
                        None if srcoff == -1 else srcbuf, srcoff,
                        None if dstoff == -1 else dstbuf, dstoff,
                        cnt,
                        None if depid < 0 else Dependency(depid, deps),
                        hasdep == "1")
        except (LookupError, ValueError):
            step = self._step_slow(attrs, i)
        tb.steps.append(step)

    def _step_slow(self, attrs: dict, i: int) -> Step:
        what = f"<step> of gpu {self.gpu.rank} tb {self.tb.id} step {i}"
        self._need(attrs, REQUIRED_STEP_ATTRIBUTES, what)
        s = self._int(attrs, "s", what, i)
        if s != i:
            self._fail(f"{what}: attribute s", f"step index {s} where {i} was expected (steps are listed in order)")
        type_raw = attrs.get("type")
        if type_raw is None:
            self._fail(f"{what}: attribute type", "missing")
        op = _OPS.get(type_raw)
        if op is None:
            self._fail(f"{what}: attribute type",
                       f"unknown step type {clipped(type_raw)!r} (known: {', '.join(sorted(_OPS))})")
        bufs = []
        for bkey, okey in (("srcbuf", "srcoff"), ("dstbuf", "dstoff")):
            off = self._int(attrs, okey, what, -1, "offset")
            raw = attrs.get(bkey)
            buf = None
            if raw is not None:
                buf = _BUFFERS.get(raw)
                if buf is None:
                    self._fail(f"{what}: attribute {bkey}", f"expected one of i, o, s, got {clipped(raw)!r}")
            if off == -1:
                buf = None
            elif buf is None:
                self._fail(f"{what}: attribute {bkey}", f"missing, but {okey}={off} names a chunk")
            bufs.append((buf, off))
        cnt = self._int(attrs, "cnt", what, 1, "count")
        depid = self._int(attrs, "depid", what, -1, "dependency")
        deps = self._int(attrs, "deps", what, -1, "dependency step")
        if depid >= 0 and deps < 0:
            self._fail(f"{what}: attribute deps", f"{deps} but depid={depid} names a thread block")
        hasdep_raw = attrs.get("hasdep", "0")
        if hasdep_raw not in ("0", "1"):
            self._fail(f"{what}: attribute hasdep", f"{clipped(hasdep_raw)!r}; the runtimes accept only 0 or 1")
        return Step(op, bufs[0][0], bufs[0][1], bufs[1][0], bufs[1][1], cnt,
                    Dependency(depid, deps) if depid >= 0 else None, hasdep_raw == "1")

    def _finish(self) -> Algorithm:
        a = self.algo_attrs
        total = sum(p.input_chunks + p.output_chunks + p.scratch_chunks for p in self.ranks)
        limit("buffer-chunks").check(total, self.source, "<gpu> elements", "i_chunks + o_chunks + s_chunks",
                                     IRFormatError)
        num_ranks = a["num_ranks"] if a["num_ranks"] >= 0 else len(self.ranks)
        if a["nchannels"] >= 0 and self.max_channel >= a["nchannels"]:
            raise IRFormatError(
                f"declares {a['nchannels']} channel(s) but a thread block uses channel {self.max_channel}",
                source=self.source, place="<algo>: attribute nchannels")
        return Algorithm(
            name=a["name"], collective=a["collective"], num_ranks=num_ranks,
            chunks_per_loop=a["chunks_per_loop"], ranks=self.ranks, protocol=a["protocol"],
            inplace=a["inplace"], outofplace=a["outofplace"], min_bytes=a["min_bytes"],
            max_bytes=a["max_bytes"], root=a["root"])
