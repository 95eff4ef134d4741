"""Run a checked sweep on an engine into its output file; summarize and plot the rows."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ..progress import progress_bar
from .engines import Lost
from .output import SweepOutput
from .units import SweepPlan, run_unit

__all__ = ["plot_success", "run_sweep", "summarize", "summary_table"]


def _lost_row(unit, lost: Lost) -> dict:
    """The row of a unit whose worker died on every attempt (re-run by the next resume)."""
    return {**unit.describe(), "success": False, "time_to_success": None, "metric": None, "update_ms_median": None,
            "policy_lag_ms": None, "mode": None, "failure": f"error: worker lost: {lost.message}", "lost": True,
            "wall_s": None, "cpu_s": None, "trajectory": None}


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def run_sweep(plan: SweepPlan, output: SweepOutput, engine, *, progress: bool | None = None, run=run_unit,
              lost_row=_lost_row, desc: str = "sweep") -> dict:
    """Run the units of ``plan`` not yet in ``output`` on ``engine``.

    Each finished unit's row (``run(unit)``: by default :func:`contactopt.sweep.units.run_unit`, one
    closed-loop run; :func:`contactopt.offline.run_offline_unit` for offline solves — plus ``worker``,
    ``node`` and ``attempts`` from the engine) is appended to ``output`` at once; the output is rewritten
    atomically at the end, also when interrupted (Ctrl-C loses only the units in flight).  Units
    whose row says ``lost`` (their worker died on every attempt; ``lost_row(unit, Lost)`` makes it)
    are run again.  ``plan`` needs only ``units`` (each with ``id``); ``desc`` labels the progress bar.

    Returns:
      ``{"rows": [row per unit of the plan, plan order], "skipped": units found in the output,
      "ran": units run now, "wall_s": wall seconds of the run, "units_per_s": units run per wall
      second, "engine": name, "workers": int, "loadavg_1min": {"start", "end"}}``.
    """
    done = output.existing()
    todo = [u for u in plan.units if u.id not in done or done[u.id].get("lost")]
    skipped = len(plan.units) - len(todo)
    load_start = _loadavg()
    t0 = time.perf_counter()
    ran = 0
    try:
        with progress_bar(total=len(todo), desc=desc, unit="run", enable=progress, piped_lines=True) as bar:
            if todo:
                for unit, value, meta in engine.imap_unordered(run, todo):
                    row = lost_row(unit, value) if isinstance(value, Lost) else dict(value)
                    row.update({"worker": meta.get("worker"), "node": meta.get("node"),
                                "attempts": meta.get("attempts")})
                    output.append(row)
                    ran += 1
                    bar.update(1)
    finally:
        rows = output.finalize([u.id for u in plan.units])
    wall = time.perf_counter() - t0
    by_id = {r["id"]: r for r in rows}
    return {"rows": [by_id[u.id] for u in plan.units if u.id in by_id], "skipped": skipped, "ran": ran,
            "wall_s": round(wall, 3), "units_per_s": round(ran / wall, 4) if ran and wall > 0 else None,
            "engine": engine.name, "workers": engine.workers,
            "loadavg_1min": {"start": load_start, "end": _loadavg()}}


def summarize(rows: list[dict], axes) -> list[dict]:
    """One summary row per grid point: ``{grid key: value, ..., "runs", "successes", "success_rate",
    "time_to_success_median" (s), "update_ms_median" (ms), "failures": {kind: count}}``."""
    keys = [k for k, _ in axes]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        point = tuple(row["grid"].get(k) for k in keys)
        groups.setdefault(point, []).append(row)
    out = []
    for point, members in groups.items():
        tts = [r["time_to_success"] for r in members if r.get("success") and r.get("time_to_success") is not None]
        ms = [r["update_ms_median"] for r in members if r.get("update_ms_median") is not None]
        failures: dict[str, int] = {}
        for r in members:
            if r.get("failure"):
                failures[r["failure"]] = failures.get(r["failure"], 0) + 1
        n_ok = sum(bool(r.get("success")) for r in members)
        out.append({**dict(zip(keys, point)), "runs": len(members), "successes": n_ok,
                    "success_rate": n_ok / len(members),
                    "time_to_success_median": float(np.median(tts)) if tts else None,
                    "update_ms_median": float(np.median(ms)) if ms else None, "failures": failures})
    return out


def summary_table(summary: list[dict], axes) -> str:
    """The summary rows as an aligned text table (error messages cut at 60 characters)."""
    from ..bench import format_table

    rows = []
    for r in summary:
        fails = ", ".join(f"{k if len(k) <= 60 else k[:57] + '...'}×{n}" for k, n in sorted(r["failures"].items()))
        rows.append({**r, "rate": f"{r['successes']}/{r['runs']}", "fails": fails or "-"})
    columns = [(k, k, "{}") for k, _ in axes] + [
        ("rate", "success", "{}"), ("success_rate", "rate", "{:.0%}"),
        ("time_to_success_median", "t success [s]", "{:.2f}"), ("update_ms_median", "update ms", "{:.1f}"),
        ("fails", "failures", "{}")]
    return format_table(rows, columns)


def plot_success(rows: list[dict], axes, path) -> None:
    """A PNG at ``path``: success rate (over seeds and the other axes) against each grid axis,
    one panel per axis; without a grid, one bar of the overall rate."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..plots import save_figure

    panels = list(axes) or [("all units", ("all",))]
    fig = Figure(figsize=(6.5, 2.6 * len(panels)), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax_grid = fig.subplots(len(panels), 1, squeeze=False)  # each axis its own x
    for i, (key, values) in enumerate(panels):
        ax = ax_grid[i, 0]
        rates, counts = [], []
        for v in values:
            members = [r for r in rows if key == "all units" or r["grid"].get(key) == v]
            counts.append(len(members))
            rates.append(100.0 * sum(bool(r.get("success")) for r in members) / len(members) if members else np.nan)
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and len(values) > 1
        if numeric:
            ax.plot(values, rates, "o-", color="tab:blue")
            ax.set_xticks(list(values), [f"{v:g}" for v in values])
        else:
            ax.bar(range(len(values)), rates, color="tab:blue")
            ax.set_xticks(range(len(values)), [str(v) for v in values])
        for x, (rate, n) in enumerate(zip(rates, counts)):
            xv = values[x] if numeric else x
            if np.isfinite(rate):
                ax.annotate(f"n={n}", (xv, rate), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=7)
        ax.set_ylim(-5, 110)
        ax.set_xlabel(key)
        ax.set_ylabel("success [%]")
    fig.suptitle(f"success rate over {len({r['seed'] for r in rows})} seeds ({len(rows)} runs)", fontsize=9)
    save_figure(fig, Path(path))
