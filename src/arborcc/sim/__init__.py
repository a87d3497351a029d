"""Predicting an algorithm's time on a topology: an event-driven simulator of the MSCCL
runtimes (:mod:`.simulate`, :mod:`.engine`) calibrated on NCCL's published figures
(:mod:`.fidelity`, ``docs/fidelity.md``), plus the steady-state bandwidth model
(:mod:`.bandwidth`) and the papers' closed-form models."""
