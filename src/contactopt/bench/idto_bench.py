"""``contactopt bench idto``: IDTO convergence, iteration time, MPC rate and generic solvers (issue 5, items 6–7).

For every task registered with the ``idto`` planner (discovered through the task registry:
each ``idto`` runner carries its :class:`~contactopt.tasks.idto_tasks.IDTOTask` as
``runner.task``; ``--model`` filters by task or model name), with the task's own problem
(horizon, time step, weights, compliant contact) as :func:`~contactopt.tasks.idto_tasks.build_idto_planner`
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

import dataclasses
import math
import os
import time
from pathlib import Path

import numpy as np

from ..errors import ContactoptError, ParameterError
from ..progress import progress_bar
from ..native.blas import single_threaded_blas
from . import Benchmark, format_table, register_benchmark

__all__ = ["run", "table", "idto_tasks", "benchmark_task", "open_loop_problem", "convergence",
           "horizon_sweep", "growth_exponent", "plot_horizon_sweep", "SWEEP_HORIZONS", "SWEEP_TASKS",
           "iteration_breakdown", "our_solve_time", "generic_least_squares", "mpc_rate",
           "plot_convergence", "MPC_TARGETS_HZ", "SPEEDUP_TARGET", "SETTINGS",
           "QUICK_SETTINGS"]

METHODS = ("penalty", "constrained")

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


#: planning horizons (steps) of the horizon sweep, and the tasks it runs by default (the paper's
#: Fig. 4 shows the quadruped and the Allegro hand); ``quick`` runs use the first three horizons.
#: The growth exponents are fitted over all horizons and over the last three (the asymptotic
#: regime: at short horizons the derivatives, linear in T, dominate both methods)
SWEEP_HORIZONS = (10, 20, 40, 80, 160, 320)
SWEEP_TASKS = ("quadruped", "hand-ball")
#: iterations per (task, horizon, method) point of the sweep (their median time is the point)
SWEEP_ITERATIONS = 6


# --------------------------------------------------------------------------- tasks and problems


def idto_tasks(names=None) -> list:
    """The :class:`~contactopt.tasks.idto_tasks.IDTOTask` s registered with an ``idto`` runner.

    Args:
      names: optional task or model names to keep (None: all, sorted by name).

    Raises:
      ParameterError: a name that matches no IDTO task (the message lists them).
    """
    from ..tasks import available_tasks

    tasks = [spec.runners["idto"].task for spec in available_tasks().values()
             if "idto" in spec.runners and hasattr(spec.runners["idto"], "task")]
    tasks.sort(key=lambda t: t.name)
    if names:
        wanted = [str(n) for n in names]
        picked = [t for t in tasks if t.name in wanted or t.model in wanted]
        unknown = set(wanted) - {t.name for t in picked} - {t.model for t in picked}
        if unknown:
            raise ParameterError(f"no IDTO task named {', '.join(sorted(unknown))} (IDTO tasks: "
                                 f"{', '.join(t.name for t in tasks) or 'none registered'})")
        tasks = picked
    return tasks


def _build_planner(task, *, workers: int, horizon=None, **overrides):
    from ..tasks.idto_tasks import build_idto_planner

    if horizon is not None:
        overrides["horizon"] = int(horizon)
    return build_idto_planner(task, workers=workers, **overrides)


def _initial_state(task, model, seed: int = 0) -> np.ndarray:
    """``x0 = [qpos, qvel]`` of the task's seeded initial state on ``model``."""
    import mujoco

    data = mujoco.MjData(model)
    task.initial_state(model, data, np.random.default_rng(seed))
    mujoco.mj_forward(model, data)
    return np.concatenate([data.qpos, data.qvel])


def open_loop_problem(task, *, seed: int = 0, workers: int | None = None, horizon: int | None = None):
    """The task's open-loop problem from its seeded initial state.

    Args:
      task: an :class:`~contactopt.tasks.idto_tasks.IDTOTask`.
      seed: seeds the initial state (``task.initial_state``).
      workers: Jacobian threads of the problem (default ``os.cpu_count()``).
      horizon: override of the task's horizon ``T`` (steps), e.g. for quick runs.

    Returns:
      ``(planner, q_guess)``: the :class:`~contactopt.mpc.idto_planner.IDTOPlanner` whose problem
      holds the initial state and the task's nominal at ``t = 0``, and the starting guess
      ``(T+1, nq)`` (the planner's ``initial_guess`` or the initial configuration held).
    """
    workers = (os.cpu_count() or 1) if workers is None else int(workers)
    planner = _build_planner(task, workers=workers, horizon=horizon)
    pr = planner.problem
    x0 = _initial_state(task, pr.model, seed)
    pr.set_initial_state(x0[:pr.nq], x0[pr.nq:pr.nq + pr.nv])
    if planner.nominal is not None:
        qn, vn = planner.nominal(0.0, x0)
        pr.set_nominal(qn, vn)
    if planner.initial_guess is not None:
        q_guess = np.array(planner.initial_guess(0.0, x0), dtype=float).reshape(pr.T + 1, pr.nq)
    else:
        q_guess = np.tile(pr.q_init, (pr.T + 1, 1))
    q_guess[0] = pr.q_init
    return planner, q_guess


def _options(planner, method: str):
    return dataclasses.replace(planner.solver.options, underactuation=method, convergence=None)


# --------------------------------------------------------------------------- our solver


def iteration_breakdown(log) -> dict:
    """Median milliseconds per iteration of a list of :class:`~contactopt.solvers.idto.IDTOIterationLog`.

    Returns:
      ``{"iteration_ms", "derivatives_ms", "hessian_ms", "factorization_ms", "rest_ms"}``
      (medians taken separately: they need not add up); None values for an empty log.
      Only iterations that linearized are counted (after a rejected step the solver re-uses the
      linearization and only evaluates a new trial point; an MPC update always linearizes).
    """
    keys = {"derivatives_ms": ("residual", "jacobian"), "hessian_ms": ("assemble",),
            "factorization_ms": ("factor",), "rest_ms": ("trial",)}
    if not log:
        return {"iteration_ms": None, **{k: None for k in keys}}
    full = [lg for lg in log if lg.times.get("jacobian", 0.0) > 0 or lg.times.get("residual", 0.0) > 0]
    log = full or log
    out = {"iteration_ms": float(np.median([sum(lg.times.values()) for lg in log]) * 1e3)}
    for key, parts in keys.items():
        out[key] = float(np.median([sum(lg.times.get(p, 0.0) for p in parts) for lg in log]) * 1e3)
    return out


def convergence(planner, q_guess, iterations: int, methods=METHODS) -> dict:
    """Open-loop solves of the planner's problem with each underactuation treatment.

    Args:
      planner: from :func:`open_loop_problem` (its solver options are kept, convergence tests off).
      q_guess: ``(T+1, nq)`` starting guess.
      iterations: iterations per method (all of them run).
      methods: subset of ``("penalty", "constrained")``.

    Returns:
      ``{method: {"cost": [L_0 … L_K], "violation": [...], "accepted": [...], "final_cost",
      "final_violation", "status", "seconds", "wall_ms_per_iteration" (solve time / iterations),
      "rejected_steps", **iteration_breakdown}}`` — ``cost[k]`` and
      ``violation[k]`` at the iterate before step ``k``, the last entry after the final step
      (``K = iterations``); the violation is ``max_t ‖Zᵀτ_t‖∞`` [N or N·m].
    """
    from ..solvers.idto import IDTOSolver

    out = {}
    for method in methods:
        solver = IDTOSolver(planner.problem, _options(planner, method))
        res = solver.solve(q_guess, max_iterations=int(iterations))
        viol = planner.problem.unactuated_violation(res.tau)
        out[method] = {
            "cost": [lg.cost for lg in res.log] + [float(res.cost)],
            "violation": [lg.violation for lg in res.log] + [viol],
            "accepted": [bool(lg.accepted) for lg in res.log],
            "rejected_steps": int(sum(not lg.accepted for lg in res.log)),
            "final_cost": float(res.cost), "final_violation": viol,
            "status": res.status.value, "seconds": float(res.solve_time),
            "wall_ms_per_iteration": float(res.solve_time / max(res.iterations, 1) * 1e3),
            **iteration_breakdown(res.log),
        }
    return out


def our_solve_time(planner, q_guess, iterations: int = 10, repeats: int = 3) -> dict:
    """Wall time of ``iterations`` penalty-method iterations from ``q_guess`` (no early stop).

    The fastest of ``repeats`` identical solves (each from ``q_guess`` with a fresh solver: the
    same iterates every time): a solve of a few milliseconds on a shared machine is easily
    stretched by another process, which would inflate every ratio against it.

    Returns:
      ``{"seconds", "cost", "iterations", "q"}``: ``cost`` is ``½‖r(q)‖²`` of the result ``q``
      (``(T+1, nq)``), the target the generic solvers race to.
    """
    from ..solvers.idto import IDTOSolver

    best = math.inf
    for _ in range(max(1, int(repeats))):
        solver = IDTOSolver(planner.problem, _options(planner, "penalty"))
        t0 = time.perf_counter()
        res = solver.solve(q_guess, max_iterations=int(iterations))
        best = min(best, time.perf_counter() - t0)
    return {"seconds": best, "cost": float(res.cost), "iterations": int(res.iterations), "q": res.q}


# --------------------------------------------------------------------------- generic solvers


class _Stop(Exception):
    """Raised from inside a generic solver's callbacks to end its run."""


def _retraction_jacobian(problem, q_ref, x) -> np.ndarray | None:
    """Retraction Jacobian ``∂((q_ref ⊕ x') ⊖ (q_ref ⊕ x))/∂x'`` at ``x' = x``: blocks ``(T, nv, nv)``.

    None for models without quaternions (where it is the identity).

    Central differences on the manifold (``2·nv`` retractions per block); exactly the identity
    for hinge and slide joints, which is why models without ball/free joints skip it.
    """
    import mujoco

    m = problem.model
    if m.nq == m.nv:
        return None
    T, nv = problem.T, problem.nv
    xb = np.asarray(x, dtype=float).reshape(T, nv)
    eps = 1e-6
    R = np.empty((T, nv, nv))
    qp = np.empty(m.nq)
    qm = np.empty(m.nq)
    col = np.empty(nv)
    for t in range(T):
        base = q_ref[t + 1]
        for i in range(nv):
            e = xb[t].copy()
            e[i] += eps
            qp[:] = base
            mujoco.mj_integratePos(m, qp, e, 1.0)
            e[i] -= 2 * eps
            qm[:] = base
            mujoco.mj_integratePos(m, qm, e, 1.0)
            mujoco.mj_differentiatePos(m, col, 2 * eps, qm, qp)
            R[t, :, i] = col
    return R


def generic_least_squares(problem, q_guess, target_cost: float, *, solver: str = "scipy",
                          time_limit: float = 60.0, max_iterations: int = 1000,
                          jacobian: str = "analytic") -> dict:
    """Minimize ``½‖r(q)‖²`` with a generic least-squares solver until the cost reaches ``target_cost``.

    The decision vector is ``x (T·nv,)`` with ``q = q_ref ⊕ x`` (``q_ref`` = the checked guess,
    ``q_0`` fixed), started at ``x = 0``.  ``jacobian="analytic"`` hands the solver our
    Jacobian (``dense_jacobian(linearize(q))``, ``(m, T·nv)``, times the retraction's Jacobian),
    so only the outer algorithm differs; ``"finite-difference"`` is the generic solver as a user
    with only a residual function gets it (scipy's ``jac="2-point"``, mujoco.minimize's own
    forward differences: ``T·nv`` residual evaluations per Jacobian, no structure).  The run
    stops at the first residual evaluation whose cost is ``≤ target_cost (1 + 1e-9)``, when
    ``time_limit`` seconds have passed, or when the solver stops on its own (iteration cap,
    tolerances, no progress).

    Args:
      problem: an :class:`~contactopt.solvers.idto.IDTOProblem` (its residual is the one minimized).
      q_guess: ``(T+1, nq)`` starting trajectory (``q_guess[0] = q_init``).
      target_cost: cost to reach.
      solver: ``"scipy"`` (``scipy.optimize.least_squares``, ``method="trf"``, dense exact
        trust-region subproblem) or ``"mujoco"`` (``mujoco.minimize.least_squares``,
        Levenberg–Marquardt with box-QP steps).
      time_limit: wall-clock cap [s]; max_iterations: cap on residual evaluations (scipy's
        ``max_nfev``) or iterations (mujoco's ``max_iter``).
      jacobian: ``"analytic"`` or ``"finite-difference"`` (above).

    Returns:
      ``{"solver", "reached" (bool), "seconds" (to the target, or until it stopped),
      "cost" (of ``q``), "q" ((T+1, nq) the point that reached the target or the best one seen),
      "residual_evaluations", "jacobian_evaluations", "stopped" ("reached", "time_limit",
      "solver_finished" or "error: …")}``.

    Raises:
      ParameterError: unknown ``solver``, non-positive ``time_limit``/``max_iterations``,
        non-finite ``target_cost``.
    """
    if solver not in ("scipy", "mujoco"):
        raise ParameterError(f"solver must be 'scipy' or 'mujoco', got {solver!r}")
    if jacobian not in ("analytic", "finite-difference"):
        raise ParameterError(f"jacobian must be 'analytic' or 'finite-difference', got {jacobian!r}")
    analytic = jacobian == "analytic"
    if not (isinstance(time_limit, (int, float)) and math.isfinite(time_limit) and time_limit > 0):
        raise ParameterError(f"time_limit must be positive seconds, got {time_limit!r}")
    if isinstance(max_iterations, bool) or int(max_iterations) != max_iterations or max_iterations < 1:
        raise ParameterError(f"max_iterations must be a positive integer, got {max_iterations!r}")
    if not math.isfinite(float(target_cost)):
        raise ParameterError(f"target_cost must be finite, got {target_cost!r}")
    import mujoco.minimize  # imported before the clock starts
    import scipy.optimize

    q_ref = problem.check_trajectory(q_guess)
    n = problem.num_variables
    threshold = float(target_cost) * (1 + 1e-9)
    st = {"best": math.inf, "best_x": np.zeros(n), "nres": 0, "njac": 0, "hit": None, "why": None}
    t_start = time.perf_counter()

    def check_time():
        if time.perf_counter() - t_start > time_limit:
            st["why"] = "time_limit"
            raise _Stop

    def residual_1d(x):
        check_time()
        r = problem.residuals(problem.retract(q_ref, x))
        st["nres"] += 1
        c = 0.5 * float(r @ r)
        if c < st["best"]:
            st["best"], st["best_x"] = c, np.array(x, dtype=float)
        if c <= threshold:
            st["hit"] = time.perf_counter() - t_start
            st["why"] = "reached"
            raise _Stop
        return r

    def jacobian_1d(x):
        check_time()
        lin = problem.linearize(problem.retract(q_ref, x))
        J = problem.dense_jacobian(lin)
        R = _retraction_jacobian(problem, q_ref, x)
        if R is not None:
            T, nv = problem.T, problem.nv
            J = np.einsum("mtk,tki->mti", J.reshape(-1, T, nv), R).reshape(-1, T * nv)
        st["njac"] += 1
        return J

    x0 = np.zeros(n)
    try:
        if solver == "scipy":
            scipy.optimize.least_squares(residual_1d, x0, jac=jacobian_1d if analytic else "2-point", method="trf",
                                         ftol=1e-15, xtol=1e-15, gtol=1e-15, max_nfev=int(max_iterations))
        else:
            def residual_2d(X):  # mujoco.minimize passes points as columns (n, k)
                X = np.asarray(X, dtype=float).reshape(n, -1)
                return np.stack([residual_1d(X[:, j]) for j in range(X.shape[1])], axis=1)

            mujoco.minimize.least_squares(x0, residual_2d,
                                          jacobian=(lambda X, r: jacobian_1d(X.ravel())) if analytic else None,
                                          max_iter=int(max_iterations), xtol=1e-15, gtol=1e-15, verbose=0)
        st["why"] = "solver_finished"
    except _Stop:
        pass
    except (ValueError, np.linalg.LinAlgError, FloatingPointError, ContactoptError) as exc:
        st["why"] = f"error: {exc}"
    seconds = st["hit"] if st["hit"] is not None else time.perf_counter() - t_start
    q = problem.retract(q_ref, st["best_x"])
    return {"solver": solver, "jacobian": jacobian, "reached": st["hit"] is not None, "seconds": float(seconds),
            "cost": float(st["best"]) if st["nres"] else problem.cost(q), "q": q,
            "residual_evaluations": st["nres"], "jacobian_evaluations": st["njac"], "stopped": st["why"]}


# --------------------------------------------------------------------------- MPC rate


def mpc_rate(task, *, updates: int = 20, initial_iterations: int | None = 20, seed: int = 0,
             workers: int | None = None, horizon: int | None = None) -> dict:
    """MPC update rate of ``task`` in a synchronous closed loop on its MuJoCo plant.

    ``updates`` warm-started updates (``task.iterations_per_update`` iterations each, the
    paper's one) follow a first plan of ``min(task.initial_iterations, initial_iterations)``
    iterations; the plant advances ``max(task.lag, task.update_period)`` simulated seconds
    between updates under the planner's PD + feedforward policy.

    Returns:
      ``{"mpc_hz" (1 / median update wall time), "update_ms" (median), "update_ms_p95",
      "updates", "failed_updates", "update_breakdown_ms", "workers"}``.

    Raises:
      ParameterError: ``updates`` < 1.
    """
    from ..model import load_model
    from ..mpc import MPCSettings, run_mpc

    if isinstance(updates, bool) or int(updates) != updates or updates < 1:
        raise ParameterError(f"updates must be a positive integer, got {updates!r}")
    workers = (os.cpu_count() or 1) if workers is None else int(workers)
    overrides = {}
    if initial_iterations is not None:
        overrides["initial_iterations"] = max(1, min(int(task.initial_iterations), int(initial_iterations)))
    planner = _build_planner(task, workers=workers, horizon=horizon, **overrides)
    plant = load_model(task.model)
    import mujoco

    data = mujoco.MjData(plant)
    task.initial_state(plant, data, np.random.default_rng(seed))
    mujoco.mj_forward(plant, data)
    period = max(float(task.lag), float(task.update_period))
    settings = MPCSettings(duration=int(updates) * period, mode="sync", lag=float(task.lag),
                           update_period=float(task.update_period))
    try:
        result = run_mpc(planner, plant, data, settings)
    finally:
        planner.problem.close()  # shut its thread pool down
    it = result.iteration_ms()
    return {"mpc_hz": float(1e3 / np.median(it)) if it.size else None,
            "update_ms": float(np.median(it)) if it.size else None,
            "update_ms_p95": float(np.percentile(it, 95)) if it.size else None,
            "updates": int(it.size), "failed_updates": int(result.failed_updates),
            "update_breakdown_ms": result.breakdown_ms(), "workers": workers}


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


def horizon_sweep(tasks, horizons=SWEEP_HORIZONS, *, iterations: int = SWEEP_ITERATIONS, methods=METHODS,
                  workers: int | None = None, progress_cb=None) -> tuple[list[dict], list[dict]]:
    """Time per iteration against the planning horizon, per underactuation treatment (Fig. 4).

    For every task and horizon ``T`` the task's open-loop problem from seed 0
    (:func:`open_loop_problem` with ``horizon=T``) is solved for ``iterations`` iterations with
    each method; the point is the median wall time of the iterations that linearized
    (:func:`iteration_breakdown`).

    Args:
      tasks: :class:`~contactopt.tasks.idto_tasks.IDTOTask` s.
      horizons: horizons in steps (each ≥ 2).
      iterations: iterations per point (all run; no convergence test).
      methods: subset of ``("penalty", "constrained")``.
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
                    res = IDTOSolver(planner.problem, _options(planner, method)).solve(
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


def plot_horizon_sweep(rows: list[dict], fits: list[dict], path) -> None:
    """The paper's Fig. 4: milliseconds per iteration against horizon (log–log), one panel per
    task, one line per method, the fitted exponent in the legend.  ``path``: PNG (atomic write)."""
    from ..plots import new_figure, save_figure

    names = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = new_figure(len(names), row_height=2.6)
    styles = {"penalty": ("tab:blue", "penalty"), "constrained": ("tab:orange", "Lagrange multipliers")}
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
      task: an :class:`~contactopt.tasks.idto_tasks.IDTOTask`.
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
      ``{"tasks": [row, ...], "quick", "settings", "cpu_count", "blas_threads_limited", "targets"}``
      with rows as :func:`benchmark_task`; with ``horizon_sweep``: ``{"tasks": [], "horizon_sweep":
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
    with progress_bar(total=PHASES_PER_TASK * len(tasks), desc="bench idto", unit="phase", enable=progress) as bar, \
            single_threaded_blas() as limited:
        for task in tasks:
            rows.append(benchmark_task(task, settings=s, plots=plots, progress_cb=lambda: bar.update(1)))
    return {"tasks": rows, "quick": bool(quick), "settings": s, "cpu_count": os.cpu_count(),
            "blas_threads_limited": limited,
            "targets": {"mpc_hz": MPC_TARGETS_HZ, "speedup_vs_generic": SPEEDUP_TARGET}}


def _run_horizon_sweep(models, *, progress, plots, quick: bool) -> dict:
    tasks = idto_tasks(models or SWEEP_TASKS)
    horizons = SWEEP_HORIZONS[:3] if quick else SWEEP_HORIZONS
    iterations = 3 if quick else SWEEP_ITERATIONS
    with progress_bar(total=len(tasks) * len(horizons), desc="bench idto --horizon-sweep", unit="point",
                      enable=progress) as bar, single_threaded_blas() as limited:
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
            "(paper: 1 for the penalty method, 3 for Lagrange multipliers with dense algebra)")
    notes = [f"plot {result['plot']}"] if result.get("plot") else []
    return "\n".join([head, body, *notes])


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
