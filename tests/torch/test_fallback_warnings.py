"""What arborcc does not run goes to gloo with one warning per job for each distinct
fallback, naming the call, its operator and element types, by whichever rank makes it
first - not one per rank."""

from __future__ import annotations

import pytest


EXPECTED = (
    "all_reduce with op BAND on int8 tensors goes to gloo (not in arborcc: reduction operator)",
    "all_reduce with op SUM on int8 tensors goes to gloo (not in arborcc: dtype int8)",
    "broadcast on bool tensors goes to gloo (not in arborcc: dtype bool)",
    "all_to_all_single on float32 tensors goes to gloo (not in arborcc: unequal splits)",
    "gather goes to gloo (not in arborcc: gather and scatter)",
    "send goes to gloo (not in arborcc: point-to-point operations)",
    "recv goes to gloo (not in arborcc: point-to-point operations)",
)


@pytest.mark.timeout(150)
def test_each_distinct_fallback_is_warned_once_in_the_job(two_rank_job):
    """The shared job (torchjobs.TWO_RANK_JOB): each fallback three times on both ranks."""
    code, said, err, _ = two_rank_job
    assert code == 0, err[-3000:]
    assert said[0][1:4] == said[1][1:4] == [[1.0, 2.0, True, 0.0]] * 3  # gloo ran them
    warned = [line for line in err.splitlines() if "FallbackWarning: arborcc: " in line]
    for description in EXPECTED:
        lines = [line for line in warned if f"arborcc: {description}; warned once per job, by rank " in line]
        assert len(lines) == 1, (description, warned)
    assert len(warned) == len(EXPECTED), warned
