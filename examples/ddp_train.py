"""Train a small MLP with DistributedDataParallel on CPU ranks, on gloo and on arborcc,
and check that both give the same weights.

    torchrun --standalone --nproc-per-node 4 examples/ddp_train.py --backend arborcc
    arborcc run -n 4 examples/ddp_train.py

The default process group uses ``--backend``; DDP wraps the model unchanged on it (no
process group argument). For comparison the same training runs with DDP on a group of
the other backend, and (``--hook``) with DDP on gloo using arborcc's communication hook.
Every run starts from the same weights and sees the same synthetic data (seeded per
rank; nothing is downloaded). Rank 0 prints the time per iteration of each run (median
over the steps after the first two) and the largest weight difference to the gloo run;
the script exits with status 1 when a difference exceeds the float tolerance.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import arborcc.torch


def make_model(width: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def batches(rank: int, steps: int, batch: int):
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(steps):
        x = torch.randn(batch, 64, generator=g)
        yield x, (x[:, :10].sum(dim=1) > 0).long() + (x[:, 10:20].sum(dim=1) > 0).long()


def train(group, args, hook_state=None) -> tuple[list[torch.Tensor], list[float]]:
    """Train on ``group`` (None: the default group); the final weights and each step's seconds."""
    model = DDP(make_model(args.width), process_group=group)
    if hook_state is not None:
        model.register_comm_hook(hook_state, arborcc.torch.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for x, y in batches(dist.get_rank(), args.steps, args.batch):
        start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return [p.detach().clone() for p in model.parameters()], times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["arborcc", "gloo"], default="arborcc",
                   help="the default process group's backend, which DDP uses unchanged (default arborcc)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=512, help="hidden layer width (512: about 560k parameters)")
    p.add_argument("--hook", action="store_true", help="also train on gloo with arborcc's DDP communication hook")
    p.add_argument("--rtol", type=float, default=1e-4)
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # ranks share the machine's cores

    arborcc.torch.init(backend=args.backend, timeout=120)
    other = "gloo" if args.backend == "arborcc" else "arborcc"

    def gloo_group():
        with arborcc.torch.free_threads():  # gloo's threads on any CPU, not on the one arborcc pinned the rank to
            return dist.new_group(backend="gloo")

    runs = {args.backend: train(None, args),
            other: train(gloo_group() if other == "gloo" else dist.new_group(backend=other), args)}
    if args.hook:
        runs["gloo + arborcc hook"] = train(gloo_group(), args, arborcc.torch.hook_state())

    reference = runs["gloo"][0]
    ok = True
    rows = []
    for name, (weights, times) in runs.items():
        diff = max(float((w - r).abs().max()) for w, r in zip(weights, reference))
        scale = max(float(r.abs().max()) for r in reference)
        ok &= diff <= args.rtol * scale
        rows.append((name, statistics.median(times[2:] or times) * 1e3, diff))
    if dist.get_rank() == 0:
        n = sum(w.numel() for w in reference)
        print(f"DDP, {dist.get_world_size()} ranks, MLP of {n} parameters, {args.steps} steps of batch {args.batch}")
        print(f"{'run':<22} {'ms/iteration':>13} {'max |w - w_gloo|':>17}")
        for name, ms, diff in rows:
            print(f"{name:<22} {ms:>13.2f} {diff:>17.3g}")
        print("weights equal within tolerance" if ok else f"WEIGHTS DIFFER (rtol {args.rtol})")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
