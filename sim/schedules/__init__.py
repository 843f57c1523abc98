"""Pipeline schedules as data: per-rank action lists in torch's grammar (schedules.md).

One module per schedule (GPipe, 1F1B, PipeDream-2BW, PipeDream, PipeMare, and the multi-stage
torch schedules Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV), a
registry, analysis functions (in-flight micro-batches, staleness, validation), torch's compute-only CSV
format and a step × rank grid. Never imports torch.
"""

from sim.schedules.action import COMPUTE_OPS, STEP, Action, Program
from sim.schedules.analysis import (
    check_deadlock_free,
    delay_steps,
    peak_in_flight,
    peak_in_flight_per_stage,
    validate_program,
)
from sim.schedules.base import VERSION_RULES, Schedule, ScheduleError, with_steps_every
from sim.schedules.csv_io import from_csv, to_csv, to_csv_string
from sim.schedules.dualpipe_v import DualPipeV
from sim.schedules.gpipe import GPipe
from sim.schedules.grid import format_grid, grid_table
from sim.schedules.interleaved_1f1b import Interleaved1F1B
from sim.schedules.interleaved_zero_bubble import InterleavedZeroBubble
from sim.schedules.looped_bfs import LoopedBFS
from sim.schedules.multi_stage import MultiStageSchedule
from sim.schedules.one_f_one_b import OneFOneB, one_f_one_b_order, unrolled_program
from sim.schedules.pipedream import PipeDream
from sim.schedules.pipedream_2bw import PipeDream2BW
from sim.schedules.pipemare import PipeMare
from sim.schedules.registry import (
    ALIASES,
    SCHEDULES,
    UnknownScheduleError,
    get_schedule,
    schedule_names,
)
from sim.schedules.zbv_zero_bubble import ZBVZeroBubble

__all__ = [
    "ALIASES",
    "COMPUTE_OPS",
    "DualPipeV",
    "SCHEDULES",
    "STEP",
    "Action",
    "GPipe",
    "Interleaved1F1B",
    "InterleavedZeroBubble",
    "LoopedBFS",
    "MultiStageSchedule",
    "OneFOneB",
    "PipeDream",
    "PipeDream2BW",
    "PipeMare",
    "Program",
    "Schedule",
    "ScheduleError",
    "UnknownScheduleError",
    "VERSION_RULES",
    "ZBVZeroBubble",
    "check_deadlock_free",
    "delay_steps",
    "format_grid",
    "from_csv",
    "get_schedule",
    "grid_table",
    "one_f_one_b_order",
    "peak_in_flight",
    "peak_in_flight_per_stage",
    "schedule_names",
    "to_csv",
    "to_csv_string",
    "unrolled_program",
    "validate_program",
    "with_steps_every",
]
