"""``contactopt bench noise``: how noisy this machine's timings are right now.

The yardstick of the other benchmarks (``mj_step`` on one thread) timed against itself in
interleaved blocks (:func:`~contactopt.bench.timing.paired_ratio`): the ratio should be
1.00, and its interquartile range is the spread any ratio measured now inherits.  Run it
before trusting a number, and beside a benchmark whose ratio you report.
"""

from __future__ import annotations

import mujoco

from . import Benchmark, format_table, register_benchmark
from .timing import DEFAULT_REPEATS, check_repeats, load_average, paired_ratio

__all__ = ["run", "table"]


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None,
        repeats: int = DEFAULT_REPEATS) -> dict:
    """Time ``mj_step`` of each model (default: the humanoid) against itself.

    Returns:
      ``{"rows": [{"model", "step_us", "ratio_median", "ratio_iqr", "repeats"}], "threads": 1,
      "loadavg_1min": {"start", "end"}}``; ``step_us`` is the median µs per step.
    """
    from ..model import load_model, model_name

    repeats = check_repeats(repeats)
    start = load_average()
    rows = []
    for name in list(models) if models else ["humanoid"]:
        m = load_model(name)
        da, db = mujoco.MjData(m), mujoco.MjData(m)
        for d in (da, db):
            mujoco.mj_resetData(m, d)
            if m.nkey:
                mujoco.mj_resetDataKeyframe(m, d, 0)

        def step(d, m=m):
            mujoco.mj_step(m, d)
            if d.time > 2.0:  # stay in the same regime (a settled pose), not a drift over the run
                d.time = 0.0

        pair = paired_ratio(lambda da=da: step(da), lambda db=db: step(db), repeats=repeats,
                            block_time=max(min_time / 4, 0.02))
        rows.append({"model": model_name(m), "step_us": 1e6 * float(sorted(pair.b)[len(pair.b) // 2]),
                     "ratio_median": pair.median, "ratio_iqr": list(pair.iqr), "repeats": pair.repeats})
    return {"rows": rows, "threads": 1, "loadavg_1min": {"start": start, "end": load_average()}}


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def table(result: dict) -> str:
    """One line per model: µs per step and the self-ratio ``median [q25–q75]``."""
    rows = [dict(r, spread=f"{r['ratio_median']:.3f} [{r['ratio_iqr'][0]:.3f}-{r['ratio_iqr'][1]:.3f}]")
            for r in result["rows"]]
    load = result["loadavg_1min"]
    return (format_table(rows, [("model", "model", "{}"), ("step_us", "mj_step µs", "{:.1f}"),
                                ("spread", "self-ratio median [IQR]", "{}"), ("repeats", "pairs", "{}")])
            + f"\none thread; 1-minute load average {_num(load['start'])} at start, {_num(load['end'])} at end; a ratio "
              "measured now is uncertain by about this spread")


register_benchmark(Benchmark("noise", "the yardstick timed against itself: how noisy timings are now",
                             run, table, ("repeats",)))
