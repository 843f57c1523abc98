"""Reports of a simulation: Chrome-trace timelines, memory analyses, PNG plots, summary tables.

Timelines, plots and tables read an :class:`~sim.events.EventLog` or the sweep's results table and
nothing else, so they cannot disagree with the simulation; the run's provenance and resolved-config
reports (``outputs``, ``provenance``, ``resolved``) also read the prepared run they describe.
Files are written atomically.

The plotting functions are imported on first use, so ``import sim.report`` for a trace or a
table does not import matplotlib (the plot modules select its Agg backend when they load).
"""

from importlib import import_module
from typing import Any

from sim.report.chrome_trace import dumps_chrome_trace, to_chrome_trace, write_chrome_trace
from sim.report.memory import memory_timeline, peak_by_category, peak_by_device
from sim.report.tables import rank_results, summary_table

__all__ = [
    "dumps_chrome_trace",
    "memory_summary",
    "memory_timeline",
    "peak_by_category",
    "peak_by_device",
    "plot_gantt",
    "plot_max_model_per_policy",
    "plot_memory_per_gpu",
    "plot_memory_timeline",
    "plot_throughput",
    "plot_throughput_vs_size",
    "rank_results",
    "summary_table",
    "to_chrome_trace",
    "write_chrome_trace",
]

_LAZY = {
    "plot_gantt": "sim.report.gantt",
    "plot_memory_per_gpu": "sim.report.memory_plots",
    "plot_memory_timeline": "sim.report.memory_plots",
    "plot_throughput": "sim.report.plots",
    "memory_summary": "sim.report.memory_summary",
    "plot_max_model_per_policy": "sim.report.memory_summary",
    "plot_throughput_vs_size": "sim.report.memory_summary",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sim.report' has no attribute {name!r}")
