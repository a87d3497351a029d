"""Two "hosts" on one machine: a multi-node job on loopback.

    python examples/two_hosts.py                 # starts both nodes (2 ranks each) and waits

which runs, as two nodes of a cluster would (one command per node):

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29531 \\
        examples/two_hosts.py --worker
    torchrun --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29531 \\
        examples/two_hosts.py --worker

torchrun gives each node's ranks their node rank (``GROUP_RANK``), so the arborcc backend
sees two hosts: each gets its own shared-memory communicator, and the hosts are joined
by the torch.distributed executor over gloo (a hierarchical all-reduce: reduce-scatter
inside each host, all-reduce between hosts, all-gather inside each host). Every rank
checks all_reduce, broadcast, all_gather_single and reduce_scatter_single (torch 2.13's names of all_gather_into_tensor and reduce_scatter_tensor) against
gloo over the same ranks, then DDP trains a few steps on both; rank 0 prints the layout
and the result. The exit status is 0 only if every check passed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def checks(gloo) -> list[str]:
    """Differences between arborcc (the default group) and gloo; empty when they agree."""
    import torch
    import torch.distributed as dist

    r, w = dist.get_rank(), dist.get_world_size()
    bad = []
    for n in (1, 7, 1000, 1 << 20):
        x = torch.randn(n, generator=torch.Generator().manual_seed(r * 7 + n))
        a, b = x.clone(), x.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=gloo)
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-5):
            bad.append(f"all_reduce of {n}")
        a, b = x.clone(), x.clone()
        dist.broadcast(a, src=w - 1)
        dist.broadcast(b, src=w - 1, group=gloo)
        if not torch.equal(a, b):
            bad.append(f"broadcast of {n}")
        a, b = torch.empty(w * n), torch.empty(w * n)
        dist.all_gather_single(a, x)
        dist.all_gather_single(b, x, group=gloo)
        if not torch.equal(a, b):
            bad.append(f"all_gather_single of {n}")
        big = torch.randn(w * n, generator=torch.Generator().manual_seed(r))
        a, b = torch.empty(n), torch.empty(n)
        dist.reduce_scatter_single(a, big)
        dist.reduce_scatter_single(b, big, group=gloo)
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-5):
            bad.append(f"reduce_scatter_single of {n}")
    return bad


def worker() -> int:
    import torch  # in the ranks only: the launcher needs none of it
    import torch.distributed as dist

    import arborcc.torch

    torch.set_num_threads(1)
    arborcc.torch.init(timeout=120)
    gloo = dist.new_group(backend="gloo")
    bad = checks(gloo)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ddp_train import train  # the DDP example's training loop, on the same two hosts

    args = argparse.Namespace(steps=8, batch=32, width=256)
    on_arborcc, _ = train(None, args)
    on_gloo, _ = train(gloo, args)
    if any(not torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(on_arborcc, on_gloo)):
        bad.append("DDP weights")
    if dist.get_rank() == 0:
        print(f"hosts (ranks): {[list(h) for h in dist.group.WORLD.layout.hosts]}")
        print("collectives and DDP weights equal to gloo's" if not bad else f"DIFFER: {', '.join(bad)}")
    dist.destroy_process_group()
    return 0 if not bad else 1


def launch(port: int) -> int:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(port)]
    nodes = [subprocess.Popen(cmd + ["--node-rank", str(n), os.path.abspath(__file__), "--worker"])
             for n in (0, 1)]
    try:
        codes = [p.wait(timeout=300) for p in nodes]
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
                p.wait()
    return max(codes)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", action="store_true", help="run as one rank (under torchrun)")
    p.add_argument("--port", type=int, default=29531, help="the master port of the two-node job")
    args = p.parse_args()
    return worker() if args.worker else launch(args.port)


if __name__ == "__main__":
    sys.exit(main())
