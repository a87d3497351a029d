"""The Work objects a torch.distributed backend returns, and the thread that runs the
calls made with ``async_op=True``.

A call runs at once on the calling thread unless torch asked for an asynchronous one
(``opts.asyncOp``, which ``dist.all_reduce(..., async_op=True)`` and DDP's reducer set);
those run in order on one worker thread, and a later synchronous call waits for them
first, so every rank's communicator sees its calls in program order. The Work of an
asynchronous call completes with the call's output tensors (or its error), which is what
DDP's hooks chain on (``get_future().then(...)``); a synchronous call that ran inline
returns one shared completed Work (torch's wrappers only wait on it).
"""

from __future__ import annotations

import queue
import threading


def new_future():
    """An empty torch future (the C class: a tenth of the Python wrapper's cost)."""
    import torch

    return torch._C.Future([])


def completed_work(result):
    """A Work that is already done, its future holding ``result``."""
    from torch._C._distributed_c10d import _create_work_from_future

    fut = new_future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class CallQueue:
    """Runs calls in program order: inline when synchronous and nothing is queued,
    otherwise on one daemon worker thread."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.queued = 0
        self.lock = threading.Lock()
        self.worker: threading.Thread | None = None
        self.done = completed_work([])  #: the completed Work every synchronous inline call returns

    def submit(self, fn, result, async_op: bool, *args):
        """Run ``fn(*args)``; a Work whose future completes with ``result`` once it has run."""
        if not async_op and self.queued == 0:  # only this thread queues calls: no race with a new one
            fn(*args)
            return self.done  # torch's synchronous wrappers only wait on it
        from torch._C._distributed_c10d import _create_work_from_future

        with self.lock:
            self.queued += 1
        fut = new_future()
        if self.worker is None:
            self.worker = threading.Thread(target=self._serve, name="arborcc-calls", daemon=True)
            self.worker.start()
        self.jobs.put((fn, args, result, fut))
        work = _create_work_from_future(fut)
        if not async_op:
            work.wait()
        return work

    def drain(self) -> None:
        """Wait until every queued call has run."""
        done = threading.Event()
        with self.lock:
            if self.queued == 0:
                return
            self.queued += 1
        self.jobs.put((done.set, (), None, None))
        done.wait()

    def _serve(self) -> None:
        while True:
            fn, args, result, fut = self.jobs.get()
            try:
                fn(*args)
            except BaseException as e:  # the Work's waiter raises it
                if fut is not None:
                    fut.set_exception(e)
            else:
                if fut is not None:
                    fut.set_result(result)
            finally:
                with self.lock:
                    self.queued -= 1
