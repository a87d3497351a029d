"""Commands that a doc shows and a test of its own checks as well, or that several docs
show, run once in the session (:func:`support.shared_work.once`) for all of them: the doc
test runs each step of a doc, and a test or another doc's step that runs the same command
reads the same outcome instead of starting it again.

Only commands that write nothing and read only the checkout belong here: where they run
(the checkout's root, or a doc's folder, whose ``examples/`` links to the checkout's)
makes no difference to them."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from support.shared_work import once

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TIMEOUT = 240  # seconds: a hang guard, not a performance check

#: docs/limits.md's compare at 128 ranks, whose NCCL-ring candidate traces more operations
#: than a user program may (tests/hardening/test_large_valid_inputs.py reads its table)
COMPARE_ON_16_DGX_A100_NODES = "arborcc compare --machine dgx-a100 --nodes 16 --strategies nccl-ring --sizes 1M"
#: the DDP example with the hook (README.md, docs/torch.md, tests/torch): 4 ranks, three trainings compared
DDP_EXAMPLE_WITH_HOOK = "arborcc run -n 4 examples/ddp_train.py --hook"

#: every strategy against NCCL on the README's allocation (README.md, docs/gpu.md, docs/simulator.md)
COMPARE_ON_THE_READMES_ALLOCATION = "arborcc compare --machine dgx1v --gpus 1,4,5,6 --collective allreduce --sizes 1K:1G"

SHARED = frozenset({COMPARE_ON_16_DGX_A100_NODES, DDP_EXAMPLE_WITH_HOOK, COMPARE_ON_THE_READMES_ALLOCATION})


def run_shared(tmp_path_factory, command: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``command`` (one of :data:`SHARED`), run by bash in
    the checkout's root with this interpreter's ``arborcc`` first on the PATH."""
    assert command in SHARED, command

    def run() -> tuple[int, str, str]:
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
        proc = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout, proc.stderr

    return once(tmp_path_factory, "command-" + hashlib.sha256(command.encode()).hexdigest()[:16], run)
