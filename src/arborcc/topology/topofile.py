"""arborcc's own topology file: YAML or JSON with one schema, lossless.

The schema is documented in ``docs/topology-format.md``. In short::

    arborcc_topology: 1          # format version
    name: dgx1v
    ranks: [gpu0, gpu1, ...]     # optional: only when not every GPU by (host, index)
    devices:
    - {id: gpu0, kind: gpu, host: 0, index: 0, numa: 0, pci: '0000:06:00.0'}
    links:
    - {src: gpu0, dst: gpu1, kind: nvlink, count: 1, bandwidth_gbps: 25.0, latency_us: 0.7, duplex: true}
    meta: {...}                  # optional, free-form provenance

Units in the file are GB/s (10^9 bytes/s) and microseconds; inside arborcc B/s and s.
``duplex: true`` stands for both directions. Numbers are converted through their
decimal text, and written so that reading gives back the same floats, so
file -> model -> file reproduces the file and model -> file -> model the model.

Errors name the file, the line (YAML, and JSON when the text is also valid YAML) and
the path inside the document: ``topo.yaml:12: link gpu3->gpu9: gpu9 is not defined``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, Mapping

import yaml

from arborcc.documents import DocPath, Locate, clipped, load_json, load_yaml, path_text
from arborcc.errors import TopologyError
from arborcc.files import read_input_text, write_output
from arborcc.limits import limit
from arborcc.topology import defaults
from arborcc.topology.model import Device, DeviceKind, Link, LinkKind, Topology, TopologyBuilder

FORMAT_VERSION = 1
SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json"}

TOP_KEYS = ("arborcc_topology", "name", "ranks", "devices", "links", "meta")
DEVICE_KEYS = ("id", "kind", "host", "index", "numa", "pci")
LINK_KEYS = ("src", "dst", "kind", "count", "bandwidth_gbps", "latency_us", "duplex")

_GB_EXP, _US_EXP = 9, -6  # file unit = 10**exp internal units
#: what a link can be, in file units: from 1 kB/s to 1 PB/s, at most a second of latency
MIN_GBPS, MAX_GBPS, MAX_LATENCY_US = Decimal("1e-6"), Decimal("1e6"), Decimal("1e6")

# --------------------------------------------------------------------------------------
# exact decimal <-> float conversion
# --------------------------------------------------------------------------------------
def _to_internal(text_value: Decimal | int | float, exp: int) -> float:
    """File units -> internal: the float nearest to ``value x 10**exp``, computed exactly."""
    if isinstance(text_value, float):
        text_value = Decimal(repr(text_value))
    return float(Decimal(text_value).scaleb(exp))


def _to_file(value: float, exp: int) -> Decimal:
    """Internal -> file units: a short decimal that :func:`_to_internal` maps back to ``value``."""
    short = Decimal(repr(value / 10.0 ** exp if exp > 0 else value * 10.0 ** -exp))
    if _to_internal(short, exp) == value:
        return short
    return Decimal(repr(value)).scaleb(-exp)  # exact shift of value's shortest repr


def _decimal_text(d: Decimal) -> str:
    text = format(d, "f")
    return text if "." in text else text + ".0"


# --------------------------------------------------------------------------------------
# model -> document
# --------------------------------------------------------------------------------------
def _default_ranks(topology: Topology) -> tuple[str, ...]:
    b = TopologyBuilder(topology.name)
    for d in topology.devices.values():
        b.add_device(d)
    return b.build().ranks


def _document(topology: Topology) -> dict[str, Any]:
    """The file document of a topology, numbers as :class:`Decimal` (exact)."""
    doc: dict[str, Any] = {"arborcc_topology": FORMAT_VERSION, "name": topology.name}
    if topology.ranks != _default_ranks(topology):
        doc["ranks"] = list(topology.ranks)
    devices = []
    for d in topology.devices.values():
        entry: dict[str, Any] = {"id": d.id, "kind": d.kind.value, "host": d.host}
        for key in ("index", "numa", "pci"):
            if getattr(d, key) is not None:
                entry[key] = getattr(d, key)
        devices.append(entry)
    doc["devices"] = devices
    links = []
    done: set[tuple[str, str]] = set()
    for (src, dst), l in topology.links.items():
        if (src, dst) in done:
            continue
        back = topology.links.get((dst, src))
        duplex = back is not None and (back.kind, back.bandwidth, back.latency, back.count) == \
            (l.kind, l.bandwidth, l.latency, l.count)
        if duplex:
            done.add((dst, src))
        links.append({"src": src, "dst": dst, "kind": l.kind.value, "count": l.count,
                      "bandwidth_gbps": _to_file(l.bandwidth, _GB_EXP),
                      "latency_us": _to_file(l.latency, _US_EXP), "duplex": duplex})
    doc["links"] = links
    if topology.meta:
        doc["meta"] = _plain_meta(topology.meta, ("meta",))
    return doc


def _plain_meta(value: Any, path: DocPath) -> Any:
    """Check that meta holds only what YAML and JSON both write back identically."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TopologyError(f"{path_text(path)}: keys must be strings, got {k!r}")
            out[k] = _plain_meta(v, path + (k,))
        return out
    if isinstance(value, (list, tuple)):
        return [_plain_meta(v, path + (i,)) for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise TopologyError(f"{path_text(path)}: cannot write the non-finite number {value!r}")
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise TopologyError(f"{path_text(path)}: cannot write a value of type {type(value).__name__}")


def topology_to_dict(topology: Topology) -> dict[str, Any]:
    """The file schema as plain Python data (GB/s and us as floats)."""
    def plain(v: Any) -> Any:
        if isinstance(v, Decimal):
            return float(v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v
    return plain(_document(topology))


# --------------------------------------------------------------------------------------
# document text
# --------------------------------------------------------------------------------------
class _Dumper(yaml.SafeDumper):
    pass


def _represent_decimal(dumper: yaml.SafeDumper, value: Decimal) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:float", _decimal_text(value))


_Dumper.add_representer(Decimal, _represent_decimal)

def _strings(value: Any):
    """Every string of a JSON-like value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, x in value.items():
            yield from _strings(k)
            yield from _strings(x)
    elif isinstance(value, list):
        for x in value:
            yield from _strings(x)


def _json_value(value: Any, indent: int | None = None) -> str:
    """JSON text of ``value`` with its Decimals written as exact numbers: each goes out as
    a marked string and the marks are then removed from the text. The mark is one that no
    string of ``value`` contains (a name may hold any character), so no user string is
    ever taken for a number."""
    texts = list(_strings(value))
    k = 0
    while any(f"\x00num{k}:" in t for t in texts):
        k += 1
    mark = f"\x00num{k}:"

    def raw(v: Any) -> Any:
        if isinstance(v, Decimal):
            return mark + _decimal_text(v)
        if isinstance(v, dict):
            return {key: raw(x) for key, x in v.items()}
        if isinstance(v, list):
            return [raw(x) for x in v]
        return v
    text = json.dumps(raw(value), ensure_ascii=False, indent=indent,
                      separators=(",", ": ") if indent else (", ", ": "))
    return re.sub(r'"\\u0000num%d:([^"]*)"' % k, r"\1", text)


def dump_topology(topology: Topology, fmt: str = "yaml") -> str:
    """The text of a topology file, ``fmt`` ``"yaml"`` or ``"json"``."""
    doc = _document(topology)
    if fmt == "yaml":
        text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=None,
                         allow_unicode=True, width=1 << 20)
        if any(c in text for c in "\x85\u2028\u2029"):
            # PyYAML writes the Unicode line breaks NEL, LS, PS raw and reads them back as
            # spaces: escape everything non-ASCII instead
            text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=None,
                             allow_unicode=False, width=1 << 20)
        return text
    if fmt == "json":
        parts = []
        for key, value in doc.items():
            if key in ("devices", "links") and value:
                items = ",\n".join("    " + _json_value(v) for v in value)
                parts.append(f'  {json.dumps(key)}: [\n{items}\n  ]')
            elif key == "meta":
                parts.append(f"  {json.dumps(key)}: " + _json_value(value, indent=2).replace("\n", "\n  "))
            else:
                parts.append(f"  {json.dumps(key)}: {_json_value(value)}")
        return "{\n" + ",\n".join(parts) + "\n}\n"
    raise TopologyError(f"unknown topology file format {fmt!r}: use 'yaml' or 'json'")


def _format_of(path: Path) -> str:
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise TopologyError(f"unknown topology file type {path.suffix or '(none)'!r}: use .yaml, .yml or .json",
                            source=str(path))
    return fmt


def write_topology_file(topology: Topology, path: str | os.PathLike) -> None:
    """Write ``topology`` to ``path`` (YAML or JSON by suffix); nothing is written on failure."""
    path = Path(path)
    fmt = _format_of(path)
    try:
        text = dump_topology(topology, fmt)
    except TopologyError as e:
        raise TopologyError(e.problem, source=str(path), place=e.place) from None
    write_output(path, text, TopologyError)


# --------------------------------------------------------------------------------------
# document -> model
# --------------------------------------------------------------------------------------
class _Reader:
    """Validates a document and feeds a TopologyBuilder, pointing errors at their line."""

    def __init__(self, source: str | None, locate: Locate):
        self.source = source
        self.locate = locate

    def fail(self, path: DocPath, problem: str, name_path: bool = True) -> TopologyError:
        """An error at ``path``: placed at its line when known (naming the path too, unless
        ``name_path`` is false because the problem names its subject), else at the path."""
        line, where = self._line(path), path_text(path)
        if line is None:
            return TopologyError(problem, source=self.source, place=where or None)
        return TopologyError(f"{where}: {problem}" if where and name_path else problem, source=self.source, place=line)

    def _line(self, path: DocPath) -> int | None:
        for cut in range(len(path), -1, -1):
            line = self.locate(path[:cut])
            if line is not None:
                return line
        return None

    def keys(self, value: Any, path: DocPath, allowed: tuple[str, ...], required: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {_kind(value)}")
        for k in value:
            if k not in allowed:
                close = difflib.get_close_matches(k, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.fail(path + (k,), f"unknown key {clipped(k)!r}{hint}")
        for k in required:
            if k not in value:
                raise self.fail(path, f"missing key {k!r}")
        return value

    def string(self, value: Any, path: DocPath, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def integer(self, value: Any, path: DocPath, minimum: int, optional: bool = False) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if value < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {value}")
        return value

    def number(self, value: Any, path: DocPath, low: Decimal, high: Decimal, unit: str) -> Decimal:
        """A number from ``low`` (0: at least 0; else above 0 and at least ``low``) to ``high``."""
        if isinstance(value, bool) or not isinstance(value, (int, Decimal, float)):
            raise self.fail(path, f"expected a number, got {_kind(value)}")
        d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        if not d.is_finite() or (d < 0 if low == 0 else d <= 0):
            raise self.fail(path, f"must be {'a non-negative' if low == 0 else 'a positive'} number, got {value}")
        if not low <= d <= high:
            raise self.fail(path, f"{value} {unit} is outside what a link can have ({low:g} to {high:g} {unit})")
        return d

    def builder_call(self, path: DocPath, call, *args, **kwargs):
        """Call a :class:`TopologyBuilder` method; its error is placed at ``path``'s line."""
        try:
            return call(*args, **kwargs)
        except TopologyError as e:
            raise self.fail(path, e.problem, name_path=False) from None

    def enum(self, value: Any, path: DocPath, kind: type) -> Any:
        names = [k.value for k in kind]
        if value not in names:
            raise self.fail(path, f"unknown kind {clipped(repr(value))}: expected one of {', '.join(names)}")
        return kind(value)

    def build(self, doc: Any, default_name: str) -> Topology:
        doc = self.keys(doc, (), TOP_KEYS, ("arborcc_topology", "devices"))
        version = doc["arborcc_topology"]
        if isinstance(version, bool) or version != FORMAT_VERSION:
            raise self.fail(("arborcc_topology",), f"unsupported format version {clipped(repr(version))} (this arborcc reads {FORMAT_VERSION})")
        name = self.string(doc.get("name", default_name), ("name",))
        meta = doc.get("meta", {})
        if not isinstance(meta, dict):
            raise self.fail(("meta",), f"expected a mapping, got {_kind(meta)}")
        b = TopologyBuilder(name, source=self.source, meta=_meta_floats(meta))

        devices = doc["devices"]
        if not isinstance(devices, list):
            raise self.fail(("devices",), f"expected a list, got {_kind(devices)}")
        for i, entry in enumerate(devices):
            p = ("devices", i)
            entry = self.keys(entry, p, DEVICE_KEYS, ("id", "kind"))
            device = Device(
                id=self.string(entry["id"], p + ("id",)),
                kind=self.enum(entry["kind"], p + ("kind",), DeviceKind),
                host=self.integer(entry.get("host", 0), p + ("host",), 0, optional=True),
                index=self.integer(entry.get("index"), p + ("index",), 0, optional=True),
                numa=self.integer(entry.get("numa"), p + ("numa",), 0, optional=True),
                pci=self.string(entry.get("pci"), p + ("pci",), optional=True),
            )
            if b.has_device(device.id):
                raise self.fail(p + ("id",), f"duplicate device id {device.id}")
            self.builder_call(p, b.add_device, device)

        links = doc.get("links", [])
        if not isinstance(links, list):
            raise self.fail(("links",), f"expected a list, got {_kind(links)}")
        for i, entry in enumerate(links):
            p = ("links", i)
            entry = self.keys(entry, p, LINK_KEYS, ("src", "dst", "kind", "bandwidth_gbps"))
            src = self.string(entry["src"], p + ("src",))
            dst = self.string(entry["dst"], p + ("dst",))
            kind = self.enum(entry["kind"], p + ("kind",), LinkKind)
            for end, key in ((src, "src"), (dst, "dst")):
                if not b.has_device(end):
                    raise self.fail(p + (key,), f"link {src}->{dst}: {end} is not defined", name_path=False)
            count = self.integer(entry.get("count", 1), p + ("count",), 1)
            if count > limit("lanes").value:
                raise self.fail(p + ("count",), limit("lanes").message(count))
            gbps = self.number(entry["bandwidth_gbps"], p + ("bandwidth_gbps",), MIN_GBPS, MAX_GBPS, "GB/s")
            bandwidth = _to_internal(gbps, _GB_EXP)
            latency_us = entry.get("latency_us")
            latency = defaults.LATENCY[kind] if latency_us is None else \
                _to_internal(self.number(latency_us, p + ("latency_us",), Decimal(0), MAX_LATENCY_US, "us"), _US_EXP)
            duplex = entry.get("duplex", True)
            if not isinstance(duplex, bool):
                raise self.fail(p + ("duplex",), f"expected true or false, got {_kind(duplex)}")
            self.builder_call(p, b.add_link, Link(src, dst, kind, bandwidth, latency, count))
            if duplex:
                self.builder_call(p, b.add_link, Link(dst, src, kind, bandwidth, latency, count))

        ranks = doc.get("ranks")
        if ranks is not None:
            if not isinstance(ranks, list):
                raise self.fail(("ranks",), f"expected a list of GPU ids, got {_kind(ranks)}")
            ranks = [self.string(r, ("ranks", i)) for i, r in enumerate(ranks)]
        return self.builder_call(("ranks",), b.build, ranks=ranks)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, Decimal, float)):
        return f"the number {clipped(str(value))}"
    if isinstance(value, str):
        return f"the string {clipped(value)!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _meta_floats(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _meta_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_meta_floats(v) for v in value]
    return value


def topology_from_dict(data: Mapping[str, Any], source: str | None = None, locate: Locate | None = None) -> Topology:
    """Build a topology from the file schema as Python data (numbers may be int, float or Decimal).

    ``locate`` optionally gives the line of a document path (``("links", 3, "dst")``)
    for error messages; without it an error names the path (``box:links[3].dst: ...``).
    """
    default_name = Path(source).stem if source else "topology"
    return _Reader(source, locate or (lambda path: None)).build(
        dict(data) if isinstance(data, Mapping) else data, default_name)


def parse_topology(text: str, fmt: str = "yaml", source: str | None = None) -> Topology:
    """Parse the text of a topology file (``fmt`` ``"yaml"`` or ``"json"``)."""
    if fmt == "yaml":
        doc, locate = load_yaml(text, source, TopologyError)
    elif fmt == "json":
        doc, locate = load_json(text, source, TopologyError)
    else:
        raise TopologyError(f"unknown topology file format {fmt!r}: use 'yaml' or 'json'", source=source)
    return topology_from_dict(doc, source, locate)


def read_topology_file(path: str | os.PathLike) -> Topology:
    """Read an arborcc topology file (``.yaml``, ``.yml`` or ``.json``)."""
    path = Path(path)
    fmt = _format_of(path)
    return parse_topology(read_input_text(path, TopologyError), fmt, str(path))
