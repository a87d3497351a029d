# An in-place all-gather written for the public GC3 tools: every rank copies its block
# straight to every other rank. As in those tools, copy(dst, Buffer.input, 0) names the
# sender's input block, which in place is the sender's block of the destination's output.
# Transfers between neighbours name no thread block (manual policy): the tools put them
# in one thread block shared by all such transfers of a rank.
import argparse

from msccl.language import *
from msccl.topologies import *
from msccl.language.collectives import AllGather


def allgather_pairs(size):
    with MSCCLProgram("allgather_pairs", fully_connected(size), AllGather(size, 1, True), 1,
                      threadblock_policy=ThreadblockPolicy.manual):
        for src in range(size):
            for dst in range(size):
                if dst == (src + 1) % size:
                    chunk(src, Buffer.input, 0).copy(dst, Buffer.input, 0)
                elif dst != src:
                    chunk(src, Buffer.input, 0).copy(dst, Buffer.input, 0, sendtb=dst, recvtb=src)
        XML()
        print("checked:", Check())


parser = argparse.ArgumentParser()
parser.add_argument("num_gpus", type=int)
allgather_pairs(parser.parse_args().num_gpus)
