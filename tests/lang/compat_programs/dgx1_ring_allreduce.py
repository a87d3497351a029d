# A ring all-reduce over the double NVLinks of a DGX-1, written for the public GC3 tools:
# their DGX-1 numbering, their collectives module imported (and unused) as some of their
# examples do. Copies and reduces are only allowed over links of the topology.
from msccl.language import *
from msccl.topologies.nvidia import dgx1
from msccl.collectives import *
from msccl.language.collectives import AllReduce

RING = [0, 1, 3, 2, 6, 7, 5, 4]  # consecutive GPUs share two NVLinks in this numbering

with MSCCLProgram("dgx1_ring", dgx1(), AllReduce(8, 8, True), 1):
    n = len(RING)
    for index in range(n):
        c = chunk(RING[(index + 1) % n], Buffer.input, index)
        for hop in range(2, n + 1):
            c = chunk(RING[(index + hop) % n], Buffer.input, index).reduce(c)
        for hop in range(1, n):
            c = c.copy(RING[(index + hop) % n], Buffer.input, index)
    XML()
    print("checked:", Check())
