"""Run a script on local ranks (subprocesses with a hard timeout) and
collect what each rank reported (one JSON value per ``report`` call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from arborcc.runtime.launch import free_port_pair, rank_env

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """
import json, os, signal, sys, threading, time, warnings
import torch
import torch.distributed as dist
import arborcc.torch
from arborcc.runtime import CommunicationError
torch.set_num_threads(1)
rank = int(os.environ["RANK"])
def report(value):  # one write per line: lines of different ranks never interleave
    os.write(1, ("RANK%d: " % rank + json.dumps(value)).encode() + b"\\n")
"""


def launch(tmp_path, nranks: int, body: str, hard_timeout: float = 150,
           env: dict | None = None, prelude: str = PRELUDE) -> tuple[int, dict[int, list], str]:
    """Run ``body`` after ``prelude`` on ``nranks`` local ranks (torchrun's environment;
    unlike ``arborcc run``, a failing rank does not stop the others, so each reports what
    it saw); (the first non-zero exit status or 0, each rank's reports, the ranks' stderr)."""
    script = tmp_path / "job.py"
    script.write_text(prelude + textwrap.dedent(body))
    port = free_port_pair()
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT, env=rank_env(r, nranks, port, {**os.environ, **(env or {})}))
             for r in range(nranks)]
    deadline = time.monotonic() + hard_timeout
    outs, errs = [], []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outs.append(out)
            errs.append(err)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    said: dict[int, list] = {}
    for out in outs:
        for line in out.splitlines():
            if line.startswith("RANK") and ": " in line:
                rank, text = line[4:].split(": ", 1)
                said.setdefault(int(rank), []).append(json.loads(text))
    code = next((p.returncode for p in procs if p.returncode), 0)
    return code, said, "\n".join(errs)


#: one job of 2 ranks that several tests read (a job's start, torch's import on every rank,
#: is most of a check's time): ``init_process_group("arborcc")`` after ``import
#: arborcc.torch`` with the ``arborcc`` loggers at INFO, an all-reduce (report: the backend
#: and the sum), then each kind of fallback three times on both ranks (report per round:
#: what gloo computed; a send and a receive: one rank each)
TWO_RANK_JOB = """
import logging
logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(levelname)s %(message)s")
dist.init_process_group("arborcc")
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
report({"backend": dist.get_backend(), "sum": float(t[0])})
for _ in range(3):
    a = torch.ones(8, dtype=torch.int8)
    dist.all_reduce(a, op=dist.ReduceOp.BAND)
    b = torch.ones(8, dtype=torch.int8)
    dist.all_reduce(b)
    c = torch.ones(8, dtype=torch.bool)
    dist.broadcast(c, src=0)
    out = torch.empty(3)
    dist.all_to_all_single(out, torch.arange(3.0), [1, 2] if rank == 0 else [2, 1], [1, 2] if rank == 0 else [2, 1])
    g = [torch.empty(4) for _ in range(2)] if rank == 0 else None
    dist.gather(torch.full((4,), float(rank)), g, dst=0)
    p = torch.full((4,), float(rank))
    if rank == 0:
        dist.send(p, 1)
    else:
        dist.recv(p, 0)
    report([float(a[0]), float(b[0]), bool(c[0]), float(p[0])])
dist.destroy_process_group()
"""
