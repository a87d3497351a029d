"""Writing files so that a failure leaves nothing behind (one helper for every writer)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from arborcc.errors import InputError


def write_text_atomically(path: str | os.PathLike, text: str, error: type[InputError] = InputError) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    An operating-system failure becomes ``error`` (an :class:`~arborcc.errors.InputError`
    subclass) naming the path; nothing is left behind.
    """
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise error(f"cannot write the file: {e.strerror or e}", source=str(path)) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
