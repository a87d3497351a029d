"""What NCCL's own cost model predicts, as a note of the NCCL baseline strategies
(``nccl-ring``, ``double-binary-tree``)."""

from __future__ import annotations

#: the protocol whose NCCL cost-model prediction the NCCL strategies note for a ``size``
NOTED_PROTOCOL = "Simple"


def nccl_prediction(estimate, size: int) -> str:
    """The note for NCCL's ``estimate`` (time, algbw) of a call of ``size`` bytes."""
    return (f"NCCL's cost model ({NOTED_PROTOCOL}) predicts {estimate.time * 1e6:.1f} us for {size} bytes "
            f"({estimate.algorithm_bandwidth / 1e9:.1f} GB/s algbw)")
