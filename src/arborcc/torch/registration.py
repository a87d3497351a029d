"""``"arborcc"`` as a torch.distributed backend name, registered three ways.

- ``import arborcc.torch`` registers it (as oneCCL's and UCC's bindings do);
- ``import torch`` registers it in every process where arborcc is installed, with no
  arborcc import in the script: torch calls the functions of the ``torch.backends``
  entry-point group at the end of its own import (``torch._import_device_backends``,
  unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), and arborcc's ``pyproject.toml`` names
  :func:`autoload` there;
- :func:`register_backend`, which ``arborcc.torch.init()`` and the DDP hook call.

This module is what every ``import torch`` runs, so it stays cheap: it imports nothing
beyond ``torch.distributed`` (which ``import torch`` has already imported when autoload
runs), defines no process group (:func:`create` loads :mod:`arborcc.torch.backend` when
a group is made) and changes nothing but torch's table of backends. It never breaks
``import torch``: an exception while registering becomes a warning (torch would turn it
into an ImportError of torch itself).
"""

from __future__ import annotations

import warnings

from arborcc.torch.name import NAME


def create(store, rank: int, size: int, timeout):
    """torch's constructor of an ``"arborcc"`` group (``register_backend``'s ``func``)."""
    from arborcc.torch.backend import process_group_class

    return process_group_class()(store, rank, size, timeout)


def register_backend() -> bool:
    """Make ``"arborcc"`` a torch.distributed backend for CPU tensors (idempotent); False
    where this torch has no torch.distributed (built without it)."""
    import torch.distributed as dist

    if not dist.is_available():
        return False
    if NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(NAME, create, devices=["cpu"])
    return True


def register_if_torch() -> None:
    """Register the backend where torch is installed; nothing where it is not (the torch
    parts of arborcc then fail when used, naming the missing package). Any other failure
    is a warning, never an exception: this runs inside ``import torch`` and ``import
    arborcc.torch``."""
    try:
        register_backend()
    except ModuleNotFoundError as e:
        if e.name != "torch":
            warn_failure(e)
    except Exception as e:  # noqa: BLE001 - see the docstring: never break an import
        warn_failure(e)


def warn_failure(error: BaseException) -> None:
    warnings.warn(f"arborcc: the torch.distributed backend 'arborcc' was not registered "
                  f"({type(error).__name__}: {error})", RuntimeWarning, stacklevel=2)


#: the ``torch.backends`` entry point (pyproject.toml): torch calls it at the end of ``import torch``
autoload = register_if_torch
