"""Choosing algorithms by simulation: the NCCL baseline (``nccl``), side-by-side
comparison of strategies (``compare``), and per-size tuning that writes MSCCL XML
plans (``instances``, ``search``, ``plan``)."""
