"""The one size syntax (arborcc.sizes): binary units like nccl-tests, sweeps and lists,
and a clear refusal for everything else."""

import pytest
from hypothesis import given, strategies as st

from arborcc.errors import InputError
from arborcc.sizes import MAX_BYTES, MAX_SIZES, format_size, parse_size, parse_sizes


def test_units_are_binary_like_nccl_tests():
    assert parse_size("4096") == 4096
    assert parse_size("64K") == parse_size("64KB") == parse_size("64KiB") == parse_size("64k") == 65536
    assert parse_size("1.5M") == 3 << 19
    assert parse_size("1G") == parse_size("1GB") == parse_size("1GiB") == 1 << 30
    assert parse_size("2T") == 2 << 40
    assert parse_size("1e3") == 1000
    assert parse_size(str(MAX_BYTES)) == MAX_BYTES


def test_ranges_and_lists():
    assert parse_sizes("1K:1M:32") == [1024, 32768, 1 << 20]
    assert parse_sizes("8:64") == [8, 16, 32, 64]
    assert parse_sizes("1M,4K") == [4096, 1 << 20]
    assert parse_sizes("4K") == [4096]
    assert parse_sizes("1:10:1.5") == [1, 2, 3, 5, 7]


@pytest.mark.parametrize("bad, why", [
    ("", "no size given"), (" , ", "no size given"), ("1X", "not a size"), ("0", "at least 1 byte"),
    ("-4K", "not a size"), ("inf", "not a size"), ("nan", "not a size"), ("1e400", "over the largest size"),
    ("1K:inf", "not a size"), ("1:1e400", "over the largest size"), ("16E", "not a size"),
    ("9223372036854775808", "over the largest size"), ("10000000T", "over the largest size"),
    ("1.5", "whole number of bytes"), ("0.5", "at least 1 byte"), ("1M:1K", "below the smallest"), ("1K:1M:1", "greater than 1"),
    ("1K:1M:nan", "greater than 1"), ("1K:1M:inf", "greater than 1"), ("1:2:3:4", "MIN:MAX"),
    ("1K:1M:x", "must be a number"), ("1:1T:1.0000001", f"more than {MAX_SIZES}"),
])
def test_bad_sizes_are_refused_naming_the_problem(bad, why):
    with pytest.raises(InputError, match=why):
        parse_sizes(bad)


@given(st.integers(1, MAX_BYTES))
def test_a_formatted_size_reads_back(size):
    assert parse_size(format_size(size)) == size


@given(st.integers(1, 1 << 40), st.integers(1, 1 << 40), st.floats(1.001 * 2 ** (40 / (MAX_SIZES - 1)), 64))
def test_a_sweep_increases_from_its_smallest_to_at_most_its_largest(lo, hi, factor):
    lo, hi = min(lo, hi), max(lo, hi)
    sizes = parse_sizes(f"{lo}:{hi}:{factor!r}")
    assert sizes[0] == lo and sizes[-1] <= hi
    assert all(a < b for a, b in zip(sizes, sizes[1:]))


@given(st.text(max_size=20))
def test_any_text_is_a_size_or_an_input_error(text):
    try:
        sizes = parse_sizes(text)
    except InputError:
        return
    assert sizes and all(1 <= s <= MAX_BYTES for s in sizes)
