import pytest

from arborcc.errors import InputError
from arborcc.sim.sizes import parse_size, parse_sizes


def test_units_are_binary_like_nccl_tests():
    assert parse_size("4096") == 4096
    assert parse_size("64K") == parse_size("64KB") == parse_size("64KiB") == 65536
    assert parse_size("1.5M") == 3 << 19
    assert parse_size("1G") == 1 << 30


def test_ranges_and_lists():
    assert parse_sizes("1K:1M:32") == [1024, 32768, 1 << 20]
    assert parse_sizes("8:64") == [8, 16, 32, 64]
    assert parse_sizes("1M,4K") == [4096, 1 << 20]


@pytest.mark.parametrize("bad", ["", "1X", "0", "1M:1K", "1K:1M:1", "1:2:3:4", "1K:1M:x"])
def test_bad_sizes(bad):
    with pytest.raises(InputError):
        parse_sizes(bad) if ":" in bad else parse_size(bad)
