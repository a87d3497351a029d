"""Files named by users: reading inputs within the size limit, writing outputs the way
shell tools do. One helper for every reader and every writer.

Reading (:func:`read_input_bytes`, :func:`read_input_text`): a directory, a missing or
unreadable file, a file over its size limit (:mod:`arborcc.limits`: ``input-bytes`` for
topologies, ``algorithm-bytes`` for algorithm files; checked while it is read, so also
for pipes such as ``/dev/stdin``) or text that is not UTF-8 is
one :class:`~arborcc.errors.InputError` naming the file.

Writing (:func:`write_output`), the same rules for every output flag (``-o``,
``--trees-png``, ...):

* ``-`` writes to standard output;
* a symbolic link is written through (the link stays, its target gets the content);
* a special file (a pipe, a device) and anything under ``/dev`` or ``/proc``
  (``/dev/stdout`` also when it is redirected to a file) is opened and written in place;
* a regular file is replaced atomically (a temporary file in the same folder, then a
  rename), so a failure leaves the old file or nothing; a new file gets the mode the
  umask gives (``0666 & ~umask``), a replaced one keeps its mode;
* missing folders are created; a directory, or a path under a file, is refused.

:func:`check_output_path` applies the refusals before any work starts, so a command
with a bad ``-o`` fails in a moment instead of after the synthesis;
:func:`check_output_folder` does the same for an output that is a folder of files
(``tune -o DIR``): an existing file or device there (``/dev/null``), ``-``, or a path
under a file is refused, a missing folder is created when the files are written.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from arborcc.errors import InputError
from arborcc.limits import limit

#: the name that means standard output
STDOUT = "-"


# ------------------------------------------------------------------------------ reading
def read_input_bytes(path: str | os.PathLike, error: type[InputError] = InputError,
                     size_limit: str = "input-bytes") -> bytes:
    """The bytes of the input file ``path``, refused (``error``) over the ``size_limit`` limit."""
    source = str(path)
    max_bytes = limit(size_limit).value
    try:
        if os.path.isdir(path):
            raise error("is a directory, not a file", source=source)
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
            if len(data) > max_bytes:
                try:
                    size = os.fstat(f.fileno()).st_size
                except OSError:
                    size = 0
                limit(size_limit).check(max(size, len(data)), source=source, error=error)
    except OSError as e:
        raise error(f"cannot read the file: {e.strerror or e}", source=source) from None
    return data


def read_input_text(path: str | os.PathLike, error: type[InputError] = InputError) -> str:
    """The UTF-8 text (a byte-order mark dropped) of the input file ``path``."""
    data = read_input_bytes(path, error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"not a UTF-8 text file ({e.reason} at byte {e.start})", source=str(path)) from None


# ------------------------------------------------------------------------------ writing
def check_output_path(path: str | os.PathLike, flag: str = "-o", error: type[InputError] = InputError) -> None:
    """Refuse an output path that can never be written (a directory, a folder that is a
    file) before any work is done; creates nothing."""
    if str(path) == STDOUT:
        return
    if str(path) == "":
        raise error("an empty path", source=flag)
    if os.path.isdir(path) or str(path).endswith(os.sep):
        raise error("is a directory; name a file", source=str(path))
    for parent in Path(os.path.realpath(path)).parents:
        if parent.exists():
            if not parent.is_dir():
                raise error(f"cannot create the folder: {parent} is a file", source=str(path))
            break


def check_output_folder(path: str | os.PathLike, flag: str = "-o", error: type[InputError] = InputError) -> None:
    """Refuse, before any work, a folder output that can never be written: ``-``, an
    existing file, device or pipe, a path under a file; creates nothing."""
    text = str(path)
    if text == "":
        raise error("an empty path", source=flag)
    if text == STDOUT:
        raise error("this output is a folder of files, not a stream: name a folder", source=flag)
    if os.path.exists(path) and not os.path.isdir(path):
        raise error("is not a folder (this output is a folder of files: name a new or existing folder)",
                    source=text)
    for folder in (Path(os.path.realpath(path)), *Path(os.path.realpath(path)).parents):
        if folder.exists():
            if not folder.is_dir():
                raise error(f"cannot create the folder: {folder} is a file", source=text)
            if not os.access(folder, os.W_OK | os.X_OK):
                raise error(f"cannot write into the folder {folder}: permission denied", source=text)
            break


def write_output(path: str | os.PathLike, content: str | bytes, error: type[InputError] = InputError) -> None:
    """Write ``content`` to ``path`` by the rules of the module doc; failures are ``error``
    naming the path."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    if str(path) == STDOUT:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    check_output_path(path, error=error)
    source = str(path)
    try:
        mode = os.stat(path).st_mode  # follows symbolic links
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise error(f"cannot write the file: {e.strerror or e}", source=source) from None
    target = Path(os.path.realpath(path))  # through symbolic links, to what they name
    if mode is not None and (not stat.S_ISREG(mode) or _is_device_path(path) or _is_device_path(target)):
        _write_in_place(Path(path), data, source, error)  # /dev/stdout (even redirected to a file), a pipe
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise error(f"cannot create the folder: {e.strerror or e}", source=source) from None
    _replace_atomically(target, data, mode, source, error)


def is_stream(path: str | os.PathLike | None) -> bool:
    """Whether writing ``path`` prints (None, ``-``, ``/dev/stdout``, a pipe, a device) rather
    than making a file: a command then keeps its own report off standard output."""
    if path is None or str(path) == STDOUT or _is_device_path(path):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _is_device_path(path: str | os.PathLike) -> bool:
    """A name for an open file or device (``/dev/stdout``, ``/proc/self/fd/1``): written in place."""
    return os.path.abspath(path).startswith(("/dev/", "/proc/"))


def _write_in_place(target: Path, data: bytes, source: str, error: type[InputError]) -> None:
    try:
        with open(target, "wb") as f:
            f.write(data)
    except OSError as e:
        raise error(f"cannot write the file: {e.strerror or e}", source=source) from None


def _replace_atomically(target: Path, data: bytes, mode: int | None, source: str, error: type[InputError]) -> None:
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, stat.S_IMODE(mode) if mode is not None else 0o666 & ~current_umask())
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise error(f"cannot write the file: {e.strerror or e}", source=source) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def current_umask() -> int:
    """The process's umask (reading it means setting it; it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def suffix_mismatch(path: str | os.PathLike, fmt: str, suffixes: dict[str, str]) -> str | None:
    """A warning when the output ``path``'s suffix names another format than ``fmt``
    (``suffixes`` maps ``.yaml`` -> ``yaml``); None when they agree or the suffix is unknown."""
    if str(path) == STDOUT:
        return None
    named = suffixes.get(Path(path).suffix.lower())
    if named is None or named == fmt:
        return None
    return f"{path}: writing {fmt} into a file whose suffix says {named}"
