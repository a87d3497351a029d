# A ring all-reduce written for the public GC3 tools (msccl-tools).
# Every chunk travels the ring twice: once reducing, once copying the result.
# Chunk i is pinned to channel/thread block i % channels on every rank.
import argparse

from msccl.language import *
from msccl.topologies import *
from msccl.language.collectives import AllReduce


def ring_allreduce(size, channels, instances, protocol):
    topology = fully_connected(size)
    collective = AllReduce(size, size, True)
    with MSCCLProgram(f"ring_allreduce_{channels}ch", topology, collective, instances,
                      protocol=protocol, threadblock_policy=ThreadblockPolicy.manual):
        for index in range(size):
            tb = index % channels
            c = chunk((index + 1) % size, Buffer.input, index)
            for hop in range(2, size + 1):
                here = (index + hop) % size
                c = chunk(here, Buffer.input, index).reduce(c, sendtb=tb, recvtb=tb, ch=tb)
            for hop in range(1, size):
                c = c.copy((index + hop) % size, Buffer.input, index, sendtb=tb, recvtb=tb, ch=tb)
        XML()
        Check()


parser = argparse.ArgumentParser()
parser.add_argument("num_gpus", type=int, help="number of gpus")
parser.add_argument("channels", type=int, help="channels one ring is spread over")
parser.add_argument("instances", type=int, help="number of instances")
parser.add_argument("--protocol", type=str, default="Simple", choices=["Simple", "LL", "LL128"])
args = parser.parse_args()

ring_allreduce(args.num_gpus, args.channels, args.instances, args.protocol)
