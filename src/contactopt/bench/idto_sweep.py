"""The horizon sweep of ``contactopt bench idto --horizon-sweep`` (the IDTO paper's Fig. 4):
time per iteration against the planning horizon for both treatments of underactuation — and
the Lagrange multipliers two ways, the paper's dense Schur complement (``"constrained"``) and
the banded KKT system (``"constrained-banded"``, ``IDTOSettings.multipliers="banded"``) — the
fitted growth exponents, their plot and table (see :mod:`contactopt.bench.idto_bench`)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from ..errors import ParameterError
from ..native.blas import single_threaded_blas
from ..progress import progress_bar
from . import format_table
from .idto_measure import METHODS, _options, idto_tasks, iteration_breakdown, open_loop_problem

#: the sweep's methods: :data:`~contactopt.bench.idto_measure.METHODS` with the multipliers of
#: ``"constrained"`` from the dense Schur complement, and ``"constrained-banded"``: the same
#: multipliers from the banded KKT system
SWEEP_METHODS = METHODS + ("constrained-banded",)

#: planning horizons (steps) of the horizon sweep, and the tasks it runs by default (the paper's
#: Fig. 4 shows the quadruped and the Allegro hand); ``quick`` runs use the first three horizons.
#: The growth exponents are fitted over all horizons and over the last three (the asymptotic
#: regime: at short horizons the derivatives, linear in T, dominate both methods)
SWEEP_HORIZONS = (10, 20, 40, 80, 160, 320)
SWEEP_TASKS = ("quadruped", "hand-ball")
#: iterations per (task, horizon, method) point of the sweep (their median time is the point)
SWEEP_ITERATIONS = 6


# --------------------------------------------------------------------------- horizon sweep (Fig. 4)


def growth_exponent(horizons, ms) -> float | None:
    """Exponent ``p`` of ``ms ≈ c·Tᵖ``: the least-squares slope of ``log ms`` against ``log T``.

    Args:
      horizons: ``(k,)`` horizons ``T`` (steps, > 0); ms: ``(k,)`` milliseconds per iteration.

    Returns:
      The slope, or None with fewer than two finite positive points.
    """
    T = np.asarray(horizons, dtype=float)
    y = np.asarray(ms, dtype=float)
    ok = np.isfinite(T) & np.isfinite(y) & (T > 0) & (y > 0)
    if ok.sum() < 2:
        return None
    slope, _ = np.polyfit(np.log(T[ok]), np.log(y[ok]), 1)
    return float(slope)


def horizon_sweep(tasks, horizons=SWEEP_HORIZONS, *, iterations: int = SWEEP_ITERATIONS,
                  methods=SWEEP_METHODS,
                  workers: int | None = None, progress_cb=None) -> tuple[list[dict], list[dict]]:
    """Time per iteration against the planning horizon, per underactuation treatment (Fig. 4).

    For every task and horizon ``T`` the task's open-loop problem from seed 0
    (:func:`open_loop_problem` with ``horizon=T``) is solved for ``iterations`` iterations with
    each method; the point is the median wall time of the iterations that linearized
    (:func:`iteration_breakdown`).

    Args:
      tasks: :class:`~contactopt.tasks.idto_task.IDTOTask` s.
      horizons: horizons in steps (each ≥ 2).
      iterations: iterations per point (all run; no convergence test).
      methods: subset of :data:`SWEEP_METHODS`.
      workers: Jacobian threads (default ``os.cpu_count()``).
      progress_cb: called once per (task, horizon).

    Returns:
      ``(rows, fits)``: rows ``{"task", "method", "horizon", "horizon_s", "nv", "ms_per_iteration",
      "factorization_ms"}``; fits ``{"task", "method", "exponent", "exponent_long",
      "factorization_exponent", "factorization_exponent_long"}`` from :func:`growth_exponent` over
      all the task's horizons and (``*_long``) over the longest three.
    """
    from ..solvers.idto import IDTOSolver

    horizons = [int(T) for T in horizons]
    if not horizons or min(horizons) < 2:
        raise ParameterError(f"horizon sweep: horizons must be at least 2 steps, got {horizons}")
    if int(iterations) < 1:
        raise ParameterError(f"horizon sweep: iterations must be >= 1, got {iterations}")
    rows, fits = [], []
    for task in tasks:
        task_rows = []
        for T in horizons:
            planner, q_guess = open_loop_problem(task, workers=workers, horizon=T)
            try:
                for method in methods:
                    res = IDTOSolver(planner.problem, _sweep_options(planner, method)).solve(
                        q_guess, max_iterations=int(iterations))
                    b = iteration_breakdown(res.log)
                    task_rows.append({"task": task.name, "method": method, "horizon": T,
                                      "horizon_s": float(T * planner.problem.h), "nv": int(planner.problem.nv),
                                      "ms_per_iteration": b["iteration_ms"],
                                      "factorization_ms": b["factorization_ms"]})
            finally:
                planner.problem.close()
            if progress_cb is not None:
                progress_cb()
        for method in methods:
            mine = [r for r in task_rows if r["method"] == method]
            T = [r["horizon"] for r in mine]
            ms = [r["ms_per_iteration"] for r in mine]
            fac = [r["factorization_ms"] for r in mine]
            fits.append({"task": task.name, "method": method,
                         "exponent": growth_exponent(T, ms), "exponent_long": growth_exponent(T[-3:], ms[-3:]),
                         "factorization_exponent": growth_exponent(T, fac),
                         "factorization_exponent_long": growth_exponent(T[-3:], fac[-3:])})
        rows.extend(task_rows)
    return rows, fits


def _sweep_options(planner, method: str):
    """The planner's solver settings for one sweep method (:data:`SWEEP_METHODS`)."""
    if method not in SWEEP_METHODS:
        raise ParameterError(f"horizon sweep: unknown method {method!r} "
                             f"(one of {', '.join(SWEEP_METHODS)})")
    if method == "constrained-banded":
        return dataclasses.replace(_options(planner, "constrained"), multipliers="banded")
    return dataclasses.replace(_options(planner, method), multipliers="schur")


def plot_horizon_sweep(rows: list[dict], fits: list[dict], path) -> None:
    """The paper's Fig. 4: milliseconds per iteration against horizon (log–log), one panel per
    task, one line per method, the fitted exponent in the legend.  ``path``: PNG (atomic write)."""
    from ..plots import new_figure, save_figure

    names = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = new_figure(len(names), row_height=2.6)
    styles = {"penalty": ("tab:blue", "penalty"),
              "constrained": ("tab:orange", "Lagrange multipliers (dense Schur)"),
              "constrained-banded": ("tab:green", "Lagrange multipliers (banded KKT)")}
    for ax, name in zip(axes[:, 0], names):
        for method, (color, label) in styles.items():
            mine = [r for r in rows if r["task"] == name and r["method"] == method and r["ms_per_iteration"]]
            if not mine:
                continue
            fit = next((f for f in fits if f["task"] == name and f["method"] == method), {})
            p = fit.get("exponent_long")
            ax.plot([r["horizon"] for r in mine], [r["ms_per_iteration"] for r in mine], "o-", color=color,
                    lw=1.5, label=f"{label} (ms ∝ T^{p:.2f} over the longest three)" if p is not None else label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"IDTO time per iteration against horizon: {name}")
        ax.set_ylabel("ms / iteration")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="upper left")
    axes[-1, 0].set_xlabel("horizon T [steps]")
    save_figure(fig, path)


def _run_horizon_sweep(models, *, progress, plots, quick: bool) -> dict:
    tasks = idto_tasks(models or SWEEP_TASKS)
    horizons = SWEEP_HORIZONS[:3] if quick else SWEEP_HORIZONS
    iterations = 3 if quick else SWEEP_ITERATIONS
    with progress_bar(total=len(tasks) * len(horizons), desc="bench idto --horizon-sweep", unit="point",
                      enable=progress, piped_lines=True) as bar, single_threaded_blas() as limited:
        rows, fits = horizon_sweep(tasks, horizons, iterations=iterations, progress_cb=lambda: bar.update(1))
    plot = None
    if plots is not None:
        plot = str(Path(plots) / "idto_horizon_sweep.png")
        plot_horizon_sweep(rows, fits, plot)
    return {"tasks": [], "horizon_sweep": rows, "horizon_fit": fits, "plot": plot, "quick": bool(quick),
            "iterations_per_point": iterations, "cpu_count": os.cpu_count(), "blas_threads_limited": limited}


def _horizon_table(result: dict) -> str:
    rows = []
    for f in result["horizon_fit"]:
        pts = [r for r in result["horizon_sweep"] if r["task"] == f["task"] and r["method"] == f["method"]]
        rows.append({"task": f["task"], "method": f["method"],
                     "points": "  ".join(f"T={r['horizon']}: {r['ms_per_iteration']:.1f}" for r in pts),
                     "p": f["exponent"], "pl": f["exponent_long"], "pfl": f["factorization_exponent_long"]})
    body = format_table(rows, [("task", "task", "{}"), ("method", "method", "{}"),
                               ("points", "ms per iteration at horizon T (steps)", "{}"),
                               ("p", "exponent", "{:.2f}"), ("pl", "longest 3", "{:.2f}"),
                               ("pfl", "factorization, longest 3", "{:.2f}")])
    head = (f"IDTO horizon sweep (the paper's Fig. 4): median ms per iteration over "
            f"{result['iterations_per_point']} iterations, {result['cpu_count']} cores; exponent p of ms ≈ c·T^p "
            "(paper: 1 for the penalty method, 3 for Lagrange multipliers with dense algebra; "
            "constrained-banded: the same multipliers from the banded KKT system)")
    notes = [f"plot {result['plot']}"] if result.get("plot") else []
    return "\n".join([head, body, *notes])
