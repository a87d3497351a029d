"""Blink eq. 8: both link types finish together; the set-up time shifts data to NVLink."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arborcc.errors import InputError
from arborcc.sim.blink_hybrid import hybrid_split

GB = 1e9


def test_without_setup_the_split_is_proportional_to_rates():
    s = hybrid_split(1100 * 1e6, 10 * GB, 100 * GB)
    assert s.pcie_bytes == pytest.approx(100e6) and s.nvlink_bytes == pytest.approx(1000e6)
    assert s.algbw == pytest.approx(110 * GB)


def test_setup_time_moves_data_to_nvlink_and_both_finish_together():
    s = hybrid_split(1e9, 10 * GB, 100 * GB, setup_time=1e-3)
    assert s.pcie_bytes == pytest.approx((1e9 * 10 * GB - 1e-3 * 10 * GB * 100 * GB) / (110 * GB))
    assert s.nvlink_bytes / (100 * GB) == pytest.approx(1e-3 + s.pcie_bytes / (10 * GB))


def test_small_transfers_skip_pcie_when_setup_dominates():
    s = hybrid_split(1e6, 10 * GB, 100 * GB, setup_time=1e-3)
    assert s.pcie_bytes == 0 and s.time == pytest.approx(1e6 / (100 * GB))


@given(st.floats(1e3, 1e10), st.floats(1e8, 1e11), st.floats(1e8, 1e12), st.floats(0, 1e-2))
def test_split_is_never_slower_than_nvlink_alone(total, pcie, nvl, setup):
    s = hybrid_split(total, pcie, nvl, setup)
    assert s.pcie_bytes + s.nvlink_bytes == pytest.approx(total)
    assert s.time <= total / nvl * (1 + 1e-9)


def test_bad_values():
    with pytest.raises(InputError, match="pcie_rate must be >= 0"):
        hybrid_split(1.0, -1.0, 1.0)
