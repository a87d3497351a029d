"""Work done once per test session, shared by its xdist workers: a folder of the session
that every worker sees (each worker's base folder lies in it) and a lock on a file there,
so that the first worker to need a result makes it and the others wait for it and read
it (``pytest -n 2`` would otherwise make it in both)."""

from __future__ import annotations

import fcntl
import os
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")


def session_folder(tmp_path_factory, name: str) -> Path:
    """The folder ``name`` of this session, shared by its xdist workers, created on first use."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


@contextmanager
def exclusive(lock_file: Path):
    """Hold an exclusive lock on ``lock_file`` (created if missing) for the block: one
    process of the session at a time, whichever worker it is in."""
    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def once(tmp_path_factory, name: str, make: Callable[[], T]) -> T:
    """``make()``'s result, made once in the session by whichever worker asks first and
    read back (pickled) by the others, which wait for it; ``name`` names it in the
    session's folder. For a job that several tests check, wherever xdist sends them."""
    folder = session_folder(tmp_path_factory, "made-once")
    kept = folder / f"{name}.pickle"
    with exclusive(folder / f"{name}.lock"):
        if kept.exists():
            return pickle.loads(kept.read_bytes())
        result = make()
        kept.write_bytes(pickle.dumps(result))
        return result
