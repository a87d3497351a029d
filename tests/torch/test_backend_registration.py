"""How a job gets the "arborcc" backend: ``dist.init_process_group("arborcc")`` after
``import arborcc.torch``, and after ``import torch`` alone through the ``torch.backends``
entry point of pyproject.toml; what the backend logs on the ``arborcc.torch`` logger."""

from __future__ import annotations

import os
import tomllib

import pytest

from torchjobs import ROOT, launch

ALL_REDUCE = """
dist.init_process_group("arborcc")
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
report({"backend": dist.get_backend(), "sum": float(t[0])})
dist.destroy_process_group()
"""


@pytest.mark.timeout(150)
def test_init_process_group_arborcc_works_after_importing_arborcc_torch(two_rank_job):
    """The shared job (torchjobs.TWO_RANK_JOB): ``init_process_group("arborcc")`` after
    ``import arborcc.torch`` (the import registers the backend, not the entry point, if
    installed), its first report."""
    code, said, err, left = two_rank_job
    assert code == 0, err[-3000:]
    assert left == set(), "an arborcc shared-memory segment was left in /dev/shm"
    assert [said[r][0] for r in range(2)] == [{"backend": "arborcc", "sum": 3.0}] * 2


def entry_point_site(tmp_path):
    """A folder for PYTHONPATH holding one installed distribution whose entry points are
    pyproject.toml's ``torch.backends`` group - what ``pip install`` of arborcc writes."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    points = project["entry-points"]["torch.backends"]
    info = tmp_path / "site" / "arborcc_entry_points-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: arborcc-entry-points\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return info.parent


#: a training script that knows nothing of arborcc but the backend's name
TORCH_ONLY = """
import json, os, sys
import torch
import torch.distributed as dist
loaded = sorted(m for m in sys.modules if m == "arborcc" or m.startswith("arborcc."))
rank = int(os.environ["RANK"])
def report(value):
    os.write(1, ("RANK%d: " % rank + json.dumps(value)).encode() + b"\\n")
report({"loaded by import torch": loaded})
"""

#: what ``import torch`` may load of arborcc: the registration and the packages above it
REGISTRATION_MODULES = {"arborcc", "arborcc.lazy", "arborcc.torch", "arborcc.torch.name",
                        "arborcc.torch.registration"}


@pytest.mark.timeout(150)
def test_import_torch_alone_registers_the_backend_through_the_entry_point(tmp_path):
    site = entry_point_site(tmp_path)
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
           "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    code, said, err = launch(tmp_path, 2, ALL_REDUCE, hard_timeout=120, env=env, prelude=TORCH_ONLY)
    assert code == 0, err[-3000:]
    for rank in range(2):
        (loaded, result) = said[rank]
        assert "arborcc.torch.registration" in loaded["loaded by import torch"]
        assert set(loaded["loaded by import torch"]) <= REGISTRATION_MODULES  # the hook stays cheap
        assert result == {"backend": "arborcc", "sum": 3.0}
    assert "Warning" not in err


@pytest.mark.timeout(150)
def test_every_rank_logs_its_group_and_its_fallbacks_at_info(two_rank_job):
    code, said, err, left = two_rank_job
    assert code == 0, err[-3000:]
    assert left == set(), "an arborcc shared-memory segment was left in /dev/shm"
    logged = [line for line in err.splitlines() if line.startswith("LOG ")]
    for rank in range(2):
        created = [line for line in logged if f"rank {rank}: arborcc group of 2 ranks on 1 host" in line]
        assert len(created) == 1 and created[0].startswith("LOG arborcc.torch.backend INFO"), logged
        assert "collectives on shared memory" in created[0]
        fallbacks = [line for line in logged if f"rank {rank}: all_reduce with op BAND on int8 tensors goes to gloo"
                     in line]
        # once per rank and kind, not once per call
        assert len(fallbacks) == 1 and fallbacks[0].startswith("LOG arborcc.torch.fallback INFO"), logged
