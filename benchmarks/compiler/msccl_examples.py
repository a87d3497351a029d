"""The public GC3 tools' example programs, run by the tool and by arborcc side by side.

For every program of ``examples/mscclang/`` (and ``simple/``) in a checkout of
microsoft/msccl-tools or Azure/msccl-tools, with the arguments in :data:`ARGUMENTS`:

* **tool**: the program run by the public tool (in the interpreter where it is
  installed), its exit status, and the verdict of its own ``Check()`` called right
  after the program's ``XML()`` (most programs never call it themselves);
* **verify tool file**: ``arborcc verify FILE --dialect D`` on what the tool printed
  (D: the dialect the file is written in);
* **arborcc**: the same program through ``arborcc.compat.msccl`` with only its imports
  changed (``from msccl.X`` -> ``from arborcc.compat.msccl.X``), its exit status or the
  error it names, the dialect ``XML()`` wrote, and ``arborcc verify`` on that file;
* **convert**: ``arborcc convert --dialect executor`` of each file the tool wrote
  (``--dialect legacy`` for a custom collective, which the executors cannot name) and
  the verdict on the converted file.

Nothing is fetched and nothing of the tools is imported here: point the script at
checkouts and interpreters you made (a throwaway virtualenv per tool, ``pip install
-e CHECKOUT``)::

    python benchmarks/compiler/msccl_examples.py \\
        --tool microsoft /tmp/msccl-tools /tmp/venv-mstools/bin/python \\
        --tool azure /tmp/azure-msccl-tools /tmp/venv-aztools/bin/python \\
        --out /tmp/msccl-examples

Prints one table (Markdown) and keeps every file and log under ``--out``. Exit status 0
whatever the verdicts (a report, not a test; ``tests/ir/test_msccl_interop.py`` checks
the shipped output files).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: arguments each example is run with (the ones the tools' READMEs and tests use, plus
#: the sizes the issue names); programs not listed run without arguments
ARGUMENTS: dict[str, list[str]] = {
    "allgather_a100_pcie.py": ["4 1", "8 1"],
    "allgather_allpairs.py": ["8 1"],
    "allgather_recursive_doubling.py": ["4 1", "8 1"],
    "allgather_ring.py": ["4 1 1", "4 1 2", "8 2 1"],
    "allreduce_1step.py": ["8 1"],
    "allreduce_a100_allpairs.py": ["8 1"],
    "allreduce_a100_allpairs_v2.py": ["8 1"],
    "allreduce_a100_multinode_allpairs.py": ["8 1"],
    "allreduce_a100_ncv4.py": ["4 1"],
    "allreduce_a100_ncv4_v2.py": ["4 1"],
    "allreduce_a100_pcie_hierarchical.py": ["8 1"],
    "allreduce_a100_recursive_doubling_halving.py": ["1 1"],
    "allreduce_a100_ring.py": ["4 1 1", "4 2 1", "8 4 2", "128 1 1"],
    "allreduce_binomial_tree.py": ["8 2 1"],
    "allreduce_dgx1.py": ["2 1"],
    "allreduce_ndv2.py": ["1"],
    "allreduce_recursive_doubling_halving.py": ["8 1"],
    "alltoall_a100_three_step.py": ["2 4 1"],
    "alltoall_a100_two_step.py": ["2 4"],
    "alltoall_allpairs.py": ["4 1", "8 1"],
    "alltonext_backward.py": ["2 1"],
    "alltonext_forward.py": ["2 1"],
    "hierarchical_allreduce.py": ["4 2 1"],
    "pipeline_a100_allpairs.py": ["8 1"],
    "pipeline_a100_ring.py": ["8 1 1"],
    "reducegather.py": ["8 2"],
    "reducescatter_allpairs.py": ["4", "8"],
    "simple/allgather_ring.py": [""],
    "simple/allreduce_ring.py": ["8 1"],
    "simple/custom_collective.py": [""],
}

#: run by the tool's interpreter: the program, with XML() followed by the tool's Check()
TOOL_DRIVER = r"""
import contextlib, runpy, sys
import msccl.language as language
path = sys.argv[1]
sys.argv = sys.argv[1:]
xml = language.XML
def xml_then_check():
    xml()
    with contextlib.redirect_stdout(sys.stderr):
        ok = language.Check()
    print(f"@@CHECK {bool(ok)}", file=sys.stderr, flush=True)
language.XML = xml_then_check
runpy.run_path(path, run_name="__main__")
"""

ALGO = re.compile(r"<algo\b.*?</algo>", re.S)
TIMEOUT = 1800


def _arborcc() -> list[str]:
    script = Path(sys.executable).parent / "arborcc"
    return [str(script)] if script.exists() else [sys.executable, "-m", "arborcc.cli.main"]


def _run(cmd: list[str], cwd: Path) -> tuple[str, str, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return "timeout", "", ""
    return str(p.returncode), p.stdout, p.stderr


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("@@")]
    return lines[-1].strip() if lines else ""


def _save(stdout: str, stem: Path) -> list[Path]:
    """Write each printed algorithm to STEM.xml, STEM_2.xml, ...; return the paths."""
    paths = []
    for n, doc in enumerate(ALGO.findall(stdout)):
        path = stem.with_name(stem.name + ("" if n == 0 else f"_{n + 1}") + ".xml")
        path.write_text(doc + "\n")
        paths.append(path)
    return paths


def _dialect(path: Path) -> str:
    head = path.read_text()[:1000].split(">", 1)[0]
    return "executor" if "outofplace=" in head and "minBytes=" in head else "legacy"


def _verdict(path: Path, cwd: Path) -> str:
    """``arborcc verify`` in the file's own dialect: exit status and the verdict line."""
    dialect = _dialect(path)
    rc, out, err = _run(_arborcc() + ["verify", str(path), "--dialect", dialect], cwd)
    line = _last_line(out + err).replace(f"{path}: ", "").replace(str(path), path.name)
    return f"{dialect}: exit {rc}: {line}"


def _convert(path: Path, cwd: Path) -> str:
    """``arborcc convert`` for the executors (for the legacy runtime: a custom collective,
    which the executors cannot name), then the verdict on the converted file."""
    target = "legacy" if 'coll="custom"' in path.read_text()[:1000] else "executor"
    out = path.with_name(path.stem + f".{target}.xml")
    rc, stdout, stderr = _run(_arborcc() + ["convert", str(path), "--dialect", target, "-o", str(out)], cwd)
    if rc != "0":
        return f"convert exit {rc}: {_last_line(stdout + stderr)}"
    return _verdict(out, cwd)


def _compat_copy(examples: Path, dst: Path) -> None:
    """The examples with only their imports changed to ``arborcc.compat.msccl``."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(examples, dst)
    for path in dst.rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"\bfrom msccl\.", "from arborcc.compat.msccl.", text)
        text = re.sub(r"^import msccl\b", "import arborcc.compat.msccl", text, flags=re.M)
        path.write_text(text)


def _cell(text: str, width: int = 170) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[:width - 3] + "..."


def run_tool(label: str, checkout: Path, python: str, out: Path) -> list[list[str]]:
    examples = checkout / "examples" / "mscclang"
    compat = out / f"{label}-arborcc-examples"
    _compat_copy(examples, compat)
    programs = sorted(p.relative_to(examples).as_posix() for p in examples.rglob("*.py")
                      if "mscclpp" not in p.relative_to(examples).parts)
    driver = out / "tool_driver.py"
    driver.write_text(TOOL_DRIVER)
    rows = []
    for program in programs:
        for args in ARGUMENTS.get(program, [""]):
            stem = f"{label}__{program[:-3].replace('/', '_')}" + (f"_{args.replace(' ', '_')}" if args else "")
            # the public tool
            rc, stdout, stderr = _run([python, str(driver), program, *args.split()], examples)
            (out / f"{stem}.tool.log").write_text(f"exit {rc}\n--- stdout without XML ---\n"
                                                  f"{ALGO.sub('', stdout).strip()}\n--- stderr ---\n{stderr}")
            checks = re.findall(r"@@CHECK (\w+)", stderr)
            files = _save(stdout, out / f"{stem}.tool")
            tool = (f"exit {rc}, {len(files)} XML" + (f", Check() {'/'.join(checks)}" if checks else "")
                    + ("" if rc == "0" else f": {_last_line(stderr)}"))
            tool_verdicts = "; ".join(_verdict(f, out) for f in files)
            converted = "; ".join(_convert(f, out) for f in files)
            # arborcc.compat.msccl
            rc, stdout, stderr = _run([sys.executable, program, *args.split()], compat)
            (out / f"{stem}.arborcc.log").write_text(f"exit {rc}\n--- stderr ---\n{stderr}")
            files = _save(stdout, out / f"{stem}.arborcc")
            notes = [ln.split(": note: ", 1)[1] for ln in stderr.splitlines() if ": note: " in ln]
            ours = (f"exit {rc}, {len(files)} XML" + ("" if rc == "0" else f": {_last_line(stderr)}")
                    + (f" (note: {notes[0]})" if notes else ""))
            our_verdicts = "; ".join(_verdict(f, out) for f in files)
            rows.append([label, program, args, tool, tool_verdicts, converted, ours, our_verdicts])
            print(" | ".join(_cell(c, 100) for c in rows[-1]), file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tool", nargs=3, action="append", required=True, metavar=("LABEL", "CHECKOUT", "PYTHON"),
                   help="a checkout of msccl-tools and the interpreter it is installed in")
    p.add_argument("--out", default="msccl-examples", help="new or empty folder for the files and logs")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    if out.exists() and any(out.iterdir()):
        p.error(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, checkout, python in args.tool:
        commit = subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        print(f"{label}: {checkout} at commit {commit or '?'}")
        rows += run_tool(label, Path(checkout), python, out)
    header = ["tool", "program", "args", "public tool: exit, XML, its Check()", "arborcc verify (tool's file)",
              "arborcc convert (tool's file), then verify",
              "arborcc.compat.msccl: exit, XML", "arborcc verify (arborcc's file)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(_cell(c, 10**6) for c in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
