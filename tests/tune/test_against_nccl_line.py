"""The one line ``synth`` and ``demo`` print on a time against NCCL's: faster, slower, or
the same time (within :data:`arborcc.tune.compare.TIE`), never "slower" at 1.00x."""

from arborcc.tune.compare import TIE, against_nccl


def test_a_time_equal_to_nccls_but_for_the_last_bits_is_as_fast():
    nccl = 0.006574799607843124
    line = against_nccl(nccl * (1 + TIE / 2), nccl, 1 << 30)
    assert line == "as fast as NCCL in simulation at 1G (NCCL 6574.8 us)"


def test_slower_and_faster_times_say_so_with_the_ratio():
    assert against_nccl(2e-3, 1e-3, 1 << 20).startswith("slower than NCCL in simulation at 1M: 2000.0 us")
    assert against_nccl(1e-3, 1.5e-3, 1 << 20) == "1.50x faster than NCCL in simulation at 1M (NCCL 1500.0 us)"
    assert against_nccl(1e-3, None, 1 << 20).startswith("NCCL not compared")
