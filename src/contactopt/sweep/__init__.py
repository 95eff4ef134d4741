"""Sweeps: many closed-loop runs (seeds × grid points of ``--set`` keys) on a local process pool
or a Ray cluster, written one row per run to a resumable output file.

* :mod:`~contactopt.sweep.units` — :class:`Unit` (one run, named by task *reference*),
  :func:`plan_sweep`, :func:`run_unit` and the failure kinds (``fell``/``timeout``/``error: …``);
* :mod:`~contactopt.sweep.engines` — :func:`make_engine`: in-process, local pool, Ray;
* :mod:`~contactopt.sweep.output` — :class:`SweepOutput` (JSONL / parquet, each unit once);
* :mod:`~contactopt.sweep.runner` — :func:`run_sweep`, :func:`summarize`, :func:`plot_success`;
* :mod:`~contactopt.sweep.cli` — ``contactopt sweep``.

This package imports no Ray at import time; ``--ray`` needs ``pip install "contactopt[ray]"``.
"""

from .engines import InlineEngine, LocalPoolEngine, Lost, RayEngine, make_engine
from .output import SweepOutput, read_rows
from .runner import plot_success, run_sweep, summarize, summary_table
from .units import SweepPlan, Unit, parse_grid, plan_sweep, run_unit

__all__ = [
           "InlineEngine",
           "LocalPoolEngine",
           "Lost",
           "RayEngine",
           "SweepOutput",
           "SweepPlan",
           "Unit",
           "make_engine",
           "parse_grid",
           "plan_sweep",
           "plot_success",
           "read_rows",
           "run_sweep",
           "run_unit",
           "summarize",
           "summary_table",
]
