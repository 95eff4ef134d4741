"""Offline IDTO trajectory optimization of a task (``contactopt optimize``).

One open-horizon solve instead of a closed loop: the task's IDTO problem (horizon ``T`` knots at
step ``h``) is built from the task's initial state (seed 0) and nominal, optionally moved to
another inverse-dynamics backend (:meth:`~contactopt.solvers.idto.IDTOProblem.with_backend`:
``compliant``, ``mujoco`` or ``convex``), and solved from the task's initial guess — directly,
or on the convex backend by κ-continuation
(:func:`~contactopt.solvers.idto.solve_with_continuation`).

A task has an *IDTO form* when it is a bundled task with an IDTO runner built from an
:class:`~contactopt.tasks.idto_task.IDTOTask` (its problem, weights, contact, nominal and
initial guess), or a planner-independent :class:`~contactopt.task.Task` (a bundled task's
``task_factory`` or a task file's ``TASK``), built as ``contactopt run --planner idto`` builds
it (:func:`contactopt.mpc.registry.make`).

Playback (:func:`playback_in_mujoco`): the plan is run open loop in the MuJoCo plant — no
replanning — by the planner's own tracking policy (cubic spline of ``q, v`` and the
feedforward controls ``u = B⁺τ``, plus the task's PD gains along the actuators), for the plan's
``T·h`` seconds; or (:func:`plan_states`) the planned configurations are shown kinematically.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import mujoco
import numpy as np

from .errors import ContactoptError, ParameterError

__all__ = [
    "BACKENDS",
    "OfflineProblem",
    "OfflineUnit",
    "build_offline_problem",
    "idto_task_names",
    "newton_step_times",
    "optimize_many",
    "optimize_offline",
    "plan_offline_units",
    "plan_states",
    "playback_in_mujoco",
    "report",
    "root_displacement",
    "run_offline_unit",
    "timed",
    "write_states_video",
]

BACKENDS = ("convex", "compliant", "mujoco")


class NoIDTOFormError(ContactoptError):
    """The task has no IDTO form (no IDTO runner with an IDTO task, no planner-independent form)."""


@dataclass
class OfflineProblem:
    """An offline IDTO problem of a task.

    Attributes:
      name: the task's name.
      problem: the :class:`~contactopt.solvers.idto.IDTOProblem` (initial state and nominal set).
      plant: the plant ``MjModel`` (playback, video).
      x0: ``(nq + nv,)`` the initial state ``[qpos, qvel]``.
      q_guess: ``(T+1, nq)`` the starting trajectory.
      settings: :class:`~contactopt.solvers.idto.IDTOSettings` of the task's planner.
      iterations: the task's first-plan iteration count (default of ``--iterations``).
      kp, kd: the task's tracking gains (playback).
    """

    name: str
    problem: object
    plant: mujoco.MjModel
    x0: np.ndarray
    q_guess: np.ndarray
    settings: object
    iterations: int
    kp: object
    kd: object


def idto_task_names() -> list[str]:
    """Bundled tasks with an IDTO form (module docstring), sorted."""
    from .tasks import available_tasks

    out = []
    for name, spec in available_tasks().items():
        runner = spec.runners.get("idto")
        if (runner is not None and getattr(runner, "task", None) is not None) or spec.task_factory is not None:
            out.append(name)
    return sorted(out)


def _resolve(name: str):
    """``(IDTOTask, None)`` or ``(None, Task)`` of a bundled task name or a task file."""
    import os

    from .tasks import load_task
    from .tasks.idto_task import IDTOTask

    if name.endswith(".py") or os.sep in name:
        from .task import load_task_file

        return None, _idto_can_run(load_task_file(name))
    spec = load_task(name)
    runner = spec.runners.get("idto")
    task = getattr(runner, "task", None) if runner is not None else None
    if isinstance(task, IDTOTask):
        return task, None
    if spec.task_factory is not None:
        return None, _idto_can_run(spec.task())
    raise NoIDTOFormError(f"task {name!r} has no IDTO form; tasks that have one: {', '.join(idto_task_names())} "
                          f"(or a task file)")


def _idto_can_run(task):
    """``task``, after the checks IDTO makes before planning (e.g. no cost term over accelerations):
    a task it cannot run fails once, here, not in every seed of a dataset."""
    from .mpc.registry import parse_settings

    parse_settings("idto", task)
    return task


def _check_int(name: str, value, lo: int = 1) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ParameterError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def build_offline_problem(name: str, *, backend: str = "compliant", horizon: int | None = None,
                          kappa: float = 0.1, workers: int = 1, seed: int = 0) -> OfflineProblem:
    """Build the offline IDTO problem of a task (module docstring).

    Args:
      name: bundled task name or task file path.
      backend: ``"compliant"`` (the task's own planner problem), ``"mujoco"`` or ``"convex"``.
      horizon: knots ``T ≥ 1`` (default: the task's).
      kappa: the convex backend's barrier weight κ > 0 [impulse × velocity] (other parameters:
        :class:`~contactopt.contact.ConvexContactModel` defaults).
      workers: threads differentiating time steps (≥ 1).
      seed: seed of the task's initial state.

    Raises:
      UnknownTaskError, TaskFileError: no such task; NoIDTOFormError: a task without an IDTO form;
      ParameterError: a bad backend, horizon, κ or workers.
    """
    from .contact import ConvexContactModel

    if backend not in BACKENDS:
        raise ParameterError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    horizon = _check_int("horizon", horizon)
    workers = _check_int("workers", workers)
    if backend == "convex":
        cc = ConvexContactModel(kappa=kappa)  # validates κ
    idto_task, task = _resolve(name)
    if idto_task is not None:
        from .tasks.idto_task import _load, build_idto_planner

        plant = _load(idto_task.model)
        data = mujoco.MjData(plant)
        idto_task.initial_state(plant, data, np.random.default_rng(seed))
        mujoco.mj_forward(plant, data)
        over = {} if horizon is None else {"horizon": horizon}
        planner = build_idto_planner(idto_task, _load(idto_task.model), workers=workers, **over)
        iterations, task_name = idto_task.initial_iterations, idto_task.name
    else:
        from .mpc import registry

        plant = task.load_plant()
        data = mujoco.MjData(plant)
        task.reset(plant, data, seed)
        planner = registry.make("idto", task, plant=plant, workers=workers)
        if horizon is not None and horizon != planner.problem.T:
            h = planner.problem.h
            planner.close()
            planner = registry.make("idto", task, plant=plant, workers=workers, horizon=horizon * h)
            if planner.problem.T != horizon:
                raise ParameterError(f"horizon: {horizon} knots could not be set (got {planner.problem.T})")
        iterations, task_name = planner.initial_iterations, task.name
    problem = planner.problem
    nq, nv = plant.nq, plant.nv
    x0 = np.concatenate([data.qpos, data.qvel])
    problem.set_initial_state(x0[:nq], x0[nq:nq + nv])
    if planner.nominal is not None:
        problem.set_nominal(*planner.nominal(0.0, x0))
    if planner.initial_guess is not None:
        q_guess = np.array(planner.initial_guess(0.0, x0), dtype=float)
    else:
        q_guess = np.tile(problem.q_init, (problem.T + 1, 1))
    q_guess[0] = problem.q_init
    settings = planner.solver.options
    if backend != "compliant":
        new = problem.with_backend(backend, convex_contact=cc if backend == "convex" else None)
        problem.close()
        problem = new
    return OfflineProblem(task_name, problem, plant, x0, q_guess, settings, int(iterations), planner.kp, planner.kd)


def newton_step_times(result) -> dict:
    """Wall time of the full Newton steps of an :class:`~contactopt.solvers.idto.IDTOResult` [ms].

    A full Newton step is an iteration that linearizes (residual + finite-difference Jacobian),
    assembles and factorizes ``H = JᵀJ``, solves for the dogleg step and evaluates the trial
    point: ``Σ times`` of each iteration whose ``jacobian`` time is > 0 (an iteration after a
    rejected step reuses the factorization and only retries the trial point).

    Returns:
      ``{"count", "median_ms", "mean_ms", "min_ms", "breakdown_ms": {key: median}}`` (None values
      when no iteration linearized).
    """
    steps = [lg.times for lg in result.log if lg.times.get("jacobian", 0.0) > 0]
    if not steps:
        return {"count": 0, "median_ms": None, "mean_ms": None, "min_ms": None, "breakdown_ms": {}}
    tot = np.array([sum(t.values()) for t in steps]) * 1e3
    keys = sorted({k for t in steps for k in t})
    return {"count": len(steps), "median_ms": float(np.median(tot)), "mean_ms": float(tot.mean()),
            "min_ms": float(tot.min()),
            "breakdown_ms": {k: float(np.median([t.get(k, 0.0) for t in steps]) * 1e3) for k in keys}}


def optimize_offline(op: OfflineProblem, *, iterations: int | None = None, continuation=None):
    """Solve ``op`` (module docstring).

    Args:
      iterations: total iteration budget (default ``op.iterations``).
      continuation: a :class:`~contactopt.solvers.idto.KappaSchedule` (convex backend only), or None.

    Returns:
      ``(IDTOResult, stages)``: ``stages`` the :class:`~contactopt.solvers.idto.ContinuationStage`
      tuple (empty without continuation).
    """
    from .solvers.idto import IDTOSolver, KappaSchedule, solve_with_continuation

    iterations = op.iterations if iterations is None else _check_int("iterations", iterations)
    solver = IDTOSolver(op.problem, op.settings)
    if continuation is None:
        return solver.solve(op.q_guess, max_iterations=iterations), ()
    if not isinstance(continuation, KappaSchedule):
        raise ParameterError(f"continuation must be a KappaSchedule, got {type(continuation).__name__}")
    out = solve_with_continuation(solver, op.q_guess, continuation, max_iterations=iterations)
    return out.result, out.stages


def playback_in_mujoco(op: OfflineProblem, result) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the plan open loop in the MuJoCo plant for ``T·h`` seconds (module docstring).

    Controls ``u(t) = clip(u_ff(t) + K_p (q_d(t) ⊖ q) + K_d (v_d(t) − v))`` of
    :class:`~contactopt.mpc.idto_planner.IDTOPolicy` (``q_d, v_d, u_ff`` cubic splines of the
    plan's knots, ``u_ff = B⁺τ``), evaluated at every plant step (the plant's own time step).

    Returns:
      ``(time (N,), qpos (N, nq), qvel (N, nv))`` of the plant, from ``x0``.
    """
    from .mpc.idto_planner import IDTOPolicy, ServoFeedforward

    plant, pr = op.plant, op.problem
    u_ff = ServoFeedforward(plant)(result.q, result.v, result.tau)
    policy = IDTOPolicy(plant, 0.0, pr.h, result.q, result.v, u_ff, op.kp, op.kd)
    data = mujoco.MjData(plant)
    nq, nv = plant.nq, plant.nv
    data.qpos[:], data.qvel[:] = op.x0[:nq], op.x0[nq:nq + nv]
    mujoco.mj_forward(plant, data)
    n = int(round(pr.T * pr.h / plant.opt.timestep))
    ts, qs, vs = [0.0], [data.qpos.copy()], [data.qvel.copy()]
    for _ in range(n):
        x = np.concatenate([data.qpos, data.qvel])
        if plant.nu:
            data.ctrl[:] = policy.control(data.time, x)
        mujoco.mj_step(plant, data)
        if not (np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all()):
            break
        ts.append(float(data.time))
        qs.append(data.qpos.copy())
        vs.append(data.qvel.copy())
    return np.array(ts), np.array(qs), np.array(vs)


def plan_states(model: mujoco.MjModel, q: np.ndarray, h: float, fps: float) -> tuple[np.ndarray, np.ndarray]:
    """The plan's configurations at ``fps`` frames per second: ``q(t) = q_i ⊕ α (q_{i+1} ⊖ q_i)``,
    ``i = ⌊t/h⌋``, ``α = t/h − i`` (geodesic interpolation of the knots ``q (T+1, nq)``).

    Returns:
      ``(time (N,), qpos (N, nq))``.
    """
    T = q.shape[0] - 1
    ts = np.arange(0.0, T * h + 1e-9, 1.0 / fps)
    out = np.empty((ts.size, model.nq))
    dq = np.empty(model.nv)
    for k, t in enumerate(ts):
        i = min(int(t / h), T - 1)
        a = t / h - i
        mujoco.mj_differentiatePos(model, dq, 1.0, q[i], q[i + 1])
        out[k] = q[i]
        mujoco.mj_integratePos(model, out[k], dq, a)
    return ts, out


def write_states_video(model: mujoco.MjModel, time_s, qpos, path, *, fps: float = 30.0, width: int = 640,
                       height: int = 480, camera: str | None = "video") -> int:
    """Render states ``qpos (N, nq)`` at times ``time_s (N,)`` [s] into an MP4 at ``fps``
    frames per second (nearest earlier state per frame); returns the frame count."""
    from .render import OffscreenRenderer, VideoWriter

    time_s = np.asarray(time_s, dtype=float)
    frame_times = np.arange(time_s[0], time_s[-1] + 1e-9, 1.0 / fps)
    idx = np.minimum(np.searchsorted(time_s, frame_times - 1e-9), time_s.size - 1)
    data = mujoco.MjData(model)
    n = 0
    with OffscreenRenderer(model, width, height, camera=camera) as renderer, VideoWriter(path, fps) as video:
        for i in idx:
            data.qpos[:] = qpos[i]
            mujoco.mj_forward(model, data)
            video.append(renderer.render(data))
            n += 1
    return n


def root_displacement(model: mujoco.MjModel, qpos: np.ndarray) -> list[float] | None:
    """``qpos[-1, :3] − qpos[0, :3]`` [m] when the first joint is a free joint (a floating base)."""
    if model.njnt and model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE and qpos.shape[0]:
        a = int(model.jnt_qposadr[0])
        return [float(x) for x in qpos[-1, a:a + 3] - qpos[0, a:a + 3]]
    return None


def report(op: OfflineProblem, result, stages, *, backend: str, wall_time: float) -> dict:
    """JSON-ready summary of an offline solve (keys documented in ``contactopt optimize --help``)."""
    steps = newton_step_times(result)
    pr = op.problem
    out = {"task": op.name, "backend": backend, "horizon_steps": pr.T, "time_step": pr.h,
           "plan_seconds": pr.T * pr.h, "nv": pr.nv, "workers": pr.workers,
           "kappa": pr.convex_contact.kappa if backend == "convex" else None,
           "cost_initial": float(result.log[0].cost) if result.log else float(result.cost),
           "cost": float(result.cost), "status": result.status.value, "iterations": int(result.iterations),
           "newton_steps": steps["count"], "newton_step_ms": steps["median_ms"],
           "newton_step_ms_mean": steps["mean_ms"], "newton_step_breakdown_ms": steps["breakdown_ms"],
           "solve_seconds": float(result.solve_time), "wall_seconds": float(wall_time),
           "max_unactuated_force": float(pr.unactuated_violation(result.tau)),
           "plan_root_displacement_m": root_displacement(pr.model, result.q)}
    if stages:
        out["stages"] = [st.summary() for st in stages]
    return out


def timed(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), seconds)``."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


# --------------------------------------------------------------------------- many initial states


@dataclass(frozen=True)
class OfflineUnit:
    """One offline solve of a dataset: a task from one seeded initial state.

    A unit names its task by reference (a bundled task name or a task file's absolute path), so a
    worker process — local or on a Ray node — builds the problem itself.  :attr:`id` hashes
    everything that decides the outcome, so a re-run recognises the units already in its output.

    Attributes:
      task: bundled task name or absolute task-file path.
      seed: seed of the task's initial state.
      backend: ``convex``, ``compliant`` or ``mujoco``.
      horizon: knots ``T`` (None: the task's).
      iterations: solver iteration budget (None: the task's first-plan count).
      kappa: the convex backend's κ (final κ under continuation).
      continuation: ``(kappa_start, kappa_end, factor)`` or None.
      trajectories: folder for the per-unit ``.npz`` (None: not saved).
      index: position in the dataset (output order); not part of the id.
    """

    task: str
    seed: int
    backend: str = "convex"
    horizon: int | None = None
    iterations: int | None = None
    kappa: float = 0.1
    continuation: tuple | None = None
    trajectories: str | None = None
    index: int = 0

    @property
    def id(self) -> str:
        """Hash of the task reference, seed, backend, horizon, iterations, κ (convex backend only),
        continuation and whether trajectories are saved (a re-run that asks for them solves again)."""
        import hashlib
        import json

        key = json.dumps({"kind": "optimize", "task": self.task, "seed": self.seed, "backend": self.backend,
                          "horizon": self.horizon, "iterations": self.iterations,
                          "kappa": self.kappa if self.backend == "convex" else None,
                          "continuation": list(self.continuation) if self.continuation else None,
                          "saves_trajectory": self.trajectories is not None},
                         sort_keys=True)
        return hashlib.sha1(key.encode()).hexdigest()[:16]

    def describe(self) -> dict:
        """The row's identifying fields."""
        return {"id": self.id, "task": self.task, "seed": self.seed, "backend": self.backend,
                "horizon": self.horizon, "iterations_budget": self.iterations, "kappa": self.kappa,
                "continuation": list(self.continuation) if self.continuation else None}


def plan_offline_units(task: str, seeds, *, backend: str = "convex", horizon: int | None = None,
                       iterations: int | None = None, kappa: float = 0.1, continuation=None,
                       trajectories=None) -> tuple[OfflineUnit, ...]:
    """The units of an offline dataset: one per seed of ``seeds`` (an iterable of ints ≥ 0).

    The task is resolved here (an unknown task, a file without ``TASK`` or a task without an IDTO
    form fails before any unit runs); a task file becomes its absolute path.

    Raises:
      ParameterError: bad seeds, backend, horizon, iterations or κ, a missing ``trajectories``
        folder; UnknownTaskError / TaskFileError / NoIDTOFormError as :func:`build_offline_problem`.
    """
    from pathlib import Path

    from .solvers.idto import KappaSchedule

    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ParameterError("the seed range is empty")
    if min(seeds) < 0:
        raise ParameterError(f"seeds must be >= 0, got {min(seeds)}")
    if backend not in BACKENDS:
        raise ParameterError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    horizon, iterations = _check_int("horizon", horizon), _check_int("iterations", iterations)
    if not (isinstance(kappa, (int, float)) and np.isfinite(kappa) and kappa > 0):
        raise ParameterError(f"kappa must be a positive number, got {kappa!r}")
    if continuation is not None:
        if isinstance(continuation, KappaSchedule):
            continuation = (continuation.kappa_start, continuation.kappa_final, continuation.factor)
        KappaSchedule(*continuation)  # validates it
        continuation = tuple(float(c) for c in continuation)
    if trajectories is not None:
        if not Path(trajectories).is_dir():
            raise ParameterError(f"--save-trajectories: directory {trajectories} does not exist")
        trajectories = str(Path(trajectories).resolve())
    _resolve(task)  # fail early: unknown task, bad file, no IDTO form
    ref = str(Path(task).resolve()) if (task.endswith(".py") or os.sep in task) else task
    return tuple(OfflineUnit(ref, s, backend, horizon, iterations, float(kappa), continuation, trajectories, i)
                 for i, s in enumerate(seeds))


def _trajectory_name(unit: OfflineUnit) -> str:
    from pathlib import Path

    stem = Path(unit.task).stem if unit.task.endswith(".py") else unit.task
    return f"{stem}-{unit.backend}-seed{unit.seed}-{unit.id[:8]}.npz"


def run_offline_unit(unit: OfflineUnit) -> dict:
    """Solve one :class:`OfflineUnit` (here or in a sweep-engine worker; one thread).

    The row is :func:`report`'s summary (cost, status, iterations, Newton-step times, ...) plus the
    unit's fields, ``playback_root_displacement_m`` (the plan run open loop in the MuJoCo plant,
    :func:`playback_in_mujoco`), ``trajectory`` (the ``.npz`` path or None) and ``error`` (None, or
    ``"error: …"`` when building or solving raised: a row, never a crashed dataset).

    The ``.npz`` holds ``time (T+1,)`` [s], ``qpos (T+1, nq)``, ``qvel (T+1, nv)``, ``tau (T, nv)``
    [N, N·m], ``contact (T, nv)``, ``ctrl (T, nu)`` (the feedforward ``u = B⁺τ`` of each step),
    ``x0``, ``cost_log (iterations+1,)`` and the playback ``playback_time``, ``playback_qpos``,
    ``playback_qvel``.
    """
    from pathlib import Path

    from .mpc.idto_planner import ServoFeedforward
    from .solvers.idto import KappaSchedule
    from .sweep.units import crash_if_armed, error_kind

    crash_if_armed()  # the tests' fault hook (a worker killed mid-dataset); inert otherwise
    row = unit.describe()
    t0 = time.perf_counter()
    try:
        op = build_offline_problem(unit.task, backend=unit.backend, horizon=unit.horizon, kappa=unit.kappa,
                                   workers=1, seed=unit.seed)
        try:
            schedule = KappaSchedule(*unit.continuation) if unit.continuation else None
            result, stages = optimize_offline(op, iterations=unit.iterations, continuation=schedule)
        finally:
            op.problem.close()
        row.update(report(op, result, stages, backend=unit.backend, wall_time=time.perf_counter() - t0))
        row["task"] = unit.task
        ts, qs, vs = playback_in_mujoco(op, result)
        row["playback_seconds"] = float(ts[-1])
        row["playback_root_displacement_m"] = root_displacement(op.plant, qs)
        row["converged"] = bool(result.converged)
        row["finite"] = bool(np.isfinite(result.q).all() and np.isfinite(result.cost))
        row["error"] = None
        row["trajectory"] = None
        if unit.trajectories is not None:
            path = Path(unit.trajectories) / _trajectory_name(unit)
            u_ff = ServoFeedforward(op.plant)(result.q, result.v, result.tau)
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
            try:
                np.savez_compressed(tmp, time=np.arange(result.q.shape[0]) * op.problem.h, qpos=result.q,
                                    qvel=result.v, tau=result.tau, contact=result.contact, ctrl=np.asarray(u_ff),
                                    x0=op.x0, cost_log=np.array([lg.cost for lg in result.log] + [result.cost]),
                                    playback_time=ts, playback_qpos=qs, playback_qvel=vs)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            row["trajectory"] = str(path)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one unit's failure is a row, not a crashed dataset
        row.update({"error": error_kind(exc), "trajectory": None, "converged": False, "finite": False,
                    "wall_seconds": time.perf_counter() - t0})
    row["success"] = row["error"] is None and row["finite"]
    return row


def offline_lost_row(unit: OfflineUnit, lost) -> dict:
    """The row of a unit whose worker died on every attempt (run again by the next resume)."""
    return {**unit.describe(), "error": f"error: worker lost: {lost.message}", "lost": True, "success": False,
            "converged": False, "finite": False, "trajectory": None}


def optimize_many(units, out, *, workers: int = 1, ray: bool = False, address: str | None = None,
                  progress: bool | None = None) -> dict:
    """Solve ``units`` (:func:`plan_offline_units`) on the sweep engine into the output ``out``.

    Local process pool (``workers`` processes, each solve single-threaded) or Ray (``ray``, joining
    ``address`` when given); the output (a path ``FILE.jsonl`` / ``FILE.parquet``, or a
    :class:`~contactopt.sweep.SweepOutput`) holds one row per unit, is resumable (units already in it
    are skipped) and written atomically at the end.

    Returns:
      :func:`contactopt.sweep.run_sweep` 's summary: ``rows`` (plan order), ``skipped``, ``ran``,
      ``wall_s``, ``units_per_s``, ``engine``, ``workers``, ``loadavg_1min``.
    """
    from types import SimpleNamespace

    from .sweep import SweepOutput, make_engine, run_sweep

    output = out if isinstance(out, SweepOutput) else SweepOutput(out)
    with make_engine(workers, ray=ray, address=address) as engine:
        return run_sweep(SimpleNamespace(units=tuple(units)), output, engine, progress=progress,
                         run=run_offline_unit, lost_row=offline_lost_row, desc="optimize")
