"""The doc test's reader of Markdown: what it runs, what it skips and why."""

from docblocks import steps_of

DOC = '''# A doc

Run `arborcc topo show --machine dgx1v --json` to see it, or `arborcc synth --collective` (an option named in prose).

| a | b |
|---|---|
| `arborcc demo` | the demo |
| `arborcc verify ALGO.xml [--json]` | a syntax summary |
| `x/` | `model.py`; `arborcc bench`: its modules |

<!-- doctest: skip-command arborcc bench: needs the runtime branch -->
<!-- doctest: setup arborcc compile ring-allreduce --ranks 4 -o old.xml -->

```
arborcc compile ring-allreduce --ranks 4 -o a.xml   # a comment
ring-allreduce: allreduce on 4 ranks, ... -> a.xml
arborcc bench a.xml
arborcc topo show --detect
```

<!-- doctest: skip takes an hour -->
```
arborcc synth --machine dgx2 --nodes 64
```

```console
$ arborcc show a.xml
a.xml: allreduce
```

<!-- doctest: file prog.py -->
```python
print("hi")
```

```
src/
  arborcc/   the package
```
'''


def test_what_the_doc_test_runs_and_skips(tmp_path):
    path = tmp_path / "doc.md"
    path.write_text(DOC)
    steps = [(s.kind, s.text.strip().splitlines()[0], s.expected, s.skip) for s in steps_of(path)]
    assert steps == [
        ("command", "arborcc topo show --machine dgx1v --json", [], None),
        ("command", "arborcc demo", [], None),
        ("setup", "arborcc compile ring-allreduce --ranks 4 -o old.xml", [], None),
        ("command", "arborcc compile ring-allreduce --ranks 4 -o a.xml",
         ["ring-allreduce: allreduce on 4 ranks, ... -> a.xml"], None),
        ("command", "arborcc bench a.xml", [], "needs the runtime branch"),
        ("command", "arborcc topo show --detect", [], "needs NVIDIA GPUs, which this machine does not have"),
        ("command", "arborcc synth --machine dgx2 --nodes 64", [], "takes an hour"),
        ("command", "arborcc show a.xml", ["a.xml: allreduce"], None),
        ("file", 'print("hi")', [], None),
    ]
