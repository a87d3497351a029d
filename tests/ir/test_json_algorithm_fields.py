"""Every field of an algorithm file is checked for its type and range where it is read,
in one line naming the file and the field (JSON path, or XML element and attribute);
and arborcc writes no algorithm file it would not read back."""

from __future__ import annotations

import json
import re

import pytest

from support.algorithms import allpairs_allreduce
from support.cli_runs import IR_SAMPLES
from arborcc.errors import ArborccError, IRFormatError
from arborcc.ir.json_io import algorithm_from_json, algorithm_to_dict, algorithm_to_json
from arborcc.ir.msccl_xml import read_msccl_xml, write_msccl_xml
from arborcc.limits import reset_limits, set_limit

STEP = ("ranks", 0, "threadblocks", 2, "steps", 1)


def _doc(path: tuple = (), value=None) -> dict:
    d = algorithm_to_dict(allpairs_allreduce(3))
    if path:
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return d


def _read(d: dict) -> str:
    """The one-line refusal of reading ``d`` as ``algo.json``."""
    with pytest.raises(IRFormatError) as e:
        algorithm_from_json(json.dumps(d), source="algo.json")
    message = str(e.value)
    assert "\n" not in message
    return message


def _place(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))


@pytest.mark.parametrize("key", ["src_buf", "dst_buf"])
@pytest.mark.parametrize("value", [["i"], {"i": 1}, 3, True, "x"])
def test_a_buffer_that_is_not_a_buffer_name_is_refused(key, value):
    message = _read(_doc(STEP + (key,), value))
    assert message.startswith(f"algo.json:{_place(STEP + (key,))}: expected one of \"i\", \"o\", \"s\" or null, got ")


@pytest.mark.parametrize("key", ["min_bytes", "max_bytes"])
@pytest.mark.parametrize("value", [10**40, 2**63, -1])
def test_sizes_outside_a_signed_64_bit_byte_count_are_refused(key, value):
    message = _read(_doc((key,), value))
    assert message.startswith(f"algo.json:{key}: expected a size in bytes")
    assert "9,223,372,036,854,775,807" in message


def test_the_largest_size_is_read():
    assert algorithm_from_json(_doc(("max_bytes",), 2**63 - 1)).max_bytes == 2**63 - 1


def test_min_bytes_above_max_bytes_is_refused():
    d = _doc()
    d.update(min_bytes=4096, max_bytes=1024)
    assert _read(d).startswith("algo.json:min_bytes: 4,096 is above max_bytes 1,024")


def test_min_bytes_without_an_upper_limit_is_read():
    d = _doc()
    d.update(min_bytes=4096, max_bytes=0)
    assert algorithm_from_json(d).min_bytes == 4096


#: (path, a value out of its range, words the message must hold)
OUT_OF_RANGE = [
    (("ranks", 1, "rank"), -1, "a rank from 0 to"),
    (("ranks", 1, "rank"), 10**9, "ranks limit"),
    (("root",), 10**40, "a rank from 0"),
    (("ranks", 1, "threadblocks", 0, "id"), -1, "a thread block id from 0"),
    (("ranks", 1, "threadblocks", 0, "id"), 2**31, "a thread block id"),
    (("ranks", 1, "threadblocks", 0, "send"), -2, "-1 (none) or a rank"),
    (("ranks", 1, "threadblocks", 0, "recv"), 10**40, "-1 (none) or a rank"),
    (("ranks", 1, "threadblocks", 0, "channel"), 2**40, "a channel"),
    (STEP + ("src_off",), -5, "-1 (none) or a chunk offset"),
    (STEP + ("dst_off",), 10**12, "chunks limit"),
    (STEP + ("count",), -1, "a chunk count from 0"),
    (STEP + ("count",), 10**40, "a chunk count"),
    (STEP + ("dep",), [-1, 0], "a thread block id"),
    (STEP + ("dep",), [0, 2**63], "a step index"),
]


@pytest.mark.parametrize("path,value,words", OUT_OF_RANGE, ids=lambda x: str(x)[:30])
def test_an_integer_out_of_its_range_is_refused_naming_its_path(path, value, words):
    message = _read(_doc(path, value))
    place = _place(path) + ("[0]" if path[-1] == "dep" and value[0] < 0 else "[1]" if path[-1] == "dep" else "")
    assert message.startswith(f"algo.json:{place}: expected "), message
    assert words in message, message


def test_a_number_of_thousands_of_digits_is_named_by_its_length():
    message = _read(_doc(STEP + ("count",), 10**3000))
    assert "a 3001-digit number" in message and len(message) < 300


@pytest.mark.parametrize("key,value", [("version", "1"), ("format", ["arborcc-algorithm"])])
def test_the_header_fields_have_their_types(key, value):
    assert _read(_doc((key,), value)).startswith(f"algo.json:{key}: expected ")


def test_a_very_long_step_type_is_quoted_by_its_ends():
    message = _read(_doc(STEP + ("op",), "x" * 100_000))
    assert "..." in message and len(message) < 300


# ---------------------------------------------------------------- MSCCL XML attributes
RING = (IR_SAMPLES / "ring4_allreduce_executor.xml").read_text()


def _xml_refusal(text: str) -> str:
    with pytest.raises(IRFormatError) as e:
        read_msccl_xml(text, source="a.xml")
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("attribute", ["minBytes", "maxBytes"])
def test_msccl_xml_sizes_beyond_64_bits_are_refused(attribute):
    text = re.sub(f'{attribute}="\\d+"', f'{attribute}="{10**40}"', RING, count=1)
    assert re.match(f"a\\.xml:1: <algo>: attribute {attribute}: expected a size in bytes", _xml_refusal(text))


def test_msccl_xml_min_bytes_above_max_bytes_is_refused():
    text = re.sub(r'minBytes="\d+"', 'minBytes="4096"', RING).replace('maxBytes="0"', 'maxBytes="1024"')
    assert "attribute minBytes: 4,096 is above maxBytes 1,024" in _xml_refusal(text)


@pytest.mark.parametrize("old,new,place", [
    ('srcoff="0"', f'srcoff="{10**12}"', "attribute srcoff: expected -1 (none) or a chunk offset"),
    ('cnt="1"', 'cnt="99999999"', "attribute cnt: expected a chunk count"),
    ('depid="-1"', 'depid="-7"', "attribute depid: expected -1 (none) or a thread block id"),
    ('send="1"', f'send="{2**40}"', "attribute send: expected -1 (none) or a rank"),
    ('chan="0"', 'chan="-3"', "attribute chan: expected a channel"),
    ('<tb id="0"', '<tb id="-1"', "attribute id: expected a thread block id"),
    ('<gpu id="0"', '<gpu id="-1"', "attribute id: expected a rank"),
    ('inplace="0"', 'inplace="2"', "attribute inplace: expected 0 or 1"),
    ('srcbuf="i"', 'srcbuf="[i]"', "attribute srcbuf: expected one of i, o, s"),
])
def test_msccl_xml_attributes_out_of_their_range_are_refused(old, new, place):
    assert old in RING
    assert place in _xml_refusal(RING.replace(old, new, 1))


# ---------------------------------------------------------------- what arborcc writes
@pytest.fixture
def small_algorithm_limit():
    set_limit("algorithm-bytes=2Ki")
    yield
    reset_limits()


@pytest.mark.parametrize("write", [algorithm_to_json, write_msccl_xml], ids=["json", "xml"])
def test_an_algorithm_file_over_the_read_limit_is_not_written(write, small_algorithm_limit):
    with pytest.raises(ArborccError) as e:
        write(allpairs_allreduce(3))
    assert "bytes is over the limit of 2,048 bytes per algorithm file" in str(e.value)
    assert "algorithm-bytes" in str(e.value)


def test_every_written_file_is_read_back_within_the_same_limit(small_algorithm_limit):
    from support.algorithms import ring_allreduce

    algo = ring_allreduce(2)
    assert algorithm_from_json(algorithm_to_json(algo)) == algo
    assert read_msccl_xml(write_msccl_xml(algo)) == algo
