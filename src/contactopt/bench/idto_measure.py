"""The measurements of ``contactopt bench idto`` (:mod:`contactopt.bench.idto_bench`): the IDTO
tasks and their open-loop problems, our solver's convergence, iteration breakdown and solve time,
the generic least-squares solvers on the same problem, and the MPC rate of a task."""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np

from ..errors import ContactoptError, ParameterError

METHODS = ("penalty", "constrained")


# --------------------------------------------------------------------------- tasks and problems


def idto_tasks(names=None) -> list:
    """The :class:`~contactopt.tasks.idto_task.IDTOTask` s registered with an ``idto`` runner.

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
    from ..tasks.idto_task import build_idto_planner

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
      task: an :class:`~contactopt.tasks.idto_task.IDTOTask`.
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


# --------------------------------------------------------------------------- the convex model's Newton step

#: The convex model paper's figure (its abstract and §I): a full Newton step of trajectory
#: optimization for a 3D walking gait, finite differences and sparse Hessian factorization
#: included, in 160 ms on a 12-core PC.
PAPER_NEWTON_STEP = {"seconds": 0.160, "cores": 12}


def convex_newton_step(task_name: str = "quadruped", *, horizon: int = 40, iterations: int = 3,
                       workers: int | None = None, kappa: float = 0.1) -> dict:
    """Time of one full Newton step of offline trajectory optimization on the convex contact model.

    Builds ``contactopt optimize TASK --backend convex`` 's problem
    (:func:`contactopt.offline.build_offline_problem`: ``horizon`` knots of the task's time step,
    barrier weight ``kappa``) and runs ``iterations`` solver iterations; a full Newton step is an
    iteration that linearizes (:func:`contactopt.offline.newton_step_times`).  The per-core
    comparison with the paper: ``core_seconds = median step [s] × workers`` (an upper bound: only
    the finite-difference Jacobian runs on ``workers`` threads) against ``0.160 s × 12 cores``.

    Returns:
      ``{"task", "backend", "kappa", "horizon_steps", "time_step", "nv", "workers", "newton_steps",
      "newton_step_ms" (median), "newton_step_ms_min", "breakdown_ms": {stage: median ms},
      "core_seconds", "paper_core_seconds", "per_core_ratio"}`` (``per_core_ratio`` > 1: more
      core-seconds per step than the paper).

    Raises:
      ParameterError: ``iterations`` or ``horizon`` below 1 (and the offline problem's own errors).
    """
    from ..offline import build_offline_problem, newton_step_times, optimize_offline

    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ParameterError(f"iterations must be an integer >= 1, got {iterations!r}")
    workers = os.cpu_count() or 1 if workers is None else workers
    op = build_offline_problem(task_name, backend="convex", horizon=horizon, kappa=kappa, workers=workers)
    try:
        result, _ = optimize_offline(op, iterations=iterations)
        pr = op.problem
        steps = newton_step_times(result)
        row = {"task": op.name, "backend": "convex", "kappa": float(kappa), "horizon_steps": int(pr.T),
               "time_step": float(pr.h), "nv": int(pr.nv), "workers": int(workers),
               "newton_steps": steps["count"], "newton_step_ms": steps["median_ms"],
               "newton_step_ms_min": steps["min_ms"], "breakdown_ms": steps["breakdown_ms"]}
    finally:
        op.problem.close()
    paper = PAPER_NEWTON_STEP["seconds"] * PAPER_NEWTON_STEP["cores"]
    core_s = None if row["newton_step_ms"] is None else row["newton_step_ms"] / 1e3 * workers
    row.update(core_seconds=core_s, paper_core_seconds=paper,
               per_core_ratio=None if core_s is None else core_s / paper)
    return row
