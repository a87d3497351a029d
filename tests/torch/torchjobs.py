"""Run a script on local ranks (``arborcc run``, a subprocess with a hard timeout) and
collect what each rank reported (one JSON value per ``report`` call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from arborcc.runtime.communicator import SEGMENT_PREFIX

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


def shm_segments() -> set[str]:
    return {e for e in os.listdir("/dev/shm") if e.startswith(SEGMENT_PREFIX)}


def launch(tmp_path, nranks: int, body: str, hard_timeout: float = 150,
           env: dict | None = None) -> tuple[int, dict[int, list], str]:
    """Run ``body`` on ``nranks`` ranks; (exit status, each rank's reports, stderr)."""
    script = tmp_path / "job.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    proc = subprocess.run([sys.executable, "-m", "arborcc.cli.main", "run", "-n", str(nranks), "--timeout",
                           str(hard_timeout - 15), str(script)], capture_output=True, text=True,
                          timeout=hard_timeout, cwd=ROOT, env={**os.environ, **(env or {})})
    said: dict[int, list] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RANK") and ": " in line:
            rank, text = line[4:].split(": ", 1)
            said.setdefault(int(rank), []).append(json.loads(text))
    return proc.returncode, said, proc.stderr
