"""``arborcc bench``: nccl-tests' sweep on local ranks, arborcc's shared-memory runtime
beside gloo and MPICH. It sits above :mod:`arborcc.runtime` (which never imports it).

Modules in the order a sweep flows: ``protocol`` (the timing protocol every back-end
follows: barrier, one timed call, slowest rank, median), ``backends`` (the sweep on each
back-end: arborcc, gloo, MPICH through ``mpi`` under ``mpiexec``), ``memory_bandwidth``
(what memory speed allows: the machine's copy bandwidth and each call's compulsory
traffic), ``report`` (the table, JSON and plot), ``cli`` (what the command does with its
flags); ``demo_step`` (the demo's last stage: an algorithm run for real and benched next
to gloo).
"""
