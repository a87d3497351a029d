"""Every command and code block of README.md and docs/ runs as written.

The steps are read from the Markdown when the tests are collected
(:mod:`docblocks`), so a doc added or changed later is covered without touching this
file. Each doc runs in its own folder (empty but for links to the checkout's
examples/ and benchmarks/, which docs name from the checkout's root), its steps in the order written (a
command may use a file an earlier one wrote); running one step runs the doc's steps
before it first. A doc's folder and its steps' outcomes are the session's, shared by the
xdist workers (:mod:`support.shared_work`): a step runs once in a session, whichever
worker its doc's tests go to; a command that another test runs as well
(:data:`support.shared_commands.SHARED`), or that several docs show, runs once for all. A command must exit 0 and print every output line the doc shows
after it (``...`` in a shown line matches anything, a number any number). A doc marks what cannot run here
(``<!-- doctest: skip REASON -->``, ``<!-- doctest: skip-command PREFIX: REASON -->``),
and the reason appears in the test report.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from docblocks import ROOT, DocStep, all_steps
from support.shared_commands import SHARED, run_shared
from support.shared_work import exclusive, session_folder

STEPS = all_steps()
TIMEOUT = 240  # seconds per step: a hang guard, not a performance check
BIN = Path(sys.executable).parent


@dataclass
class Outcome:
    code: int
    output: str


class DocRun:
    """One doc's steps run in order in one folder; each step's outcome is kept in a file
    beside the folder, under a lock, so the session's workers share them."""

    def __init__(self, folder: Path, shared):
        self.folder = folder
        self.shared = shared  #: a command of :data:`SHARED` -> (exit status, stdout, stderr)
        self.outcomes = folder.with_name(folder.name + ".outcomes.json")
        self.lock = folder.with_name(folder.name + ".lock")

    def outcome(self, index: int) -> Outcome:
        with exclusive(self.lock):
            if not self.folder.exists():
                self.folder.mkdir()
                for shipped in ("examples", "benchmarks"):  # docs name them as seen from a checkout's root
                    (self.folder / shipped).symlink_to(ROOT / shipped, target_is_directory=True)
            done = {int(k): Outcome(*v) for k, v in json.loads(self.outcomes.read_text()).items()} \
                if self.outcomes.exists() else {}
            for k in range(index + 1):
                if k not in done and STEPS[k].doc == STEPS[index].doc and not STEPS[k].skip:
                    done[k] = self.run(STEPS[k])
                    self.outcomes.write_text(json.dumps({k: [o.code, o.output] for k, o in done.items()}))
            return done[index]

    def run(self, step: DocStep) -> Outcome:
        if step.kind == "command" and step.text.strip() in SHARED:  # another test or doc runs it too
            code, out, err = self.shared(step.text.strip())
            return Outcome(code, out + err)
        return run_step(step, self.folder)


@pytest.fixture(scope="session")
def doc_runs(tmp_path_factory):
    folder = session_folder(tmp_path_factory, "documented-steps")

    def get(doc: str) -> DocRun:
        return DocRun(folder / doc.replace("/", "_").replace(".", "_"),
                      lambda command: run_shared(tmp_path_factory, command))

    return get


def run_step(step: DocStep, folder: Path) -> Outcome:
    if step.kind == "file":
        (folder / step.name).write_text(step.text, encoding="utf-8")
        return Outcome(0, "")
    if step.kind in ("command", "setup"):
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
        proc = subprocess.run(["bash", "-c", step.text], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        return Outcome(proc.returncode, proc.stdout + proc.stderr)
    if step.kind == "python":
        script = folder / f"_block_line{step.line}.py"
        script.write_text(step.text, encoding="utf-8")
        proc = subprocess.run([sys.executable, script.name], cwd=folder, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        return Outcome(proc.returncode, proc.stdout + proc.stderr)
    return check_block(step, folder)


def check_block(step: DocStep, folder: Path) -> Outcome:
    """A data block: read the way arborcc reads such a file; a failure is exit 2 and its line."""

    suffix = {"json": ".json", "xml": ".xml"}.get(step.name or "", ".yaml")
    path = folder / f"_block_line{step.line}{suffix}"
    path.write_text(step.text, encoding="utf-8")
    try:
        if step.kind == "topology":
            from arborcc.topology.topofile import read_topology_file

            read_topology_file(path)
        elif step.kind == "nccl-xml":
            from arborcc.topology.nccl_xml import read_nccl_xml

            read_nccl_xml(path)
        elif step.kind == "algorithm":
            from arborcc.ir.load import load_algorithm
            from arborcc.verify import verify_algorithm

            report = verify_algorithm(load_algorithm(path))
            if not report.ok:
                return Outcome(1, str(report.violations[0]))
        elif suffix == ".json":
            json.loads(step.text)
        elif suffix == ".yaml":
            yaml.safe_load(step.text)
        else:
            import xml.dom.minidom

            xml.dom.minidom.parseString(step.text)
    except Exception as e:  # noqa: BLE001 - any failure to read it is the outcome
        return Outcome(2, f"{type(e).__name__}: {e}")
    return Outcome(0, "")


def shown_lines_missing(expected: list[str], output: str) -> list[str]:
    """The shown output lines no output line matches: blanks collapsed, ``...`` matching
    anything, and every number matching any number (times and sizes vary run to run)."""
    got = [_shape(line) for line in output.splitlines()]
    missing = []
    for want in expected:
        pattern = _shape(want).replace("[", "[[]").replace("...", "*")
        if not any(fnmatch.fnmatchcase(line, pattern) for line in got):
            missing.append(want)
    return missing


def _shape(line: str) -> str:
    return re.sub(r"\d+(?:[.,]\d+)*", "0", " ".join(line.split()))


@pytest.mark.parametrize("index", range(len(STEPS)), ids=[s.id for s in STEPS])
def test_documented_step_runs_as_written(index, doc_runs):
    step = STEPS[index]
    if step.skip:
        pytest.skip(f"{step.doc}:{step.line}: {step.skip}")
    outcome = doc_runs(step.doc).outcome(index)
    tail = "\n".join(outcome.output.strip().splitlines()[-5:])
    assert outcome.code == 0, f"{step.doc}:{step.line}: `{step.text.strip()[:200]}` exited {outcome.code}:\n{tail}"
    missing = shown_lines_missing(step.expected, outcome.output)
    assert not missing, f"{step.doc}:{step.line}: output lines the doc shows are missing: {missing}\n{tail}"


def test_the_docs_have_steps():
    """The extraction finds the README's command table and the docs' blocks (a broken
    reader must not pass by finding nothing)."""
    kinds = {(s.doc, s.kind) for s in STEPS}
    assert ("README.md", "command") in kinds
    assert ("docs/topology-format.md", "topology") in kinds
    assert sum(s.kind == "command" and not s.skip for s in STEPS) >= 10
