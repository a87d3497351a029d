"""The public MSCCL tools' sample files that the project's reference material ships."""

from pathlib import Path

#: byte-identical copies in tests/ir/samples/msccl-tools (see its README), so a fresh clone has them
MSCCL_SAMPLES = [Path(__file__).parents[1] / "ir" / "samples" / "msccl-tools" / name for name in (
    "executor__allgather_recursive_doubling_4_1.xml", "executor__allgather_ring_4_1_2.xml",
    "executor__allreduce_a100_ring_4_2_1.xml", "executor__reducescatter_allpairs_4.xml",
    "legacy__allgather_ring_4_1_1.xml", "legacy__allreduce_a100_ring_4_1_1.xml", "legacy__alltoall_allpairs_4_1.xml")]
