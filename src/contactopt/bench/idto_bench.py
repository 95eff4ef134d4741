"""``contactopt bench idto``: IDTO convergence, iteration time, MPC rate and generic solvers (issue 5, items 6–7).

For every task registered with the ``idto`` planner (discovered through the task registry:
each ``idto`` runner carries its :class:`~contactopt.tasks.idto_task.IDTOTask` as
``runner.task``; ``--model`` filters by task or model name), with the task's own problem
(horizon, time step, weights, compliant contact) as :func:`~contactopt.tasks.idto_task.build_idto_planner`
builds it, the problem's Jacobian workers set to ``os.cpu_count()``:

1. **Convergence (the paper's Fig. 3).** The open-loop problem from the task's seeded initial
   state (seed 0) and its nominal, started from the held configuration (or the task's initial
   guess), is solved for ``convergence_iterations`` iterations with both treatments of
   underactuation — ``"penalty"`` and ``"constrained"`` (Lagrange multipliers) — recording the
   cost and the constraint violation ``max_t ‖Zᵀτ_t‖∞`` per iteration.  ``--plots DIR`` writes
   ``DIR/idto_convergence_<task>.png`` (cost and violation against iteration, log scale).
2. **Time per iteration and its breakdown** (the paper's Fig. 5): medians over those iterations (those that
   linearized; a rejected step's retry only evaluates a trial point) of the
   :class:`~contactopt.solvers.idto.IDTOIterationLog` times — ``derivatives`` (residual + Jacobian),
   ``hessian`` (Gauss–Newton assembly and scaling), ``factorization`` (banded Cholesky,
   multipliers and dogleg) and ``rest`` (the trial point's evaluation).  The top-level keys
   are the penalty method's; ``methods`` holds both.
3. **MPC rate.** A synchronous closed loop (:func:`contactopt.mpc.run_mpc`, the plant is
   MuJoCo with its own contact) of ``mpc_updates`` warm-started updates of the task's
   ``iterations_per_update`` (1 for most tasks, as in the paper)
   (:meth:`~contactopt.mpc.idto_planner.IDTOPlanner.update`: shift, re-anchor, iterate,
   splines) after a first plan of at most ``mpc_initial_iterations``; ``mpc_hz`` = 1 / median
   update wall time, beside the task's target.
4. **Generic least squares, same problem, same run.** The penalty problem ``½‖r(q)‖²`` over
   ``q_1 … q_T`` — in the local tangent parametrization ``x ↦ q_ref ⊕ x`` around the starting
   guess, so quaternions become an unconstrained vector — handed to ``scipy.optimize.least_squares``
   (``"trf"``) and to ``mujoco.minimize.least_squares`` twice: as a user with a residual function
   gets them (their own finite-difference Jacobians: the headline ``*_time_ratio``), and with our
   analytic Jacobian (:meth:`~contactopt.solvers.idto.IDTOProblem.linearize` →
   :meth:`~contactopt.solvers.idto.IDTOProblem.dense_jacobian`, times the retraction's Jacobian;
   ``*_shared_jacobian_time_ratio``), started from the same guess and timed until a residual
   evaluation reaches the cost our solver reaches in ``compare_iterations`` (10) iterations
   (our time: the fastest of three identical solves).
   Each is capped at ``generic_time_factor`` × our time (and ``generic_max_seconds``); one that
   does not reach the cost is reported as such, its ratio a lower bound (``≥``).
   ``scipy_time_ratio`` = scipy time / our time, likewise ``mujoco_minimize_time_ratio``.

5. **The convex model's full Newton step** (when the quadruped is among the tasks):
   :func:`~contactopt.bench.idto_measure.convex_newton_step` — ``contactopt optimize quadruped
   --backend convex`` 's problem (40 knots of 50 ms, κ 0.1; quick: 8 knots) on one thread, its
   median time per full Newton step and the per-core comparison with the convex model paper's
   160 ms on 12 cores.

**Horizon sweep (the paper's Fig. 4; ``--horizon-sweep``, run instead of 1–4).** Time per
iteration against the planning horizon ``T`` (steps) for both treatments of underactuation on
the quadruped and the hand (or the tasks named with ``--model``): :func:`horizon_sweep` solves
each task's open-loop problem for a few iterations at every horizon of :data:`SWEEP_HORIZONS`
and fits the growth exponent ``p`` of ``ms ≈ c·Tᵖ`` (least squares in log–log).  The paper:
linear in ``T`` for the penalty method (banded Cholesky of the block-tridiagonal Hessian),
cubic for Lagrange multipliers solved with dense algebra.  ``--plots DIR`` writes
``DIR/idto_horizon_sweep.png``.

Targets (issue 5): MPC rate spinner ≥ 200 Hz, hopper ≥ 100 Hz, quadruped ≥ 60 Hz,
hand-ball ≥ 10 Hz, bimanual-box ≥ 20 Hz (other tasks: their ``rate_target_hz``); ≥ 10× faster
than both generic solvers to the same cost.  ``run(quick=True)`` shortens every horizon and
iteration count (for tests; also ``CONTACTOPT_IDTO_BENCH_QUICK=1``).

Dense linear algebra runs on one OpenBLAS thread throughout
(:func:`contactopt.native.blas.single_threaded_blas`) for every
solver alike: on a shared 2-core machine a multi-threaded OpenBLAS waits on busy cores (an SVD
that takes 8 ms on one thread was measured at 0.8 s), which would distort the comparison.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np

from ..errors import ContactoptError, ParameterError
from ..progress import progress_bar
from ..native.blas import single_threaded_blas
from . import Benchmark, format_table, register_benchmark
from .idto_measure import (  # noqa: F401  (the private names: re-exported for their users)
    METHODS,
    PAPER_NEWTON_STEP,
    _build_planner,
    _initial_state,
    _options,
    _retraction_jacobian,
    _Stop,
    convergence,
    convex_newton_step,
    generic_least_squares,
    idto_tasks,
    iteration_breakdown,
    mpc_rate,
    open_loop_problem,
    our_solve_time,
)
from .idto_sweep import (  # noqa: F401  (SWEEP_ITERATIONS: re-exported)
    SWEEP_HORIZONS,
    SWEEP_ITERATIONS,
    SWEEP_TASKS,
    _horizon_table,
    _run_horizon_sweep,
    growth_exponent,
    horizon_sweep,
    plot_horizon_sweep,
)

__all__ = ["run", "table", "idto_tasks", "benchmark_task", "open_loop_problem", "convergence",
           "horizon_sweep", "growth_exponent", "plot_horizon_sweep", "SWEEP_HORIZONS", "SWEEP_TASKS",
           "iteration_breakdown", "our_solve_time", "generic_least_squares", "mpc_rate",
           "plot_convergence", "MPC_TARGETS_HZ", "SPEEDUP_TARGET", "SETTINGS",
           "QUICK_SETTINGS", "convex_newton_step", "PAPER_NEWTON_STEP", "NEWTON_STEP_TASK"]

#: the task whose convex-model Newton step is timed (the paper's 3D walking gait: our quadruped)
NEWTON_STEP_TASK = "quadruped"

#: issue 5's MPC-rate targets on the 2-core machines [Hz]; other tasks use ``task.rate_target_hz``
MPC_TARGETS_HZ = {"spinner": 200.0, "hopper": 100.0, "quadruped": 60.0, "hand-ball": 10.0,
                  "bimanual-box": 20.0}
#: our solver must be at least this many times faster than each generic solver to the same cost
SPEEDUP_TARGET = 10.0

#: the generic least-squares runs: (key, solver, jacobian).  The headline ratios
#: (``scipy_time_ratio``, ``mujoco_minimize_time_ratio``) are the generic solvers as a user with
#: a residual function gets them (finite-difference Jacobians); the ``*_shared_jacobian`` runs
#: hand them our analytic Jacobian, so that only the outer algorithm is compared.
GENERIC_RUNS = (("scipy", "scipy", "finite-difference"), ("mujoco", "mujoco", "finite-difference"),
                ("scipy_shared_jacobian", "scipy", "analytic"), ("mujoco_shared_jacobian", "mujoco", "analytic"))
#: phases per task reported to the progress bar (convergence, ours, the generic runs, MPC)
PHASES_PER_TASK = 3 + len(GENERIC_RUNS)

#: default knobs of :func:`run` (the full bench)
SETTINGS = dict(convergence_iterations=30, compare_iterations=10, mpc_updates=20,
                mpc_initial_iterations=10, generic_time_factor=12.0, generic_max_seconds=60.0,
                generic_max_iterations=2000, horizon=None)
#: ``run(quick=True)``: short horizons and few iterations
QUICK_SETTINGS = dict(convergence_iterations=8, compare_iterations=10, mpc_updates=5,
                      mpc_initial_iterations=5, generic_time_factor=12.0, generic_max_seconds=10.0,
                      generic_max_iterations=500, horizon=8)


# --------------------------------------------------------------------------- plots


def plot_convergence(task_name: str, conv: dict, path) -> None:
    """The paper's Fig. 3 for one task: cost and constraint violation against iteration.

    Args:
      task_name: title.
      conv: :func:`convergence` result (one curve per method).
      path: PNG file to write (atomically).
    """
    from ..plots import new_figure, save_figure

    fig, axes = new_figure(2, row_height=2.6)
    styles = {"penalty": ("tab:blue", "penalty (cost includes the w_u‖Zᵀτ‖² rows)"),
              "constrained": ("tab:orange", "Lagrange multipliers (Zᵀτ = 0 constrained)")}
    for method, c in conv.items():
        color, label = styles.get(method, (None, method))
        k = np.arange(len(c["cost"]))
        cost = np.asarray(c["cost"], dtype=float)
        viol = np.asarray(c["violation"], dtype=float)
        axes[0, 0].plot(k, cost, color=color, lw=1.5, label=label)
        axes[1, 0].plot(k, np.maximum(viol, 1e-12), color=color, lw=1.5, label=label)
    axes[0, 0].set_title(f"IDTO open-loop convergence: {task_name}")
    axes[0, 0].set_ylabel("cost L")
    axes[1, 0].set_ylabel("violation max‖Zᵀτ‖∞")
    axes[1, 0].set_xlabel("iteration")
    for ax in axes[:, 0]:
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0, 0].legend(fontsize=8, loc="best")
    axes[1, 0].set_title("violations below 1e-12 drawn at 1e-12", fontsize=8, loc="right")
    save_figure(fig, path)


# --------------------------------------------------------------------------- bench


def _ratio(generic: dict, ours: float) -> float:
    return float(generic["seconds"] / ours) if ours > 0 else math.inf


def _beats(generic: dict) -> bool:
    """Whether our solver is ≥ SPEEDUP_TARGET × faster than this generic run to the same cost.

    A run that did not reach the cost gives a lower bound on its ratio (met if already ≥ the
    target); one that stopped on its own without reaching it never gets there (met).
    """
    if generic["time_ratio"] >= SPEEDUP_TARGET:
        return True
    return (not generic["reached"]) and generic["stopped"] == "solver_finished"


def benchmark_task(task, *, settings: dict | None = None, plots=None, progress_cb=None) -> dict:
    """One row of the benchmark for ``task`` (module docstring; ``settings`` as :data:`SETTINGS`).

    Args:
      task: an :class:`~contactopt.tasks.idto_task.IDTOTask`.
      settings: overrides of :data:`SETTINGS`.
      plots: directory for ``idto_convergence_<task>.png`` (None: no plot).
      progress_cb: optional callable with no arguments, called after each phase (:data:`PHASES_PER_TASK`).

    Returns:
      the JSON row: ``task, model, nv, steps, time_step, workers, iteration_ms, derivatives_ms,
      hessian_ms, factorization_ms, rest_ms, mpc_hz, mpc_target_hz, mpc_target_met,
      scipy_time_ratio, mujoco_minimize_time_ratio`` (+ ``*_reached``, ``speedup_target_met``,
      ``our_compare_seconds``, ``target_cost``, ``generic``, ``methods``, ``mpc``, ``plot``,
      ``phase_seconds``).  A generic solver that did not reach the cost has its ratio as a lower
      bound (its seconds until it stopped); one that stopped on its own without reaching it never
      will (``generic[...]["stopped"] == "solver_finished"``) and counts as slower by any factor.
    """
    s = {**SETTINGS, **(settings or {})}
    bad = set(s) - set(SETTINGS)
    if bad:
        raise ParameterError(f"unknown IDTO bench setting(s): {', '.join(sorted(bad))}")
    clock = [time.perf_counter()]
    phases = {}

    def tick(name):
        now = time.perf_counter()
        phases[name] = now - clock[0]
        clock[0] = now
        if progress_cb is not None:
            progress_cb()

    workers = os.cpu_count() or 1
    planner, q_guess = open_loop_problem(task, workers=workers, horizon=s["horizon"])
    pr = planner.problem
    conv = convergence(planner, q_guess, s["convergence_iterations"])
    tick("convergence")
    plot = None
    if plots is not None:
        plot = str(Path(plots) / f"idto_convergence_{task.name}.png")
        plot_convergence(task.name, conv, plot)
    ours = our_solve_time(planner, q_guess, s["compare_iterations"])
    tick("ours")
    limit = min(s["generic_time_factor"] * ours["seconds"], s["generic_max_seconds"])
    generic = {}
    for name, solver, jac in GENERIC_RUNS:
        g = generic_least_squares(pr, q_guess, ours["cost"], solver=solver, time_limit=limit,
                                  max_iterations=s["generic_max_iterations"], jacobian=jac)
        g.pop("q")
        g["time_ratio"] = _ratio(g, ours["seconds"])
        g["seconds_per_jacobian"] = g["seconds"] / g["jacobian_evaluations"] if g["jacobian_evaluations"] else None
        generic[name] = g
        tick(name)
    try:
        mpc = mpc_rate(task, updates=s["mpc_updates"], initial_iterations=s["mpc_initial_iterations"],
                       workers=workers, horizon=s["horizon"])
    except ContactoptError as exc:  # e.g. the first plan failed or the plant diverged: say so, go on
        mpc = {"mpc_hz": None, "error": f"{type(exc).__name__}: {exc}"}
    tick("mpc")
    target_hz = MPC_TARGETS_HZ.get(task.name, float(task.rate_target_hz))
    pen = conv["penalty"]
    planner.problem.close()  # shut its thread pool down
    row = {
        "task": task.name, "model": task.model, "nv": int(pr.nv), "steps": int(pr.T),
        "time_step": float(pr.h), "workers": workers,
        **{k: pen[k] for k in ("iteration_ms", "derivatives_ms", "hessian_ms", "factorization_ms", "rest_ms")},
        "mpc_hz": mpc["mpc_hz"], "mpc_target_hz": target_hz, "task_rate_target_hz": float(task.rate_target_hz),
        "mpc_target_met": bool(mpc["mpc_hz"] is not None and mpc["mpc_hz"] >= target_hz),
        "scipy_time_ratio": generic["scipy"]["time_ratio"],
        "scipy_reached": generic["scipy"]["reached"],
        "mujoco_minimize_time_ratio": generic["mujoco"]["time_ratio"],
        "mujoco_minimize_reached": generic["mujoco"]["reached"],
        "scipy_shared_jacobian_time_ratio": generic["scipy_shared_jacobian"]["time_ratio"],
        "mujoco_minimize_shared_jacobian_time_ratio": generic["mujoco_shared_jacobian"]["time_ratio"],
        "speedup_target": SPEEDUP_TARGET,
        "speedup_target_met": bool(_beats(generic["scipy"]) and _beats(generic["mujoco"])),
        "speedup_target_met_shared_jacobian": bool(_beats(generic["scipy_shared_jacobian"])
                                                   and _beats(generic["mujoco_shared_jacobian"])),
        "compare_iterations": int(s["compare_iterations"]),
        "our_compare_seconds": ours["seconds"], "target_cost": ours["cost"],
        "generic_time_limit_s": float(limit),
        "our_seconds_per_iteration": ours["seconds"] / max(ours["iterations"], 1),
        "generic": generic, "methods": conv, "mpc": mpc, "plot": plot, "phase_seconds": phases,
    }
    return row


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None, plots=None,
        quick: bool | None = None, horizon_sweep: bool = False, **settings) -> dict:
    """Run the benchmark on the IDTO tasks (or those named in ``models``).

    Args:
      models: task or model names (None: every registered IDTO task).
      min_time: accepted for the CLI's interface; unused (every measurement here is a median
        over iterations or updates of one run).
      progress: progress bar (None: only on a terminal).
      plots: existing directory for the convergence PNGs.
      quick: :data:`QUICK_SETTINGS` (short horizons, few iterations) instead of :data:`SETTINGS`;
        None: quick when the environment variable ``CONTACTOPT_IDTO_BENCH_QUICK`` is ``1``
        (so that ``contactopt bench idto`` can be run quickly from tests).
      horizon_sweep: run only the horizon sweep (the paper's Fig. 4, :func:`horizon_sweep`) on
        ``models`` (default :data:`SWEEP_TASKS`); quick: the first three horizons, 3 iterations.
      settings: overrides of individual knobs of :data:`SETTINGS`.

    Returns:
      ``{"tasks": [row, ...], "quick", "settings", "cpu_count", "blas_threads_limited", "targets",
      "newton_step"}`` with rows as :func:`benchmark_task` and ``newton_step`` as
      :func:`convex_newton_step` (None when the quadruped is not among the tasks; ``{"task",
      "error"}`` when it failed); with ``horizon_sweep``: ``{"tasks": [], "horizon_sweep":
      [row, ...], "horizon_fit": [fit, ...], "plot", "quick", "cpu_count", "blas_threads_limited"}``
      with rows and fits as :func:`horizon_sweep`.

    Raises:
      ParameterError: unknown task names or settings, ``plots`` not a directory.
    """
    if plots is not None:
        plots = Path(plots)
        if not plots.is_dir():
            raise ParameterError(f"--plots: {plots} is not an existing directory")
    if quick is None:
        quick = os.environ.get("CONTACTOPT_IDTO_BENCH_QUICK", "").strip().lower() in ("1", "true", "yes")
    s = {**(QUICK_SETTINGS if quick else SETTINGS), **settings}
    bad = set(s) - set(SETTINGS)
    if bad:
        raise ParameterError(f"unknown IDTO bench setting(s): {', '.join(sorted(bad))}")
    if horizon_sweep:
        return _run_horizon_sweep(models, progress=progress, plots=plots, quick=quick)
    tasks = idto_tasks(models)
    if not tasks:
        raise ParameterError("no IDTO task is registered")
    rows = []
    newton = None
    with progress_bar(total=PHASES_PER_TASK * len(tasks), desc="bench idto", unit="phase", enable=progress, piped_lines=True) as bar, \
            single_threaded_blas() as limited:
        for task in tasks:
            rows.append(benchmark_task(task, settings=s, plots=plots, progress_cb=lambda: bar.update(1)))
        if any(t.name == NEWTON_STEP_TASK for t in tasks):
            try:
                # on one thread, so that its core-seconds are measured, not bounded
                newton = convex_newton_step(NEWTON_STEP_TASK, horizon=8 if quick else 40, iterations=2 if quick else 3,
                                            workers=1)
            except ContactoptError as exc:
                newton = {"task": NEWTON_STEP_TASK, "error": str(exc)}
    return {"tasks": rows, "quick": bool(quick), "settings": s, "cpu_count": os.cpu_count(),
            "blas_threads_limited": limited, "newton_step": newton,
            "targets": {"mpc_hz": MPC_TARGETS_HZ, "speedup_vs_generic": SPEEDUP_TARGET}}


def _fmt_ratio(ratio, generic) -> str:
    if ratio is None:
        return "-"
    if generic["reached"]:
        return f"{ratio:.1f}"
    if generic["stopped"] == "solver_finished":
        return "never (stopped)"
    return f"≥{ratio:.1f} (not reached)"


def table(result: dict) -> str:
    """One row per task: iteration time and breakdown, MPC rate vs target, generic-solver ratios
    (with ``horizon_sweep``: one row per task and method, its times and fitted exponent)."""
    if "horizon_sweep" in result:
        return _horizon_table(result)
    rows = []
    for r in result["tasks"]:
        rows.append({
            **r,
            "size": f"{r['nv']}×{r['steps']}",
            "mpc": (f"{r['mpc_hz']:.1f} / {r['mpc_target_hz']:g} "
                    f"{'met' if r['mpc_target_met'] else 'missed'}") if r["mpc_hz"] is not None else "-",
            "scipy": _fmt_ratio(r["scipy_time_ratio"], r["generic"]["scipy"]),
            "mjmin": _fmt_ratio(r["mujoco_minimize_time_ratio"], r["generic"]["mujoco"]),
            "scipy_j": _fmt_ratio(r["scipy_shared_jacobian_time_ratio"], r["generic"]["scipy_shared_jacobian"]),
            "mjmin_j": _fmt_ratio(r["mujoco_minimize_shared_jacobian_time_ratio"],
                                  r["generic"]["mujoco_shared_jacobian"]),
            "speed": f"≥{r['speedup_target']:g}× {'met' if r['speedup_target_met'] else 'missed'}",
            "final": "{:.3g} / {:.3g}".format(r["methods"]["penalty"]["final_cost"],
                                              r["methods"]["constrained"]["final_cost"]),
            "viol": "{:.2g} / {:.2g}".format(r["methods"]["penalty"]["final_violation"],
                                             r["methods"]["constrained"]["final_violation"]),
        })
    s = result.get("settings", {})
    head = (f"IDTO bench: {result.get('cpu_count')} cores (Jacobian threads), open loop from seed 0, "
            f"{s.get('convergence_iterations')} iterations per method; MPC {s.get('mpc_updates')} updates "
            f"(the task's iterations per update); generic solvers race our {s.get('compare_iterations')}-iteration penalty cost")
    body = format_table(rows, [
        ("task", "task", "{}"),
        ("size", "nv×T", "{}"),
        ("iteration_ms", "iter ms", "{:.1f}"),
        ("derivatives_ms", "deriv", "{:.1f}"),
        ("hessian_ms", "hessian", "{:.2f}"),
        ("factorization_ms", "factor", "{:.2f}"),
        ("rest_ms", "rest", "{:.1f}"),
        ("mpc", "MPC Hz / target", "{}"),
        ("scipy", "scipy ×", "{}"),
        ("mjmin", "mujoco.minimize ×", "{}"),
        ("scipy_j", "scipy × (our J)", "{}"),
        ("mjmin_j", "mj.minimize × (our J)", "{}"),
        ("speed", "speedup target", "{}"),
        ("final", "final cost pen/LM", "{}"),
        ("viol", "violation pen/LM", "{}"),
    ])
    notes = []
    for r in result["tasks"]:
        parts = []
        for name, label in (("scipy", "scipy trf"), ("mujoco", "mujoco.minimize"),
                            ("scipy_shared_jacobian", "scipy trf with our J"),
                            ("mujoco_shared_jacobian", "mujoco.minimize with our J")):
            g = r["generic"][name]
            parts.append(f"{label} {'reached' if g['reached'] else 'stopped at'} {g['cost']:.4g} in "
                         f"{g['seconds']:.3g} s ({g['jacobian_evaluations']} Jacobians, "
                         f"{g['residual_evaluations']} residuals{'' if g['reached'] else ', ' + g['stopped']})")
        notes.append(f"{r['task']}: our {r['compare_iterations']} iterations {r['our_compare_seconds']:.3g} s "
                     f"-> cost {r['target_cost']:.4g}; " + "; ".join(parts))
    nw = result.get("newton_step")
    if nw and nw.get("error"):
        notes.append(f"convex Newton step ({nw['task']}): failed ({nw['error']})")
    elif nw and nw.get("newton_step_ms") is not None:
        notes.append(f"convex Newton step ({nw['task']}, {nw['horizon_steps']} knots of {nw['time_step'] * 1e3:g} ms, "
                     f"nv {nw['nv']}, κ {nw['kappa']:g}): median {nw['newton_step_ms']:.0f} ms on {nw['workers']} "
                     f"thread(s) = {nw['core_seconds']:.2f} core-s; the paper {nw['paper_core_seconds']:.2f} core-s "
                     f"(160 ms × 12 cores): {nw['per_core_ratio']:.2f}× per core")
    for r in result["tasks"]:
        if r["mpc"].get("error"):
            notes.append(f"{r['task']}: MPC run failed ({r['mpc']['error']})")
        if r.get("plot"):
            notes.append(f"{r['task']}: convergence plot {r['plot']}")
    return "\n".join([head, body, *notes])


register_benchmark(Benchmark(
    "idto",
    "IDTO: convergence (penalty vs multipliers), iteration time, MPC rate, vs generic least squares",
    run, table, ("plots", "horizon_sweep")))
