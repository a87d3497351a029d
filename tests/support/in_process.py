"""``arborcc ARGS`` run inside the test process: the ``main`` the console script calls,
without a new interpreter's imports (1-2 s a run). For a test's setup (compiling the file
a refusal test then corrupts) and for behaviour that needs no process of its own; a check
of the exit status, the one line on stderr, the peak memory or a signal runs the real
process (:mod:`support.cli_runs`). Paths must be absolute: the test's folder is not the
current one."""

from __future__ import annotations


def arborcc_in_process(*args: str) -> int:
    """The exit status ``arborcc ARGS`` returns, run by ``arborcc.cli.main.main`` in this process."""
    from arborcc.cli.main import main

    return main(list(args))
