"""One process copying memory, by size: where the copies of a shared-memory collective
leave the caches (a core's L2 here: 2 MB) and what each way of copying costs.

    .venv/bin/python benchmarks/runtime/memory_copy.py [--sizes 256K 512K 1M 2M 4M 16M 64M 256M]

Rows: ``numpy.copyto`` (the C library's memcpy), the data plane's streaming-store copy
(AVX2 non-temporal stores, ``arborcc.runtime.native.copy``) and ``process_vm_readv`` of
this process's own memory (what cross-memory attach does for a peer's: pin the source
pages, then copy). Source and destination are separate buffers of the row's size, each
copied over and over (warm: as a collective's buffers in a training loop); median us
per copy and GB/s copied.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

import numpy as np

SIZES = [256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def main() -> int:
    from arborcc.sizes import size_argument
    import arborcc.runtime.native as native

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=size_argument, nargs="+", default=SIZES, help="bytes, with K/M suffixes")
    args = ap.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    pid = os.getpid()
    print(f"# {' '.join(['benchmarks/runtime/memory_copy.py'] + sys.argv[1:])}; load average before: {os.getloadavg()}; "
          f"streaming stores: {'AVX2' if native.HAVE_AVX2 else 'not available (plain copy)'}")
    print("| size | memcpy us | memcpy GB/s | streaming us | streaming GB/s | process_vm_readv us | "
          "process_vm_readv GB/s |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        src, dst = np.ones(size, np.uint8), np.zeros(size, np.uint8)
        local, remote = IoVec(dst.ctypes.data, size), IoVec(src.ctypes.data, size)
        ways = {
            "memcpy": lambda: np.copyto(dst, src),
            "streaming": lambda: native.copy(dst.ctypes.data, src.ctypes.data, size, True),
            "process_vm_readv": lambda: libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0),
        }
        reps = max(5, min(200, (1 << 30) // size))
        cells = []
        for copy in ways.values():
            for _ in range(3):
                copy()
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                copy()
                times.append(time.perf_counter() - t0)
            t = statistics.median(times)
            cells += [f"{t * 1e6:,.1f}", f"{size / t / 1e9:.1f}"]
        label = f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    print(f"# load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
