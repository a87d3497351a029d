"""Run a script on local ranks (subprocesses with a hard timeout) and
collect what each rank reported (one JSON value per ``report`` call)."""

from __future__ import annotations

import json
import os
import signal
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


#: the process the ranks of a job with :data:`PRELUDE` are forked from: it imports what the
#: prelude imports (torch's import is most of a rank's start), then forks one child per rank
#: with that rank's environment and its own output files, which runs the script as
#: ``__main__`` and exits as a script does (exit handlers included); it writes each rank's
#: exit status (minus the signal that killed it) to the last argument
FORK_SERVER = r"""
import json, os, runpy, sys
import torch, torch.distributed, arborcc.torch, arborcc.runtime
script, environments, folder, statuses = sys.argv[1:5]
children = []
for rank, env in enumerate(json.loads(open(environments).read())):
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(os.path.join(folder, f"rank{rank}.{name}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv, sys.path[0] = [script], os.path.dirname(script)  # as `python script` has them
        runpy.run_path(script, run_name="__main__")
        sys.exit(0)
    children.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
with open(statuses + ".tmp", "w") as f:
    json.dump(codes, f)
os.replace(statuses + ".tmp", statuses)
"""


def launch(tmp_path, nranks: int, body: str, hard_timeout: float = 150,
           env: dict | None = None, prelude: str = PRELUDE) -> tuple[int, dict[int, list], str]:
    """Run ``body`` after ``prelude`` on ``nranks`` local ranks (torchrun's environment;
    unlike ``arborcc run``, a failing rank does not stop the others, so each reports what
    it saw); (the first non-zero exit status or 0, each rank's reports, the ranks' stderr).
    With the default prelude the ranks are forked from :data:`FORK_SERVER`, which imported
    torch once for all of them; a job whose prelude is its own (what ``import torch`` loads,
    say) starts each rank as a new interpreter."""
    script = tmp_path / "job.py"
    script.write_text(prelude + textwrap.dedent(body))
    port = free_port_pair()
    base = {**os.environ, **(env or {})}
    environments = [rank_env(r, nranks, port, base) for r in range(nranks)]
    if prelude is PRELUDE:
        codes, outs, errs = _forked(tmp_path, script, environments, base, hard_timeout)
    else:
        codes, outs, errs = _started(script, environments, hard_timeout)
    said: dict[int, list] = {}
    for out in outs:
        for line in out.splitlines():
            if line.startswith("RANK") and ": " in line:
                rank, text = line[4:].split(": ", 1)
                said.setdefault(int(rank), []).append(json.loads(text))
    code = next((c for c in codes if c), 0)
    return code, said, "\n".join(errs)


def _forked(tmp_path, script, environments: list[dict], base: dict, hard_timeout: float):
    """(each rank's exit status, stdout, stderr), the ranks forked from :data:`FORK_SERVER`;
    past ``hard_timeout`` the server and every rank are killed (one process group)."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    (folder / "environments.json").write_text(json.dumps(environments))
    statuses = folder / "statuses.json"
    server = subprocess.Popen([sys.executable, "-c", FORK_SERVER, str(script), str(folder / "environments.json"),
                               str(folder), str(statuses)], cwd=ROOT, env=base, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        said, _ = server.communicate(timeout=hard_timeout)
    except BaseException:
        os.killpg(server.pid, signal.SIGKILL)  # the ranks too, whatever state they are in
        server.wait()
        raise
    n = len(environments)
    codes = json.loads(statuses.read_text()) if statuses.exists() else [server.returncode or -signal.SIGKILL] * n

    def read(name: str) -> str:
        return (folder / name).read_text(errors="replace") if (folder / name).exists() else ""

    errs = [read(f"rank{r}.err") for r in range(n)] + ([f"fork server: {said}"] if said else [])
    return codes, [read(f"rank{r}.out") for r in range(n)], errs


def _started(script, environments: list[dict], hard_timeout: float):
    """(each rank's exit status, stdout, stderr), each rank a new interpreter."""
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT, env=env) for env in environments]
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
    return [p.returncode for p in procs], outs, errs


#: one job of 2 ranks that several tests read (a job's start, torch's import in its fork server,
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
