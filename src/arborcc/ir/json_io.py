"""The JSON form of an :class:`Algorithm`: the IR's fields one to one, lossless.

::

    {"format": "arborcc-algorithm", "version": 1,
     "name": "ring", "collective": "allreduce", "num_ranks": 4, "chunks_per_loop": 4,
     "protocol": "Simple", "inplace": false, "outofplace": true,
     "min_bytes": 0, "max_bytes": 0, "root": null,
     "ranks": [{"rank": 0, "input_chunks": 4, "output_chunks": 4, "scratch_chunks": 0,
                "threadblocks": [{"id": 0, "send": 1, "recv": 3, "channel": 0, "steps": [
                    {"op": "s", "src_buf": "i", "src_off": 0, "dst_buf": "o", "dst_off": 0,
                     "count": 1, "dep": null, "has_dep": false}]}]}]}

``dep`` is ``null`` or ``[tb, step]``; buffers are ``"i"``, ``"o"``, ``"s"`` or ``null``;
``op`` is the MSCCL step type. Reading checks every field's type and range and names
the file and the JSON path of the first bad one in one line (``a.json:
ranks[3].threadblocks[2].steps[5].src_buf: expected one of "i", "o", "s" or null, got
an array``). Unknown keys are errors (they are usually misspellings), and so are keys
given twice. The ranges are those of the MSCCL XML reader
(:data:`arborcc.ir.model.FIELD_RANGES`): ranks and peers within the ranks limit,
offsets and counts within the chunks limit, ids and channels 32-bit,
``min_bytes``/``max_bytes`` from 0 to 2^63 - 1 with ``min_bytes <= max_bytes`` unless
``max_bytes`` is 0 (no limit); the counts that size buffers and ranks
(``chunks_per_loop``, ``num_ranks``, ``*_chunks``) are checked against
:mod:`arborcc.limits` before anything is allocated for them. Within its range a value
may still be wrong for its algorithm (a peer that is not one of its ranks, an offset
past its buffer): that is the verifier's job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from arborcc.documents import clipped, load_json
from arborcc.errors import IRFormatError
from arborcc.files import read_input_bytes
from arborcc.ir.collectives import COLLECTIVES
from arborcc.ir.model import (
    Algorithm,
    Buffer,
    Dependency,
    Op,
    Protocol,
    RankProgram,
    Step,
    ThreadBlock,
    check_written_size,
    field_bounds,
    field_problem,
)
from arborcc.limits import limit

FORMAT = "arborcc-algorithm"
VERSION = 1
_OPS = {op.value: op for op in Op}
_BUFFERS = {b.value: b for b in Buffer}
_PROTOCOLS = {p.value: p for p in Protocol}
#: a step's keys (:meth:`_Validator.step`), and a buffer field's JSON values (null: none)
_STEP_KEYS = frozenset(("op", "src_buf", "src_off", "dst_buf", "dst_off", "count", "dep", "has_dep"))
_BUFFER_OR_NONE = {None: None, **_BUFFERS}
_ABSENT = object()


# ------------------------------------------------------------------------------ writing
def algorithm_to_dict(algo: Algorithm) -> dict[str, Any]:
    """The JSON-ready dict of ``algo``."""
    return {**algorithm_to_dict_head(algo), "ranks": [_rank_dict(p) for p in algo.ranks]}


def algorithm_to_dict_head(algo: Algorithm) -> dict[str, Any]:
    """The JSON-ready fields of ``algo`` other than its ranks."""
    return {
        "format": FORMAT, "version": VERSION,
        "name": algo.name, "collective": algo.collective, "num_ranks": algo.num_ranks,
        "chunks_per_loop": algo.chunks_per_loop, "protocol": algo.protocol.value,
        "inplace": algo.inplace, "outofplace": algo.outofplace,
        "min_bytes": algo.min_bytes, "max_bytes": algo.max_bytes, "root": algo.root,
    }


def _rank_dict(p: RankProgram) -> dict[str, Any]:
    return {"rank": p.rank, "input_chunks": p.input_chunks, "output_chunks": p.output_chunks,
            "scratch_chunks": p.scratch_chunks,
            "threadblocks": [{"id": tb.id, "send": tb.send, "recv": tb.recv, "channel": tb.channel,
                              "steps": [_step_dict(s) for s in tb.steps]} for tb in p.threadblocks]}


def _step_dict(s: Step) -> dict[str, Any]:
    return {"op": s.op.value, "src_buf": s.src_buf.value if s.src_buf is not None else None,
            "src_off": s.src_off, "dst_buf": s.dst_buf.value if s.dst_buf is not None else None,
            "dst_off": s.dst_off, "count": s.count,
            "dep": [s.dep.tb, s.dep.step] if s.dep is not None else None, "has_dep": s.has_dep}


def algorithm_to_json(algo: Algorithm) -> str:
    """JSON text of ``algo``: indented, one step per line without spaces (diffable, still
    compact: a 1024-rank ring all-reduce's 2.1 million steps are 241 MB). Refused (an
    :class:`~arborcc.errors.InputError`) when the text is over the ``algorithm-bytes``
    limit: arborcc writes no algorithm file it would not read back."""
    d = algorithm_to_dict_head(algo)
    dump = json.dumps
    head = ",\n".join(f"  {dump(k)}: {dump(v)}" for k, v in d.items())
    rank_parts = []
    for p in algo.ranks:
        tb_parts = []
        for tb in p.threadblocks:
            inner = ",\n".join(["        " + step_json(s) for s in tb.steps])
            tb_head = dump({"id": tb.id, "send": tb.send, "recv": tb.recv, "channel": tb.channel})[:-1]
            tb_parts.append(f"      {tb_head}, \"steps\": [" + (f"\n{inner}\n      ]}}" if tb.steps else "]}"))
        r_head = dump({"rank": p.rank, "input_chunks": p.input_chunks, "output_chunks": p.output_chunks,
                       "scratch_chunks": p.scratch_chunks})[:-1]
        body = ",\n".join(tb_parts)
        rank_parts.append(f"    {r_head}, \"threadblocks\": [" + (f"\n{body}\n    ]}}" if tb_parts else "]}"))
    ranks_text = ",\n".join(rank_parts)
    text = "{\n" + head + ',\n  "ranks": [' + (f"\n{ranks_text}\n  ]" if rank_parts else "]") + "\n}\n"
    check_written_size(text, json_items(text), algo, "JSON")
    return text


#: the JSON text of each step field's enum value (null for no buffer)
_OP_TEXT = {op: json.dumps(op.value) for op in Op}
_BUFFER_TEXT = {None: "null", **{b: json.dumps(b.value) for b in Buffer}}


def step_json(s: Step) -> str:
    """``json.dumps(_step_dict(s), separators=(",", ":"))``, formatted directly: the writer
    formats millions of steps (a 1024-rank ring all-reduce has 2.1 million)."""
    dep = f"[{int(s.dep.tb)},{int(s.dep.step)}]" if s.dep is not None else "null"
    return (f'{{"op":{_OP_TEXT[s.op]},"src_buf":{_BUFFER_TEXT[s.src_buf]},"src_off":{int(s.src_off)},'
            f'"dst_buf":{_BUFFER_TEXT[s.dst_buf]},"dst_off":{int(s.dst_off)},"count":{int(s.count)},'
            f'"dep":{dep},"has_dep":{"true" if s.has_dep else "false"}}}')


def json_items(text: str | bytes) -> int:
    """The objects and arrays of JSON ``text`` at most (a brace or bracket inside a string
    counts too): what the ``algorithm-items`` limit bounds, counted before parsing."""
    if isinstance(text, bytes):
        return text.count(b"{") + text.count(b"[")
    return text.count("{") + text.count("[")


# ------------------------------------------------------------------------------ reading
def algorithm_from_json(data: str | bytes | os.PathLike | dict, source: str | None = None) -> Algorithm:
    """An :class:`Algorithm` from JSON text, a parsed dict, or a path to a ``.json`` file."""
    if isinstance(data, dict):
        return algorithm_from_dict(data, source or "<json>")
    if isinstance(data, (str, bytes)) and data.lstrip()[:1] in ("{", "[", b"{", b"["):
        text, source = data, source or "<json>"
    else:
        path = Path(data)
        source = source or str(path)
        text = read_input_bytes(path, IRFormatError, "algorithm-bytes")
    limit("algorithm-items").check(json_items(text), source, what="objects and arrays", error=IRFormatError)
    obj, _ = load_json(text, source, IRFormatError, exact=False)  # within the nesting limit; no duplicate keys
    return algorithm_from_dict(obj, source)


def algorithm_from_dict(obj: Any, source: str = "<json>") -> Algorithm:
    """Validate a parsed JSON object and build the :class:`Algorithm`."""
    v = _Validator(source)
    top = v.obj(obj, "", {
        "format": False, "version": False, "name": True, "collective": True, "num_ranks": True,
        "chunks_per_loop": True, "protocol": False, "inplace": False, "outofplace": False,
        "min_bytes": False, "max_bytes": False, "root": False, "ranks": True})
    if "format" in top and v.string(top["format"], "format") != FORMAT:
        v.fail("format", f"{_quoted(top['format'])} is not {FORMAT!r}")
    if "version" in top and v.integer(top["version"], "version") != VERSION:
        v.fail("version", f"{clipped(str(top['version']))}; this arborcc reads version {VERSION}")
    collective = v.string(top["collective"], "collective")
    if collective not in COLLECTIVES:
        v.fail("collective", f"unknown collective {_quoted(collective)} (known: {', '.join(COLLECTIVES)})")
    protocol_raw = v.string(top.get("protocol", "Simple"), "protocol")
    if protocol_raw not in _PROTOCOLS:
        v.fail("protocol", f"unknown protocol {_quoted(protocol_raw)} (Simple, LL or LL128)")
    root = top.get("root")
    min_bytes = v.integer(top.get("min_bytes", 0), "min_bytes", "bytes")
    max_bytes = v.integer(top.get("max_bytes", 0), "max_bytes", "bytes")
    if max_bytes and min_bytes > max_bytes:
        v.fail("min_bytes", f"{min_bytes:,} is above max_bytes {max_bytes:,} (0 means no upper limit)")
    ranks_raw = v.array(top["ranks"], "ranks")
    ranks = [v.rank(r, f"ranks[{i}]") for i, r in enumerate(ranks_raw)]
    limit("buffer-chunks").check(sum(p.input_chunks + p.output_chunks + p.scratch_chunks for p in ranks), source,
                                 "ranks", "input + output + scratch chunks", IRFormatError)
    return Algorithm(
        name=v.string(top["name"], "name"),
        collective=collective,
        num_ranks=v.count(top["num_ranks"], "num_ranks", "ranks"),
        chunks_per_loop=v.count(top["chunks_per_loop"], "chunks_per_loop", "chunks"),
        ranks=ranks,
        protocol=_PROTOCOLS[protocol_raw],
        inplace=v.boolean(top.get("inplace", False), "inplace"),
        outofplace=v.boolean(top.get("outofplace", True), "outofplace"),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        root=None if root is None else v.integer(root, "root", "rank"),
    )


class _Validator:
    def __init__(self, source: str):
        self.source = source
        self.bounds = field_bounds()  # the limits in force, looked up once per file
        # the ranges well_formed_step checks, unpacked once: (offset, count) and (threadblock, step)
        self.step_bounds = (*self.bounds["offset"], *self.bounds["count"])
        self.dep_bounds = (*self.bounds["threadblock"], *self.bounds["step"])

    def fail(self, path: str, problem: str):
        raise IRFormatError(problem, source=self.source, place=path or "top level")

    def obj(self, value: Any, path: str, keys: dict[str, bool]) -> dict:
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, got {_kind(value)}")
        for k in value:
            if k not in keys:
                self.fail(f"{path}.{k}" if path else k, f"unknown key (expected: {', '.join(keys)})")
        for k, required in keys.items():
            if required and k not in value:
                self.fail(f"{path}.{k}" if path else k, "missing")
        return value

    def array(self, value: Any, path: str) -> list:
        if not isinstance(value, list):
            self.fail(path, f"expected an array, got {_kind(value)}")
        return value

    def integer(self, value: Any, path: str, kind: str | None = None) -> int:
        """An integer; with ``kind``, within that kind's range (:data:`arborcc.ir.model.FIELD_RANGES`)."""
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(path, f"expected an integer, got {_kind(value)}")
        if kind is not None:
            low, high = self.bounds[kind]
            if not low <= value <= high:
                self.fail(path, field_problem(value, kind))
        return value

    def buffer(self, value: Any, path: str) -> Buffer | None:
        if value is None:
            return None
        if not isinstance(value, str) or value not in _BUFFERS:
            self.fail(path, f"expected one of {', '.join(map(json.dumps, _BUFFERS))} or null, got {_kind(value)}")
        return _BUFFERS[value]

    def count(self, value: Any, path: str, limit_name: str) -> int:
        """A count (chunks, ranks): not negative and within its limit (:mod:`arborcc.limits`),
        checked before anything is sized by it."""
        value = self.integer(value, path)
        if value < 0:
            self.fail(path, f"{value} is negative")
        if value > limit(limit_name).value:
            self.fail(path, limit(limit_name).message(value))
        return value

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_kind(value)}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {_kind(value)}")
        return value

    def rank(self, raw: Any, path: str) -> RankProgram:
        d = self.obj(raw, path, {"rank": True, "input_chunks": True, "output_chunks": True,
                                 "scratch_chunks": False, "threadblocks": False})
        tbs_raw = self.array(d.get("threadblocks", []), f"{path}.threadblocks")
        return RankProgram(
            rank=self.integer(d["rank"], f"{path}.rank", "rank"),
            input_chunks=self.count(d["input_chunks"], f"{path}.input_chunks", "chunks"),
            output_chunks=self.count(d["output_chunks"], f"{path}.output_chunks", "chunks"),
            scratch_chunks=self.count(d.get("scratch_chunks", 0), f"{path}.scratch_chunks", "chunks"),
            threadblocks=[self.threadblock(t, f"{path}.threadblocks[{i}]") for i, t in enumerate(tbs_raw)],
        )

    def threadblock(self, raw: Any, path: str) -> ThreadBlock:
        d = self.obj(raw, path, {"id": True, "send": False, "recv": False, "channel": False, "steps": False})
        steps_raw = self.array(d.get("steps", []), f"{path}.steps")
        well_formed_step = self.well_formed_step
        return ThreadBlock(
            id=self.integer(d["id"], f"{path}.id", "threadblock"),
            send=self.integer(d.get("send", -1), f"{path}.send", "peer"),
            recv=self.integer(d.get("recv", -1), f"{path}.recv", "peer"),
            channel=self.integer(d.get("channel", 0), f"{path}.channel", "channel"),
            steps=[well_formed_step(s) or self.step(s, f"{path}.steps[{i}]") for i, s in enumerate(steps_raw)],
        )

    def well_formed_step(self, raw: Any) -> Step | None:
        """The step of ``raw`` when every field is present or defaulted, of its exact JSON
        type and within its range - what a file arborcc wrote holds, millions of times -
        else None, and :meth:`step` reads it field by field and names the first bad one.
        The same Step :meth:`step` builds, without the per-field checks' calls."""
        if type(raw) is not dict or not raw.keys() <= _STEP_KEYS:
            return None
        get = raw.get
        op = get("op")
        op = _OPS.get(op) if type(op) is str else None
        src_buf, dst_buf = get("src_buf"), get("dst_buf")  # absent or null: no buffer
        if op is None or not (src_buf is None or type(src_buf) is str) or \
                not (dst_buf is None or type(dst_buf) is str):
            return None
        src_buf_value, dst_buf_value = _BUFFER_OR_NONE.get(src_buf, _ABSENT), _BUFFER_OR_NONE.get(dst_buf, _ABSENT)
        src_off, dst_off, count, has_dep = get("src_off", -1), get("dst_off", -1), get("count", 1), get("has_dep", False)
        offset_low, offset_high, count_low, count_high = self.step_bounds
        if src_buf_value is _ABSENT or dst_buf_value is _ABSENT or type(src_off) is not int or \
                type(dst_off) is not int or type(count) is not int or type(has_dep) is not bool or \
                not offset_low <= src_off <= offset_high or not offset_low <= dst_off <= offset_high or \
                not count_low <= count <= count_high:
            return None
        dep_raw = get("dep")
        dep = None
        if dep_raw is not None:
            if type(dep_raw) is not list or len(dep_raw) != 2:
                return None
            tb, step = dep_raw
            tb_low, tb_high, step_low, step_high = self.dep_bounds
            if type(tb) is not int or type(step) is not int or not tb_low <= tb <= tb_high or \
                    not step_low <= step <= step_high:
                return None
            dep = Dependency(tb, step)
        return Step(op, src_buf_value, src_off, dst_buf_value, dst_off, count, dep, has_dep)

    def step(self, raw: Any, path: str) -> Step:
        d = self.obj(raw, path, {"op": True, "src_buf": False, "src_off": False, "dst_buf": False,
                                 "dst_off": False, "count": False, "dep": False, "has_dep": False})
        op_raw = self.string(d["op"], f"{path}.op")
        op = _OPS.get(op_raw)
        if op is None:
            self.fail(f"{path}.op", f"unknown step type {_quoted(op_raw)} (known: {', '.join(_OPS)})")
        dep_raw = d.get("dep")
        dep = None
        if dep_raw is not None:
            if not (isinstance(dep_raw, list) and len(dep_raw) == 2):
                self.fail(f"{path}.dep", f"expected null or [tb, step], got {_kind(dep_raw)}")
            dep = Dependency(self.integer(dep_raw[0], f"{path}.dep[0]", "threadblock"),
                             self.integer(dep_raw[1], f"{path}.dep[1]", "step"))
        return Step(
            op=op,
            src_buf=self.buffer(d.get("src_buf"), f"{path}.src_buf"),
            src_off=self.integer(d.get("src_off", -1), f"{path}.src_off", "offset"),
            dst_buf=self.buffer(d.get("dst_buf"), f"{path}.dst_buf"),
            dst_off=self.integer(d.get("dst_off", -1), f"{path}.dst_off", "offset"),
            count=self.integer(d.get("count", 1), f"{path}.count", "count"),
            dep=dep,
            has_dep=self.boolean(d.get("has_dep", False), f"{path}.has_dep"),
        )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return f"the number {clipped(str(value))}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_quoted(value)}"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _quoted(text: str) -> str:
    """``text`` quoted for a message, its ends only when it is long."""
    return repr(clipped(text))
