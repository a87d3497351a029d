"""The verifier's postcondition runs against the plain per-chunk table (docs/ir.md
section 2): the symbolic run checks each rank's output against these runs.
"""

import pytest

from arborcc.verify.postconditions import expected_runs


def table(coll, n, k, r, root, x):
    """docs/ir.md section 2, output chunk x of rank r: (input chunk, rank bitmask)."""
    b = k // n
    everyone = (1 << n) - 1
    return {
        "allreduce": (x, everyone), "reduce": (x, everyone), "allgather": (x % b, 1 << (x // b)),
        "reducescatter": (r * b + x, everyone), "alltoall": (r * b + x % b, 1 << (x // b)),
        "broadcast": (x, 1 << root), "gather": (x % k, 1 << (x // k)), "scatter": (r * k + x, 1 << root),
    }[coll]


@pytest.mark.parametrize("coll", ["allreduce", "reduce", "allgather", "reducescatter", "alltoall", "broadcast",
                                  "gather", "scatter"])
def test_expected_runs_are_the_postcondition_table(coll):
    for n in range(1, 5):
        for k in (n, 2 * n, 3 * n):
            for r in range(n):
                root = n - 1
                full = {"allgather": k, "reducescatter": k // n, "gather": n * k}.get(coll, k)
                for size in range(full + 1):
                    got = []
                    for first, length, chunk, mask in expected_runs(coll, n, k, r, root, size):
                        assert first == len(got)
                        got.extend((chunk + j, mask) for j in range(length))
                    assert got == [table(coll, n, k, r, root, x) for x in range(size)]
