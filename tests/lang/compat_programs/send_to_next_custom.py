# A user-defined collective written for the public GC3 tools (msccl-tools):
# rank r's buffer goes to rank r+1. Inside a node it is one aggregated copy; at a
# node boundary the buffer is split and every GPU of the node relays one part over
# its own network link (through named scratch buffers).
import argparse

from msccl.language import *
from msccl.topologies import *
from msccl.topologies.distributed import distributed_fully_connected
from msccl.language.collectives import Collective


class SendToNext(Collective):
    def init_buffers(self):
        rank_buffers = []
        for r in range(self.num_ranks):
            input_buffer = [None] * self.chunk_factor
            output_buffer = [None] * self.chunk_factor
            if r + 1 < self.num_ranks:
                for c in range(self.chunk_factor):
                    input_buffer[c] = Chunk(r, c, r + 1, c)
            rank_buffers.append({Buffer.input: input_buffer, Buffer.output: output_buffer})
        return rank_buffers

    def check(self, prog):
        correct = True
        for r in range(1, self.num_ranks):
            output = prog.buffers[r][Buffer.output]
            for c in range(self.chunk_factor):
                got = output[c]
                if got is None or got.origin_rank != r - 1 or got.origin_index != c:
                    print(f"Rank {r} chunk {c} should be ({r - 1}, {c}), got {got}")
                    correct = False
        return correct


def send_to_next(nodes, gpus, instances):
    size = nodes * gpus
    topology = distributed_fully_connected(fully_connected(gpus), nodes, 1)
    collective = SendToNext(size, gpus, False)
    with MSCCLProgram("send_to_next", topology, collective, instances):
        for r in range(size - 1):
            if (r + 1) % gpus != 0:
                chunk(r, Buffer.input, 0, gpus).copy(r + 1, Buffer.output, 0)
                continue
            node = r // gpus
            relay = f"relay{node}"
            for part, c in enumerate(chunk(r, Buffer.input, 0, gpus).split(gpus)):
                helper = node * gpus + part
                if helper != r:
                    c = c.copy(helper, relay, 0)
                c = c.copy(helper + gpus, relay, 0)
                c.copy(r + 1, Buffer.output, c.get_dst_index())
        Check()
        XML()


parser = argparse.ArgumentParser()
parser.add_argument("nodes", type=int)
parser.add_argument("gpus_per_node", type=int)
parser.add_argument("instances", type=int)
args = parser.parse_args()

send_to_next(args.nodes, args.gpus_per_node, args.instances)
