"""YAML and JSON text from untrusted files -> plain Python data, within the limits.

:func:`load_yaml` and :func:`load_json` return the document - mappings with string
keys, lists, strings, booleans, None, integers and :class:`~decimal.Decimal` for every
other number (exact, so the caller rounds once) - and a ``locate(path)`` function giving
the line of a place in it (``("links", 3, "src")``), computed only when asked (an error
message needs it; reading does not).

What they refuse, as one ``error`` line naming the file and the line:

* syntax errors, a key given twice in one mapping, keys that are not strings, non-finite
  numbers (``.nan``, ``NaN``, ``Infinity``), numbers too long to convert;
* nesting deeper than the ``nesting`` limit (:mod:`arborcc.limits`), checked while
  the text is read, before the parsers' recursion could exhaust the stack;
* YAML aliases that would add more values than the ``yaml-alias-nodes`` limit, and
  recursive aliases. An alias is not copied (the document shares the value), but
  whoever walks the document walks it once per alias, so a "billion laughs" file of
  under 1 KB is refused instead of being expanded.

YAML is read from the parser's event stream (libyaml's when PyYAML has it), not by
PyYAML's recursive composer. Plain scalars that YAML 1.2 reads as numbers but YAML 1.1
as strings (``1e3``, ``2.5e9``) are numbers here, as a user writing them means.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from itertools import chain
from typing import Any, Callable

import yaml

from arborcc.errors import InputError
from arborcc.limits import limit

DocPath = tuple  #: a place in a document: keys and list indices, e.g. ("links", 3, "src")
Locate = Callable[[DocPath], "int | None"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_STR, _INT, _FLOAT = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_BOOL, _NULL, _MERGE = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
#: decimal numbers YAML 1.2 reads as numbers and YAML 1.1 as strings (no point, or an unsigned exponent)
_DECIMAL = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)")
_OPEN = object()  # an anchor whose value is still being read


#: the longest key or value an error message quotes whole
QUOTE_LIMIT = 60


def clipped(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text``, or its two ends around "..." when it is longer than ``limit``: a key or
    value quoted in an error message (a malformed file can hold a key of any length)."""
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 2
    return text[:keep] + "..." + text[-keep:]


def path_text(path: DocPath) -> str:
    """``("links", 3, "src")`` -> ``links[3].src``; a very deep path keeps its ends
    (``meta.a.a...a.a``), a very long key its ends (:func:`clipped`)."""
    out = ""
    for i, p in enumerate(path):
        p = clipped(p) if isinstance(p, str) else p
        if len(path) > 8 and 4 <= i < len(path) - 3:
            if i == 4:
                out += "..."
            continue
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out and not out.endswith("...") else str(p))
    return out


# ------------------------------------------------------------------------------ YAML
class _Frame:
    """A mapping or list being read: its value, place, anchor and size so far."""

    __slots__ = ("value", "path", "anchor", "size", "depth", "key", "key_line", "is_map")

    def __init__(self, is_map: bool, path: DocPath, anchor: str | None):
        self.is_map = is_map
        self.value: Any = {} if is_map else []
        self.path = path
        self.anchor = anchor
        self.size = 1
        self.depth = 1
        self.key: Any = _OPEN  # a mapping's pending key (_OPEN: the next value is a key)
        self.key_line = 0


class _YamlReader:
    def __init__(self, source: str | None, error: type[InputError]):
        self.source = source
        self.error = error
        self.max_depth = limit("nesting").value
        self.alias_budget = limit("yaml-alias-nodes").value
        self.added = 0

    def fail(self, problem: str, line: int | None, path: DocPath = ()) -> InputError:
        where = path_text(path)
        return self.error(f"{where}: {problem}" if where else problem, source=self.source, place=line)

    def read(self, text: str, want: DocPath | None = None) -> Any:
        """The document, or with ``want`` the line where that place starts (None if absent)."""
        stack: list[_Frame] = []
        anchors: dict[str, Any] = {}
        documents = 0
        root: Any = _OPEN
        try:
            for ev in yaml.parse(text, Loader=_LOADER):
                kind = type(ev)
                line = ev.start_mark.line + 1
                if kind is yaml.ScalarEvent:
                    path = self.child_path(stack, line)
                    if want is not None and path == want:
                        return line
                    value = self.scalar(ev, path, line, is_key=bool(stack) and stack[-1].is_map
                                        and stack[-1].key is _OPEN)
                    root = self.add(stack, value, 1, 0, line, ev.anchor, anchors, root)
                elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                    path = self.child_path(stack, line)
                    if want is not None and path == want:
                        return line
                    if stack and stack[-1].is_map and stack[-1].key is _OPEN:
                        raise self.fail("keys must be strings", line, stack[-1].path)
                    if len(stack) + 1 > self.max_depth:
                        raise self.fail(limit("nesting").message(len(stack) + 1, "nesting"), line, path)
                    if ev.anchor is not None:
                        anchors[ev.anchor] = _OPEN
                    stack.append(_Frame(kind is yaml.MappingStartEvent, path, ev.anchor))
                elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                    frame = stack.pop()
                    if frame.anchor is not None:
                        anchors[frame.anchor] = (frame.value, frame.size, frame.depth)
                    root = self.add(stack, frame.value, frame.size, frame.depth, line, None, anchors, root)
                elif kind is yaml.AliasEvent:
                    path = self.child_path(stack, line)
                    if want is not None and path == want:
                        return line
                    entry = anchors.get(ev.anchor)
                    if entry is None:
                        raise self.fail(f"alias *{ev.anchor} names no anchor defined before it", line, path)
                    if entry is _OPEN:
                        raise self.fail(f"alias *{ev.anchor} refers to the value it is part of (a recursive "
                                        "alias)", line, path)
                    value, size, depth = entry
                    self.added += size
                    if self.added > self.alias_budget:
                        raise self.fail(limit("yaml-alias-nodes").message(self.added, "aliases would add"),
                                        line, path)
                    if len(stack) + depth > self.max_depth:
                        raise self.fail(limit("nesting").message(len(stack) + depth, "nesting through "
                                                                 f"alias *{ev.anchor}"), line, path)
                    root = self.add(stack, value, size, depth, line, None, anchors, root)
                elif kind is yaml.DocumentStartEvent:
                    documents += 1
                    if documents > 1:
                        raise self.fail("more than one YAML document (---) in the file", line)
        except yaml.YAMLError as e:
            # the scanner reads a run of flow brackets ahead of the events, so a parser's own
            # nesting limit (libyaml's, PyYAML's) can stop it before the events reach ours
            depth, over = _json_depth(text)
            if over is not None:
                raise self.error(limit("nesting").message(depth, "nesting"), source=self.source,
                                 place=over) from None
            mark = getattr(e, "problem_mark", None)
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise self.error(f"YAML syntax error: {problem}", source=self.source,
                             place=mark.line + 1 if mark else None) from None
        if want is not None:
            return None
        if root is _OPEN or root is None:
            raise self.error("the file is empty", source=self.source)
        return root

    @staticmethod
    def child_path(stack: list[_Frame], line: int) -> DocPath:
        """The place of the next value: a list's next index, or a mapping's pending key
        (a key itself is placed at the mapping's path plus the key, filled in later)."""
        if not stack:
            return ()
        top = stack[-1]
        if top.is_map:
            return top.path if top.key is _OPEN else top.path + (top.key,)
        return top.path + (len(top.value),)

    def add(self, stack: list[_Frame], value: Any, size: int, depth: int, line: int, anchor: str | None,
            anchors: dict[str, Any], root: Any) -> Any:
        if anchor is not None:
            anchors[anchor] = (value, size, depth)
        if not stack:
            return value
        top = stack[-1]
        top.size += size
        top.depth = max(top.depth, depth + 1)
        if not top.is_map:
            top.value.append(value)
        elif top.key is _OPEN:
            if not isinstance(value, str):
                raise self.fail("keys must be strings", line, top.path)
            if value in top.value:
                raise self.fail("key given twice", line, top.path + (value,))
            top.key, top.key_line = value, line
        else:
            top.value[top.key] = value
            top.key = _OPEN
        return root

    def scalar(self, ev: yaml.ScalarEvent, path: DocPath, line: int, is_key: bool) -> Any:
        tag = ev.tag
        if tag is None or tag == "!":
            tag = _RESOLVER.resolve(yaml.ScalarNode, ev.value, ev.implicit)
        if is_key:
            if tag == _MERGE:
                raise self.fail("merge keys (<<) are not supported; write the values out", line, path)
            if tag != _STR:
                raise self.fail("keys must be strings", line, path)
            return ev.value
        if tag == _STR:
            if ev.style is None and ev.implicit[0] and _DECIMAL.fullmatch(ev.value):
                return self.decimal(ev.value, path, line)
            return ev.value
        if tag == _FLOAT:
            return self.decimal(ev.value, path, line)
        if tag in (_INT, _BOOL, _NULL):
            try:
                return _CONSTRUCTOR.construct_object(yaml.ScalarNode(tag, ev.value), deep=True)
            except (yaml.YAMLError, ValueError) as e:
                raise self.fail(f"cannot read the number {ev.value[:40]!r}: {str(e).splitlines()[0]}", line,
                                path) from None
        if tag == _TIMESTAMP:
            return ev.value
        raise self.fail(f"unsupported YAML type {tag!r}", line, path)

    def decimal(self, text: str, path: DocPath, line: int) -> Decimal:
        try:
            d = Decimal(text.replace("_", ""))
        except InvalidOperation:
            d = None
        if d is None or not d.is_finite():
            raise self.fail(f"{text[:40]!r} is not a finite number", line, path)
        return d


def load_yaml(text: str, source: str | None = None, error: type[InputError] = InputError) -> tuple[Any, Locate]:
    """The document of YAML ``text`` and its ``locate`` (see the module doc)."""
    doc = _YamlReader(source, error).read(text)
    return doc, lambda path: _YamlReader(source, error).read(text, tuple(path))


# ------------------------------------------------------------------------------ JSON
class _DuplicateKey(Exception):
    pass


class _Constant(Exception):
    pass


#: a JSON string, a bracket, or a non-finite constant (JSON's own extensions)
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]|NaN|-?Infinity')


def load_json(text: str | bytes, source: str | None = None, error: type[InputError] = InputError,
              exact: bool = True) -> tuple[Any, Locate]:
    """The document of JSON ``text`` and its ``locate`` (see the module doc); with
    ``exact`` every non-integer number is a :class:`~decimal.Decimal`, else a float."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise error(f"not UTF-8 text ({e.reason} at byte {e.start})", source=source) from None

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)  # built in C: millions of objects in a large algorithm
        if len(out) != len(items):  # a key given twice: name the first one that repeats
            seen: set[str] = set()
            for k, _ in items:
                if k in seen:
                    raise _DuplicateKey(k)
                seen.add(k)
        return out

    def constant(name: str) -> Any:
        raise _Constant(name)

    def locate(path: DocPath) -> int | None:
        try:  # JSON is (nearly) YAML; raw tabs, which YAML dislikes, can only be whitespace in valid JSON
            return _YamlReader(source, error).read(text.replace("\t", " "), tuple(path))
        except InputError:
            return None

    try:
        doc = json.loads(text, parse_float=Decimal if exact else float, parse_constant=constant,
                         object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise error(f"JSON syntax error: {e.msg} (column {e.colno})", source=source, place=e.lineno) from None
    except _DuplicateKey as e:
        try:
            load_yaml(text.replace("\t", " "), source, error)  # finds the key's line
        except InputError as found:
            if "given twice" in str(found):
                raise found from None
        raise error(f"key {e.args[0]!r} given twice in one object", source=source) from None
    except _Constant as e:
        raise error(f"{e.args[0]} is not a finite number", source=source, place=_token_line(text, e.args[0])) from None
    except RecursionError:
        depth, line = _json_depth(text)
        raise error(limit("nesting").message(depth, "nesting"), source=source, place=line) from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise error(f"JSON: {str(e).splitlines()[0]}", source=source) from None
    if _depth_over(doc, limit("nesting").value):
        depth, line = _json_depth(text)
        raise error(limit("nesting").message(depth, "nesting"), source=source, place=line)
    return doc, locate


def _token_line(text: str, token: str) -> int | None:
    for m in _JSON_TOKENS.finditer(text):
        if m.group() == token:
            return text.count("\n", 0, m.start()) + 1
    return None


def _json_depth(text: str) -> tuple[int, int | None]:
    """(the deepest nesting, the line where nesting first goes over the limit)."""
    cap = limit("nesting").value
    depth = deepest = 0
    line = None
    for m in _JSON_TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if depth > cap and line is None:
                line = text.count("\n", 0, m.start()) + 1
        elif c in "]}":
            depth -= 1
    return deepest, line


def _depth_over(doc: Any, cap: int) -> bool:
    """Whether ``doc`` nests deeper than ``cap`` (no recursion). Walked one level at a
    time, the containers of each level gathered in bulk: a document of millions of
    objects (a 1024-rank algorithm) is walked in one comprehension per level."""
    level = [doc] if type(doc) is dict or type(doc) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > cap:
            return True
        children = chain(chain.from_iterable(map(dict.values, [c for c in level if type(c) is dict])),
                         chain.from_iterable([c for c in level if type(c) is list]))
        level = [v for v in children if type(v) is dict or type(v) is list]
    return False
