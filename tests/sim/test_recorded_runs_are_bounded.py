"""``simulate --timeline`` and ``--critical-path`` record every pipeline iteration of the
largest size (the plain run extrapolates): a recording of more than
``MAX_RECORDED_PIECES`` pieces (a 2-rank ring at 2^63 - 1 bytes: 4 * 10^12 iterations,
which had run until the machine killed it) is one line naming the flag and the largest
size that fits, exit status 2, before anything is simulated."""

from __future__ import annotations

import pytest

from arborcc.cli.main import main
from arborcc.cli.simulate import MAX_RECORDED_PIECES, check_recording
from arborcc.errors import InputError
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.library.nccl_ring import ring_allreduce_algorithm

RING2 = ring_allreduce_algorithm([[0, 1]])


@pytest.fixture
def ring_xml(tmp_path):
    path = tmp_path / "ring.xml"
    path.write_text(write_msccl_xml(RING2, "legacy"))
    return str(path)


@pytest.mark.parametrize("flags, named", [(["--timeline", "t.png"], "--timeline"),
                                          (["--critical-path"], "--critical-path"),
                                          (["--timeline", "t.png", "--critical-path"], "--timeline and --critical-path")])
@pytest.mark.parametrize("size", ["9223372036854775807", "1T"])
def test_a_recording_over_the_limit_is_refused_before_it_starts(tmp_path, ring_xml, capsys, no_simulation, flags,
                                                                named, size):
    flags = [str(tmp_path / f) if f.endswith(".png") else f for f in flags]
    code = main(["simulate", ring_xml, "--machine", "dgx1v", "--gpus", "0,1", "--sizes", f"1M:{size}", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"arborcc: error: {named}: records every pipeline iteration"), err
    assert "end --sizes at 128G or below" in err[0], err
    assert not (tmp_path / "t.png").exists()


def test_the_suggested_largest_size_fits_and_twice_it_does_not():
    check_recording(RING2, 128 << 30, None, 1, "--timeline")
    with pytest.raises(InputError, match="end --sizes at 128G or below"):
        check_recording(RING2, 256 << 30, None, 1, "--timeline")


def test_an_algorithm_with_more_steps_than_a_recording_holds_is_refused_at_any_size():
    class Big:
        protocol = RING2.protocol
        num_steps = MAX_RECORDED_PIECES + 1
        chunks_per_loop = 2
        num_ranks = 2
        collective = "allreduce"

    with pytest.raises(InputError, match="the algorithm's steps alone are more than that"):
        check_recording(Big(), 1024, None, 1, "--critical-path")


def test_a_plain_run_at_the_largest_size_is_not_limited(ring_xml, capsys):
    """Without --timeline or --critical-path the steady period is extrapolated: 2^63 - 1 bytes is a time."""
    assert main(["simulate", ring_xml, "--machine", "dgx1v", "--gpus", "0,1", "--sizes", "9223372036854775807",
                 "--links", "--json"]) == 0
    assert '"time_us"' in capsys.readouterr().out
