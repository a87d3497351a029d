"""The backend's name in torch.distributed: ``dist.init_process_group("arborcc")``."""

NAME = "arborcc"
