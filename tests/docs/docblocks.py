"""What the README and docs/ show a user to run, read from the Markdown at test time.

Every doc is a list of :class:`DocStep` in the order it is written:

* ``command``: a line of a fenced block (no language, ``sh``, ``bash``, ``console``)
  whose first line is a command (``arborcc``, ``make``, ``python``, ``pip``, ...; after
  any ``NAME=value`` assignments) - the block's other lines that are not commands are
  the output the doc shows for the command above them; or, in a block with ``$ ``
  prompts, the prompted lines (the others are output) - or an inline code
  span `` `arborcc ...` `` that is a whole command line: the whole cell of a table, or
  of five words or more in prose (``arborcc compile --inplace``, ``arborcc bench
  --backend mpi`` name a command or an option); spans with placeholders (``ALGO``, ``N``, ``[...]``,
  ``a|b``, ``...``) are syntax summaries and are not run;
* ``python``: a fenced ``python`` block, run as a script;
* ``file``: a fenced block after ``<!-- doctest: file NAME -->``, written to ``NAME``
  in the doc's working folder for the commands after it;
* ``topology``: a ``yaml``/``json`` block with ``arborcc_topology``, read as a topology;
  ``algorithm``: an ``xml`` block with ``<algo``, read and verified; ``nccl-xml``: one
  with ``<system``, read as an NCCL topology; ``data``: other yaml/json/xml, parsed;
* ``setup``: ``<!-- doctest: setup COMMAND -->``, a command run at that place that the
  rendered doc does not show (it makes an input a documented command names).

Commands that need what this machine lacks (GPUs, the network: :data:`REQUIREMENTS`)
are skipped with that reason wherever they appear. Markers, as HTML comments the
rendered doc does not show:
``<!-- doctest: skip REASON -->`` on the line before a fenced block skips its steps, and
``<!-- doctest: skip-command PREFIX: REASON -->`` anywhere in a doc skips that doc's
commands starting with ``PREFIX`` - both with the reason in the test report (for
commands that need GPUs or a network, or take minutes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND_WORDS = ("arborcc", "make", "python", "python3", "pip", "torchrun", "mpirun", "bash", "cd", "export",
                 "cat", "ls", "git", "curl", "wget")
#: commands this machine cannot run, found in any doc without a marker: (pattern, reason)
REQUIREMENTS = [
    (r"--detect\b|\bnvidia-smi\b|--backend[ =]nccl\b|--device[ =]cuda\b|\bcuda:\d",
     "needs NVIDIA GPUs, which this machine does not have"),
    (r"^pip3? install\b|^git clone\b|\bcurl\b|\bwget\b", "needs the network"),
]
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_INLINE = re.compile(r"(?<!`)`(arborcc [^`]+)`(?!`)")
_MARKER = re.compile(r"<!--\s*doctest:\s*(skip-command|skip|file|setup)\b\s*(.*?)\s*-->", re.S)
#: a token that stands for something the reader fills in: ALGO, ALGO.xml, N, [--json], a|b, ...
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.\w+)?$|[\[\]<>|]|\.\.\.|^/$")


@dataclass
class DocStep:
    doc: str  #: the doc's path relative to the repository
    line: int
    kind: str  #: command, python, file, topology, algorithm, nccl-xml, data, setup
    text: str  #: the command line, or the block's content
    name: str | None = None  #: a file step's file name
    expected: list[str] = field(default_factory=list)  #: output lines the doc shows
    skip: str | None = None  #: why it is not run

    @property
    def id(self) -> str:
        head = self.text.strip().splitlines()[0] if self.text.strip() else ""
        return f"{self.doc}:{self.line}:{self.kind}:{head[:60]}"


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def is_command_line(line: str) -> bool:
    """``arborcc ...``, ``make ...``, also after environment assignments (``ARBORCC_X=1 arborcc ...``)."""
    words = [w for w in line.split() if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", w)]
    return bool(words) and words[0] in COMMAND_WORDS


def is_runnable(command: str) -> bool:
    """A whole command line rather than a syntax summary (no placeholder tokens)."""
    return not any(_PLACEHOLDER.search(token) for token in command.split()[1:])


def steps_of(path: Path) -> list[DocStep]:
    text = path.read_text(encoding="utf-8")
    doc = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    line_of = _line_index(text)
    events: list[tuple[int, DocStep]] = []
    fenced: list[tuple[int, int]] = []
    skip_prefixes: list[tuple[str, str]] = []
    markers = list(_MARKER.finditer(text))
    for m in markers:
        kind, arg = m.group(1), " ".join(m.group(2).split())
        if kind == "skip-command":
            prefix, _, reason = arg.partition(":")
            skip_prefixes.append((prefix.strip(), reason.strip() or "marked skip-command"))
        elif kind == "setup":
            events.append((m.start(), DocStep(doc, line_of(m.start()), "setup", arg)))
    for m in _FENCE.finditer(text):
        fenced.append((m.start(), m.end()))
        lang, body = m.group(1).lower(), m.group(2)
        line = line_of(m.start())
        before = _marker_before(text, m.start(), markers)
        skip = before[1] or "marked skip" if before and before[0] == "skip" else None
        if before and before[0] == "file":
            events.append((m.start(), DocStep(doc, line, "file", body, name=before[1], skip=skip)))
            continue
        for step in _block_steps(doc, line, lang, body):
            step.skip = step.skip or skip
            events.append((m.start(), step))
    for m in _INLINE.finditer(text):
        if any(a <= m.start() < b for a, b in fenced):
            continue
        command = " ".join(m.group(1).split())
        if is_runnable(command) and (_is_table_cell(text, m) or len(command.split()) >= 5):
            events.append((m.start(), DocStep(doc, line_of(m.start()), "command", command)))
    events.sort(key=lambda e: e[0])
    steps = [step for _, step in events]
    seen: set[str] = set()
    for step in steps:
        if step.kind in ("command", "setup"):
            step.skip = step.skip or needs_what_is_missing(step.text)
        if step.kind == "command":
            for prefix, reason in skip_prefixes:
                if step.text.startswith(prefix):
                    step.skip = step.skip or reason
            if step.text in seen and not step.expected:
                step.skip = step.skip or "the same command runs earlier in this doc"
            seen.add(step.text)
    return steps


def _block_steps(doc: str, line: int, lang: str, body: str) -> list[DocStep]:
    lines = body.splitlines()
    if lang == "python":
        return [DocStep(doc, line + 1, "python", body)]
    if lang in ("yaml", "yml", "json"):
        return [DocStep(doc, line + 1, "topology" if "arborcc_topology" in body else "data", body, name=lang)]
    if lang == "xml":
        kind = "algorithm" if "<algo" in body else "nccl-xml" if "<system" in body else "data"
        return [DocStep(doc, line + 1, kind, body, name=lang)]
    if lang not in ("", "sh", "bash", "shell", "console"):
        return []
    prompt = any(raw.startswith("$ ") for raw in lines)
    code = [raw for raw in lines if raw.strip() and not raw.lstrip().startswith("#")]
    if not prompt and not (code and is_command_line(code[0])):
        return []  # a diagram, a tree, example messages: text, not something to run
    steps: list[DocStep] = []
    for k, raw in enumerate(lines):
        if not raw.strip() or (not prompt and raw.lstrip().startswith("#")):
            continue
        if prompt and raw.startswith("$ "):
            steps.append(DocStep(doc, line + 1 + k, "command", _strip_comment(raw[2:])))
        elif not prompt and is_command_line(raw):
            steps.append(DocStep(doc, line + 1 + k, "command", _strip_comment(raw)))
        elif steps:
            steps[-1].expected.append(raw.rstrip())  # the output the doc shows for the command above
    return steps


def needs_what_is_missing(command: str) -> str | None:
    """Why a command cannot run on this machine (it needs GPUs or the network), or None."""
    import shutil

    for pattern, reason in REQUIREMENTS:
        if re.search(pattern, command) and not (reason.startswith("needs NVIDIA") and shutil.which("nvidia-smi")):
            return reason
    return None


def _is_table_cell(text: str, m: re.Match) -> bool:
    """Whether the code span is the whole cell of a table row (``| `arborcc demo` | ...``)."""
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    row = text[line_start:line_end if line_end >= 0 else len(text)]
    if not row.lstrip().startswith("|"):
        return False
    before, after = text[line_start:m.start()], text[m.end():line_end if line_end >= 0 else len(text)]
    return before.rstrip().endswith("|") and after.lstrip().startswith("|")


def _strip_comment(command: str) -> str:
    """``arborcc x -o a.xml   # what it does`` -> ``arborcc x -o a.xml``."""
    return re.split(r"\s+#\s", command, maxsplit=1)[0].strip()


def _marker_before(text: str, pos: int, markers: list[re.Match]) -> tuple[str, str] | None:
    """The skip/file marker on the non-blank line right before ``pos``, if any."""
    head = text[:pos].rstrip()
    for m in markers:
        if m.end() == len(head) and m.group(1) in ("skip", "file"):
            return m.group(1), " ".join(m.group(2).split())
    return None


def _line_index(text: str):
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def line_of(pos: int) -> int:
        import bisect

        return bisect.bisect_right(starts, pos)

    return line_of


def all_steps() -> list[DocStep]:
    return [step for path in documents() for step in steps_of(path)]
