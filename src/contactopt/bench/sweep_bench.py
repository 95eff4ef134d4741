"""``contactopt bench sweep``: throughput of the sweep engine, 2 workers against 1, and its per-unit overhead.

The units are closed-loop runs of the pendulum example (iLQG, a fixed lag of 20 ms, so each run
is deterministic and CPU-bound) of ``SECONDS`` simulated seconds, one per seed (``--seeds N``,
default 8).  Three timings, in this order, in one run:

* ``direct``: :func:`contactopt.mpc.task_runner.run_task` called here, single-threaded, per unit;
* ``pool1`` / ``pool2``: the same units on the local process pool with 1 and 2 workers (each
  started and warmed up first: start-up is reported apart, ``startup_s``).

``speedup_2_vs_1 = wall(pool1) / wall(pool2)``; ``overhead_s_per_unit = wall(pool1) / N −
mean(direct)``, also as a percentage of a 5 s run (the direct wall time per simulated second × 5).
``cores_used`` is the workers' CPU seconds per wall second (how many cores the sweep got: on a
loaded machine, the speedup is bounded by it).  ``same_results`` says whether every unit's final metric agrees across the three.  The machine is
shared: the 1-minute load average is reported with the numbers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from . import Benchmark, register_benchmark

__all__ = ["run", "table"]

SECONDS = 2.0
LAG = 0.02
PENDULUM = Path(__file__).resolve().parents[3] / "examples" / "pendulum" / "pendulum_task.py"


def _loadavg():
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _timed_pool(workers: int, units) -> tuple[float, float, dict]:
    """``(startup_s, wall_s, {seed: row})`` of ``units`` on a fresh pool of ``workers``."""
    from ..sweep.engines import LocalPoolEngine
    from ..sweep.units import run_unit

    with LocalPoolEngine(workers) as engine:
        t0 = time.perf_counter()
        engine.warm_up()
        t1 = time.perf_counter()
        rows = {u.seed: row for u, row, _ in engine.imap_unordered(run_unit, units)}
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, rows


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None, seeds: int = 8) -> dict:
    """Time the sweep engine (see the module docstring).

    Args:
      models: unused (must be None).
      seeds: number of units (a count; ``--seeds N``).

    Returns:
      ``{"units", "seconds", "direct_s_per_unit", "pool1_s", "pool2_s", "startup_s": {"pool1", "pool2"},
      "speedup_2_vs_1", "overhead_s_per_unit", "overhead_pct_of_5s_run", "same_results",
      "cores_used": {"pool1", "pool2"}, "cpu_count",
      "loadavg_1min": {"start", "end"}}`` (wall seconds).
    """
    from ..errors import ParameterError
    from ..mpc.task_runner import run_task
    from ..sweep.engines import THREAD_ENV
    from ..sweep.units import plan_sweep
    from ..task import load_task_file

    if models:
        raise ParameterError("bench sweep runs the pendulum example; it takes no --model")
    n = int(seeds)
    if n < 1:
        raise ParameterError(f"--seeds must be >= 1, got {seeds}")
    plan = plan_sweep(str(PENDULUM), seeds=range(n), seconds=SECONDS, lag=LAG)
    load_start = _loadavg()
    task = load_task_file(str(PENDULUM))
    saved = os.environ.get("CONTACTOPT_NUM_THREADS")
    os.environ["CONTACTOPT_NUM_THREADS"] = THREAD_ENV["CONTACTOPT_NUM_THREADS"]  # single-threaded, as a worker
    try:
        run_task(task, "ilqg", seed=0, seconds=0.1, lag=LAG)  # compiled kernels loaded before timing
        direct, direct_metric = [], {}
        for u in plan.units:
            t0 = time.perf_counter()
            report = run_task(task, "ilqg", seed=u.seed, seconds=SECONDS, lag=LAG).report
            direct.append(time.perf_counter() - t0)
            direct_metric[u.seed] = report["final_cost"]
    finally:
        if saved is None:
            os.environ.pop("CONTACTOPT_NUM_THREADS", None)
        else:
            os.environ["CONTACTOPT_NUM_THREADS"] = saved
    start1, wall1, r1 = _timed_pool(1, plan.units)
    start2, wall2, r2 = _timed_pool(2, plan.units)
    m1, m2 = ({s: r["metric"] for s, r in rows.items()} for rows in (r1, r2))
    per_unit = sum(direct) / n
    overhead = wall1 / n - per_unit
    return {
        "units": n, "seconds": SECONDS, "lag": LAG,
        "direct_s_per_unit": round(per_unit, 4), "pool1_s": round(wall1, 3), "pool2_s": round(wall2, 3),
        "startup_s": {"pool1": round(start1, 2), "pool2": round(start2, 2)},
        "speedup_2_vs_1": round(wall1 / wall2, 3),
        "overhead_s_per_unit": round(overhead, 4),
        "overhead_pct_of_5s_run": round(100 * overhead / (per_unit / SECONDS * 5.0), 2),
        "same_results": m1 == m2 == direct_metric,
        # CPU seconds the workers got per wall second: the cores the sweep actually had
        "cores_used": {"pool1": round(sum(r["cpu_s"] for r in r1.values()) / wall1, 2),
                       "pool2": round(sum(r["cpu_s"] for r in r2.values()) / wall2, 2)},
        "cpu_count": os.cpu_count(), "loadavg_1min": {"start": load_start, "end": _loadavg()},
    }


def table(result: dict) -> str:
    """The numbers as text."""
    r = result
    la = r["loadavg_1min"]
    return "\n".join([
        f"{r['units']} units: pendulum + iLQG, {r['seconds']:g} s simulated, fixed lag {r['lag']:g} s",
        f"direct run_task        {r['direct_s_per_unit']:.3f} s per unit",
        f"pool, 1 worker         {r['pool1_s']:.2f} s  (start-up {r['startup_s']['pool1']:.1f} s, not counted)",
        f"pool, 2 workers        {r['pool2_s']:.2f} s  (start-up {r['startup_s']['pool2']:.1f} s, not counted)",
        f"speedup 2 vs 1         {r['speedup_2_vs_1']:.2f}x",
        (f"overhead per unit      {r['overhead_s_per_unit'] * 1e3:.0f} ms = {r['overhead_pct_of_5s_run']:.1f}% "
         f"of a 5 s run"),
        f"cores used (CPU s/wall s) 1 worker {r['cores_used']['pool1']:.2f}, 2 workers {r['cores_used']['pool2']:.2f}",
        f"same results           {r['same_results']}",
        (f"{r['cpu_count']} cores; 1-min load average {la['start']} at start, {la['end']} at end "
         f"(other processes included)"),
    ])


register_benchmark(Benchmark(
    name="sweep",
    description="sweep engine: throughput of 2 workers vs 1 and per-unit overhead vs a direct run (--seeds N units)",
    run=run,
    table=table,
    options=("seeds",),
))
