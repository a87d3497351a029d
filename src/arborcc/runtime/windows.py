"""Shared arrays: memory the communicator owns and every rank maps.

The analogue of NCCL's registered user buffers and of torch's symmetric memory
(``torch.distributed._symmetric_memory``): :meth:`Communicator.shared_array` hands out a
numpy array (``shared_tensor`` a torch tensor on the same memory) in a shared-memory
object that this rank creates and every peer maps. A collective whose send buffer lies
in such an array reads peers' blocks with plain loads from their mappings: no system
call and no page pinning per call, as cross-memory attach (``process_vm_readv``) needs
for caller-owned memory.

Allocation is collective: every rank allocates the same sizes in the same order. The
object's memory is reserved in /dev/shm when it is made (too little space is an error
that every rank reports, never a SIGBUS later). Its name
``/dev/shm/arborcc-<pid>-<communicator tag>w<id>`` is unlinked as soon as
every rank has mapped it (also when that fails), so nothing stays in ``/dev/shm``; the
memory is returned when every rank has freed the array (:meth:`SharedArrays.free`, or
closing the communicator) and dropped its last reference to it.
"""

from __future__ import annotations

import errno
import mmap
import os
from typing import NamedTuple

import numpy as np

from arborcc.runtime.errors import CommunicationError


class Window(NamedTuple):
    """One shared array of this rank: its id (the same on every rank) and where it is."""

    id: int
    address: int
    nbytes: int


class SharedArrays:
    """This rank's shared arrays; ``native`` maps the peers' (``map_window``)."""

    def __init__(self, native, name_prefix: str, tag: str, timeout: float):
        self._native = native
        self._prefix, self._tag = name_prefix, tag  #: peers' names: prefix + pid + "-" + tag + "w" + id
        self._timeout = timeout
        self._next_id = 0
        self.windows: list[Window] = []

    def allocate(self, nbytes: int) -> np.ndarray:
        """A new shared array of ``nbytes`` bytes (uint8, page-aligned), mapped by every rank."""
        wid = self._next_id
        self._next_id += 1
        suffix = f"-{self._tag}w{wid}"
        path = f"/dev/shm{self._prefix}{os.getpid()}{suffix}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.ftruncate(fd, nbytes)
                self._reserve(fd, nbytes)
                memory = mmap.mmap(fd, nbytes)  # MAP_SHARED; unmapped when the last array on it is gone
            finally:
                os.close(fd)
            array = np.frombuffer(memory, np.uint8)
            self._native.map_window(wid, array.ctypes.data, nbytes, self._prefix, suffix, self._timeout)
        finally:
            os.unlink(path)  # every rank has mapped it (or allocation failed)
        self.windows.append(Window(wid, array.ctypes.data, nbytes))
        return array

    def _reserve(self, fd: int, nbytes: int) -> None:
        """Give the array its memory in /dev/shm now: a page that tmpfs cannot give when it
        is first touched kills the process with SIGBUS. Too little space fails the
        communicator (every rank reports it) with the bytes needed and free."""
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):  # nothing to reserve with
                return
            if e.errno == errno.ENOSPC:
                import arborcc.runtime.native as data_plane

                why = data_plane.space_message(nbytes, f"a shared array of {nbytes} bytes", "")
            else:
                why = f"cannot reserve shared memory for a shared array of {nbytes} bytes: {e.strerror}"
            self._native.abort(why)
            raise CommunicationError(f"rank {self._native.rank}: {why}") from None

    def find(self, address: int, nbytes: int) -> tuple[int, int] | None:
        """(window id, byte offset) of the buffer ``[address, address + nbytes)`` if it lies
        in one of this rank's shared arrays, else None."""
        for w in self.windows:
            if w.address <= address and address + nbytes <= w.address + w.nbytes:
                return w.id, address - w.address
        return None

    def free(self, address: int) -> bool:
        """Forget the shared array that holds ``address`` (unmap the peers' arrays of that
        id); False if none does."""
        for w in self.windows:
            if w.address <= address < w.address + w.nbytes:
                self._native.unmap_window(w.id)
                self.windows.remove(w)
                return True
        return False

    def close(self) -> None:
        """Drop the data plane (it unmaps the peers' arrays when it goes); this rank's
        arrays stay valid while referenced."""
        self._native = None
        self.windows = []
