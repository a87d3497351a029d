"""The compiler pipeline (GC3 sections 4-5), one pass per module:

trace (:mod:`arborcc.lang`) -> layout -> instructions -> instruction DAG -> fusion ->
global order -> thread blocks and channels -> synchronization -> check with steps cut
into pieces (falling back to unfused, then program order) -> IR (with instances).

Every pass is linear in the number of chunk operations (the order is one sort), so a
1024-rank ring all-reduce - two million operations - compiles in seconds rather than
the hour the public tool's recursive passes would take.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import arborcc.compiler.native as native
from arborcc.collector import collector_paused
from arborcc.compiler.dag import Dag, build_dag, reverse_depths
from arborcc.compiler.emit import build_algorithm
from arborcc.compiler.fusion import fuse_instructions, unfuse
from arborcc.compiler.instructions import KIND_NAME, InstrTable, lower_operations
from arborcc.compiler.layout import IB_INPUT, IB_OUTPUT, plan_layout
from arborcc.compiler.order import fifo_conflicting_fusions, fifo_consistent, global_order, repair_order, slot_safe
from arborcc.compiler.pieces import finishes_in_pieces
from arborcc.compiler.sync import emit_steps
from arborcc.compiler.threadblocks import assign_auto, assign_manual
from arborcc.ir.model import Algorithm
from arborcc.lang.buffers import INPUT, OUTPUT
from arborcc.lang.directives import ThreadblockPolicy


@dataclass
class CompileStats:
    """What the last compilation did and how long each pass took (seconds)."""

    operations: int = 0
    instructions: int = 0
    fused: int = 0
    nops: int = 0
    thread_blocks: int = 0
    reordered: bool = False  #: the priority order needed repairing for FIFO consistency
    unfused: int = 0  #: fusions undone: no FIFO-consistent order or no channel kept them
    #: the schedule in the global order did not finish with steps cut into pieces
    #: (:mod:`.pieces`): the compiler fell back, to it unfused or to program order - a
    #: version a search over programs should not prefer
    pieces_fallback: bool = False
    #: the fallback was program order, every fusion undone (unfused did not finish either)
    in_program_order: bool = False
    #: fusions the fallback undid (those of the schedule that did not finish)
    unfused_for_pieces: int = 0
    steps: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  #: wall time per pass
    cpu_seconds: dict[str, float] = field(default_factory=dict)  #: CPU time per pass
    kinds: dict[str, int] = field(default_factory=dict)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def _significant_buffers(prog) -> set[int]:
    """IR buffers holding the result at the end (the output, or what it aliases)."""
    sig = {IB_OUTPUT}
    if prog.resolve(0, OUTPUT, 0)[0] is INPUT:
        sig.add(IB_INPUT)
    return sig


_UNFUSE_ROUNDS = 8  #: rounds of undoing the fusions a repair got stuck at, before all


def _fifo_order(table: InstrTable, dag: Dag, stats: CompileStats) -> list[int]:
    """The global order, repaired for FIFO consistency if needed (:mod:`.order`).

    When no repaired order keeping every fusion is found, fusions are undone: first those
    that moved a send ahead of other messages of its pair (:func:`fifo_conflicting_fusions`),
    then, for a few rounds, those the scheduler got stuck at, then all - and program order,
    in which every message is received right after it was sent, is FIFO-consistent and
    slot-safe by construction.
    """
    order = global_order(table, dag)
    if fifo_consistent(table, order):
        return order
    stats.reordered = True
    stuck: list[int] = []
    repaired = repair_order(table, order, dag.pred_rows, stuck)
    if repaired is not None:
        return repaired
    undo = fifo_conflicting_fusions(table) + stuck
    for _ in range(_UNFUSE_ROUNDS):
        if not undo:
            break
        unfuse(table, set(undo))
        reverse_depths(table, dag, fused=True)
        order = global_order(table, dag)
        if fifo_consistent(table, order) and slot_safe(table, order):
            return order
        undo = []  # the fused instructions the scheduler got stuck at
        repaired = repair_order(table, order, dag.pred_rows, undo)
        if repaired is not None:
            return repaired
    unfuse(table, table.fused_receives())
    return [i for i, alive in enumerate(table.alive) if alive]


def _assign(prog, table: InstrTable, order: list[int], dag: Dag, manual: bool) -> native.Assignment:
    """Thread blocks and channels of ``order`` by the program's policy (:mod:`.threadblocks`)."""
    if manual:
        return assign_manual(table, order, prog.num_ranks, prog)
    return assign_auto(table, order, dag.pred_rows, prog.num_ranks)


def _finishing_schedule(prog, table: InstrTable, dag: Dag, manual: bool,
                        stats: CompileStats) -> tuple[native.Assignment, native.Schedule]:
    """Thread blocks and steps that finish with steps cut into pieces (:mod:`.pieces`), for
    a program whose schedule in the global order did not: every fusion undone and the
    global order again, else program order, which always finishes (:mod:`.pieces`)."""
    if table.fusion_count:
        unfuse(table, table.fused_receives())
        reverse_depths(table, dag, fused=True)
        order = _fifo_order(table, dag, stats)
        asg = _assign(prog, table, order, dag, manual)
        schedule = emit_steps(table, order, dag.pred_rows, asg)
        if finishes_in_pieces(schedule, asg, prog.protocol):
            return asg, schedule
    stats.in_program_order = True
    order = [i for i, alive in enumerate(table.alive) if alive]
    asg = _assign(prog, table, order, dag, manual)
    return asg, emit_steps(table, order, dag.pred_rows, asg)


#: what the passes read of a traced program (:class:`arborcc.lang.program.Program` has them)
TRACED_PROGRAM_ATTRIBUTES = ("name", "ops", "num_ranks", "collective", "instances", "protocol",
                             "threadblock_policy", "instr_fusion", "replication", "input_sizes",
                             "output_sizes", "buffer_names", "buffer_size", "resolve")


def compile_program(prog, stats: CompileStats | None = None) -> Algorithm:
    """Compile a traced program (an :class:`arborcc.lang.program.Program`, or anything with
    its :data:`TRACED_PROGRAM_ATTRIBUTES`) to an IR Algorithm.

    ``stats``, when given, receives what the run did and how long each pass took.
    """
    missing = [a for a in TRACED_PROGRAM_ATTRIBUTES if not hasattr(prog, a)]
    if missing:
        raise TypeError(f"compile_program needs a traced program; {prog!r} has no {', '.join(missing)}")
    with collector_paused():  # millions of acyclic allocations: see Program.__enter__
        return _compile(prog, stats if stats is not None else CompileStats())


def _compile(prog, stats: CompileStats) -> Algorithm:
    stats.operations = len(prog.ops)
    clock, cpu = time.perf_counter, time.process_time
    t0, c0 = clock(), cpu()

    def lap(name: str) -> None:
        nonlocal t0, c0
        now, cnow = clock(), cpu()
        stats.seconds[name] = now - t0
        stats.cpu_seconds[name] = cnow - c0
        t0, c0 = now, cnow

    layout = plan_layout(prog)
    table: InstrTable = lower_operations(prog, layout)
    lap("instructions")
    dag = build_dag(table, [layout.ir_sizes(r) for r in range(prog.num_ranks)])
    lap("dag")
    manual = prog.threadblock_policy is ThreadblockPolicy.manual
    if prog.instr_fusion:
        fuse_instructions(table, dag, _significant_buffers(prog), manual)
    fusions = table.fusion_count
    lap("fusion")
    # reverse depths of the fused DAG (fusion computed them before if it had to choose)
    if not dag.has_rdepth:
        reverse_depths(table, dag, fused=True)
    lap("depths")
    order = _fifo_order(table, dag, stats)
    lap("order")
    asg = _assign(prog, table, order, dag, manual)
    lap("threadblocks")
    schedule = emit_steps(table, order, dag.pred_rows, asg)
    lap("sync")
    if not finishes_in_pieces(schedule, asg, prog.protocol):
        stats.pieces_fallback, stats.unfused_for_pieces = True, table.fusion_count
        asg, schedule = _finishing_schedule(prog, table, dag, manual, stats)
    stats.nops = schedule.nops
    lap("pieces")
    algo = build_algorithm(prog, layout, asg, schedule)
    lap("emit")
    stats.instructions = len(table)
    stats.fused = table.fusion_count  # a fused send is the one dead instruction of its fusion
    stats.unfused = fusions - table.fusion_count
    stats.thread_blocks = algo.num_threadblocks
    stats.steps = algo.num_steps
    stats.kinds = {KIND_NAME[k]: v for k, v in enumerate(schedule.kinds) if v}
    return algo
