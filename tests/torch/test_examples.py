"""The README's PyTorch examples run and their equality checks pass: DDP on 4 ranks
(``arborcc run``, the backend arborcc, compared with gloo and with the hook: docs/torch.md's
command, whose outcome the doc test shares), and the
two-"host" job on loopback (two torchrun nodes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.shared_commands import run_shared
from torchjobs import ROOT


@pytest.mark.timeout(300)
def test_ddp_example_weights_equal_gloo(tmp_path_factory):
    """docs/torch.md's command, run once in the session for this test and the doc's."""
    code, out, err = run_shared(tmp_path_factory, "arborcc run -n 4 examples/ddp_train.py --hook")
    assert code == 0, out[-2000:] + err[-3000:]
    assert "weights equal within tolerance" in out
    for run in ("arborcc", "gloo", "gloo + arborcc hook"):
        assert f"\n{run} " in out


@pytest.mark.timeout(200)
def test_two_hosts_example(unused_tcp_port_pair):
    proc = subprocess.run([sys.executable, "examples/two_hosts.py", "--port", str(unused_tcp_port_pair)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "hosts (ranks): [[0, 1], [2, 3]]" in proc.stdout
    assert "collectives and DDP weights equal to gloo's" in proc.stdout


@pytest.fixture
def unused_tcp_port_pair():
    from arborcc.runtime.launch import free_port_pair

    return free_port_pair()
