"""DDP's communication hook on arborcc, for users who keep gloo (or NCCL) as their backend.

::

    model = DDP(model)                                   # on gloo
    model.register_comm_hook(arborcc.torch.hook_state(), arborcc.torch.allreduce_hook)

The hook does what DDP's default hook does - each gradient bucket divided by the world
size, then summed over the ranks - with the sum on an arborcc process group over the
same ranks (:func:`hook_state` makes it; ``dist.new_group(backend="arborcc")``).
"""

from __future__ import annotations


def hook_state(group=None):
    """The state :func:`allreduce_hook` needs: an arborcc process group over the ranks of
    ``group`` (default: every rank). Every rank must call it, as ``dist.new_group``."""
    import torch.distributed as dist

    from arborcc.torch.registration import register_backend

    register_backend()
    ranks = None if group is None else dist.get_process_group_ranks(group)
    return dist.new_group(ranks=ranks, backend="arborcc")


def allreduce_hook(state, bucket):
    """A DDP communication hook: the bucket's mean over the ranks of ``state`` (a process
    group from :func:`hook_state`), as a Future of the bucket's tensor."""
    import torch.distributed as dist

    tensor = bucket.buffer()
    tensor.div_(dist.get_world_size(state))
    work = dist.all_reduce(tensor, group=state, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
