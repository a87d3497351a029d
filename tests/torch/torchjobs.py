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
