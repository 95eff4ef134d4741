"""IDTO MPC tasks: a declarative description of a contact-implicit MPC problem, and its runner.

Each task is an :class:`IDTOTask`: the IDTO problem (horizon ``T``, step ``h``, diagonal
weights, compliant contact parameters of Table I/II), the nominal trajectory — re-anchored
at the measured state at every update where the task asks for it — the PD gains of the
tracking policy, the seeded initial state and the success test on the plant.  The plant
is the bundled MuJoCo model with MuJoCo's own contact; the compliant contact model is only
the planner's.  :func:`run_idto_task` runs one closed loop through
:func:`contactopt.mpc.run_mpc` (sync mode: a fixed policy lag of one replan period), and
:func:`idto_runner` makes it the ``contactopt run TASK --planner idto`` runner.

The bundled IDTO tasks: :mod:`.spinner`, :mod:`.hopper`, :mod:`.quadruped`,
:mod:`.hand_ball`, :mod:`.bimanual_box` and the acrobot's IDTO planner in :mod:`.acrobot`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import mujoco
import numpy as np

from ..errors import ParameterError

__all__ = ["IDTOTask", "build_idto_planner", "run_idto_task", "idto_runner", "register_idto_task"]


@dataclass(frozen=True)
class IDTOTask:
    """A closed-loop IDTO MPC task.

    Attributes:
      name, model, description, default_seconds: registry entries.
      horizon: planner steps ``T``; time_step: ``h`` [s].
      weights: keyword arguments of :class:`~contactopt.solvers.idto.IDTOProblem` (``Qq, Qv, R, Qf_q,
        Qf_v, unactuated_penalty``; scalars or ``(nv,)``).
      contact: keyword arguments of :class:`~contactopt.contact.compliant.ContactParameters` (plus optional
        ``bodies``), or None for a contact-free task.
      nominal: ``(model, T, h) -> nominal(t, x) -> (q_nom (T+1, nq), v_nom (T+1, nv))``.
      initial_state: ``(model, data, rng)`` sets ``data.qpos``/``qvel`` from a seeded generator.
      success: ``(model, data) -> bool`` on the plant; success_hold: seconds it must hold.
      failure: optional ``(model, data) -> bool`` failure test on the plant (e.g. "fell"),
        latched at its first true (see :func:`~contactopt.mpc.run_mpc`).
      initial_guess: optional ``(model, T, h) -> initial_guess(t, x) -> q (T+1, nq)``: the first
        plan's starting trajectory (default: ``q`` held; see :class:`~contactopt.mpc.IDTOPlanner`),
        or ``"nominal"``: the rows ``q_nom`` the first plan tracks, from the planner's own
        ``nominal(t, x)`` call at the reset (no second call, so a nominal with a target schedule
        or a warm-started inverse kinematics starts the plan on the rows it tracks; the task
        form's ``first_guess="reference"``).
      planner_model: optional ``(model) -> None`` that edits the planner's own model before
        the problem is built (e.g. collision filters the compliant model should see); the
        plant is never edited.
      metric: ``(model, data) -> float`` recorded on the plant.
      kp, kd: policy gains along each actuator's direction (``(nu,)`` or scalar).
      lag: sync-mode policy lag [s] (one replan period at the paper's MPC rate);
      update_period: least simulated seconds between update starts, in both modes (0: as
        soon as the last update is done — in sync mode, once its ``lag`` is over).
      min_lag: least simulated seconds between the state an update plans from and the moment
        its policy takes effect, in both modes (:func:`~contactopt.mpc.runner.planner_min_lag`);
        None (default): the task's ``lag`` (:meth:`policy_min_lag`).
      rate_target_hz: the paper's MPC rate (Table III), for the report.
      initial_iterations, iterations_per_update: solver iterations.
      solver: extra :class:`~contactopt.solvers.idto.IDTOSettings` fields.
      restart_radius: the planner's trust radius after a collapsed or failed solve
        (:class:`~contactopt.mpc.idto_planner.IDTOPlanner`; None: ``solver``'s ``initial_radius``).
      lag_compensation: the planner's (``"off"``, seconds or ``"auto"``:
        :class:`~contactopt.mpc.idto_planner.IDTOPlanner`): plan from the state predicted at the lag.
      report: ``(task, model, result, x0) -> dict`` the task's own measures.
      success_factory: optional ``(x0, seconds) -> success(model, data)`` for tests that depend
        on the initial state and the run's length (replaces ``success``).
    """

    name: str
    model: str
    description: str
    horizon: int
    time_step: float
    weights: dict
    nominal: Callable
    initial_state: Callable
    success: Callable
    contact: dict | None = None
    metric: Callable | None = None
    success_hold: float = 0.0
    default_seconds: float = 10.0
    kp: object = 0.0
    kd: object = 0.0
    lag: float = 0.01
    update_period: float = 0.01
    min_lag: float | None = None
    rate_target_hz: float = 100.0
    initial_iterations: int = 50
    iterations_per_update: int = 1
    solver: dict = field(default_factory=dict)
    restart_radius: float | None = None
    lag_compensation: object = "off"
    report: Callable | None = None
    success_factory: Callable | None = None
    failure: Callable | None = None
    planner_model: Callable | None = None
    initial_guess: Callable | str | None = None

    def policy_min_lag(self) -> float:
        """The least policy lag [s] its planner gets: ``min_lag``, or the task's ``lag`` when
        ``min_lag`` is None.

        A recipe is tuned in sync mode at the fixed ``lag``, where each plan takes over that long
        after the state it was planned from.  In asynchronous real time the lag is the planner's
        compute time, often shorter: the plant then runs the start of each plan (its first knot
        interval, from the measured state) that the tuned recipe never ran.  Holding each plan back
        to at least ``lag`` keeps real time what sync mode measured (the hopper, bimanual-box and
        hand-ball: ``docs/experiments/idto-min-lag.md``)."""
        return float(self.lag if self.min_lag is None else self.min_lag)


def _load(name: str):
    from ..model import load_model
    return load_model(name)


def build_idto_planner(task: IDTOTask, model: mujoco.MjModel | None = None, *, workers: int | None = None,
                       **overrides):
    """The :class:`~contactopt.mpc.idto_planner.IDTOPlanner` of ``task`` (``overrides``: fields of the task).

    ``workers``: threads differentiating time steps in parallel (``IDTOProblem(workers=...)``);
    None keeps the task's setting (its ``weights`` may name one; default 1).
    """
    from ..contact.compliant import CompliantContactModel, ContactParameters
    from ..mpc.idto_planner import IDTOPlanner
    from ..solvers.idto import IDTOProblem, IDTOSettings

    bad = set(overrides) - set(IDTOTask.__dataclass_fields__)
    if bad:
        raise ParameterError(f"unknown IDTO task option(s): {', '.join(sorted(bad))}")
    if overrides:
        import dataclasses
        task = dataclasses.replace(task, **overrides)
    if isinstance(task.initial_guess, str) and task.initial_guess != "nominal":
        raise ParameterError(f"initial_guess must be a callable or 'nominal', got {task.initial_guess!r}")
    m = _load(task.model) if model is None else model
    if task.planner_model is not None:
        if model is not None:
            m = copy.deepcopy(m)  # the caller's model stays as it is
        task.planner_model(m)
    contact = None
    if task.contact is not None:
        cp = dict(task.contact)
        bodies = cp.pop("bodies", None)
        contact = CompliantContactModel(m, ContactParameters(**cp), bodies=bodies)
    q0 = m.qpos0.copy()
    kwargs = dict(task.weights)
    if workers is not None:
        kwargs["workers"] = workers
    problem = IDTOProblem(m, task.horizon, task.time_step, q0, contact=contact, **kwargs)
    options = IDTOSettings(**{"convergence": None, **task.solver})
    nominal = task.nominal(m, task.horizon, task.time_step)
    if task.initial_guess is None:
        guess = None
    elif isinstance(task.initial_guess, str):
        # the nominal rows the planner has just set for this plan (``reset`` measures, and so
        # calls the nominal, before it asks for the guess): the first plan starts from the very
        # rows it tracks.  Calling the nominal again could give others: one that keeps state
        # between calls (bimanual-box's grasp inverse kinematics, warm-started from its last
        # solution) moves on by one more call.
        guess = lambda t, x: problem.q_nom.copy()  # noqa: E731
    else:
        guess = task.initial_guess(m, task.horizon, task.time_step)
    planner = IDTOPlanner(problem, plant_model=m, options=options, initial_iterations=task.initial_iterations,
                          iterations_per_update=task.iterations_per_update, nominal=nominal,
                          kp=task.kp, kd=task.kd, restart_radius=task.restart_radius,
                          lag_compensation=task.lag_compensation, initial_guess=guess)
    planner.min_lag = task.policy_min_lag()  # read by the runner (runner.planner_min_lag)
    return planner


def run_idto_task(task: IDTOTask, *, seconds: float | None = None, seed: int = 0, mode: str = "sync",
                  lag=None, slowdown: float = 1.0, update_period: float | None = None, pushes=(),
                  stop_on_success: bool = False, mass_scale: float = 1.0, friction_scale: float = 1.0,
                  gain_scale: float = 1.0, latency: float = 0.0, **overrides):
    """Run ``task`` closed loop with IDTO MPC.

    Args:
      seconds: simulated duration (default ``task.default_seconds``); seed: seeds the initial state.
      mode, lag, slowdown: see :class:`~contactopt.mpc.MPCSettings` (lag default: the task's fixed lag).
      update_period: simulated seconds between updates, both modes (default the task's).
      pushes: :class:`~contactopt.mpc.Push` es on the plant.
      mass_scale, friction_scale, gain_scale: model errors of the plant only
        (:func:`~contactopt.mpc.perturb_model`).
      latency: extra seconds between each plan and its application that the planner is not told
        about (:attr:`~contactopt.mpc.MPCSettings.added_latency`).
      overrides: fields of ``task`` (e.g. ``horizon``, ``kp``).

    Returns:
      ``(MPCResult, plant_model, x0)`` with ``x0`` the initial ``[qpos, qvel]``.
    """
    from ..mpc import MPCSettings, perturb_model, run_mpc

    bad = set(overrides) - set(IDTOTask.__dataclass_fields__)
    if bad:
        raise ParameterError(f"unknown IDTO task option(s): {', '.join(sorted(bad))}")
    if overrides:  # the plant side (success, metric, failure, lag, ...) sees them too
        import dataclasses
        task = dataclasses.replace(task, **overrides)
    seconds = task.default_seconds if seconds is None else float(seconds)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ParameterError(f"seconds must be positive, got {seconds}")
    plant = _load(task.model)
    if mass_scale != 1.0 or friction_scale != 1.0 or gain_scale != 1.0:
        plant = perturb_model(plant, mass_scale=mass_scale, friction_scale=friction_scale, gain_scale=gain_scale)
    data = mujoco.MjData(plant)
    task.initial_state(plant, data, np.random.default_rng(seed))
    mujoco.mj_forward(plant, data)
    x0 = np.concatenate([data.qpos, data.qvel])
    planner = build_idto_planner(task, _load(task.model))
    settings = MPCSettings(duration=seconds, mode=mode, lag=task.lag if lag is None else lag,
                           update_period=task.update_period if update_period is None else float(update_period),
                           slowdown=slowdown, pushes=tuple(pushes), success_hold=task.success_hold,
                           stop_on_success=stop_on_success, added_latency=latency)
    success = task.success if task.success_factory is None else task.success_factory(x0, seconds)
    result = run_mpc(planner, plant, data, settings, success=success, metric=task.metric, failure=task.failure)
    return result, plant, x0


def idto_runner(task: IDTOTask):
    """The ``contactopt run`` runner of ``task`` with the IDTO planner."""

    def run(*, seconds=None, seed=0, video=None, plot=None, mode="sync", slowdown=1.0, lag=None, pushes=(),
            mass_scale=1.0, friction_scale=1.0, gain_scale=1.0, latency=0.0, **kw):
        from ..mpc import model_error
        from .mpc_task import write_outputs

        errors = model_error(mass_scale, friction_scale, gain_scale, latency)
        result, plant, x0 = run_idto_task(task, seconds=seconds, seed=seed, mode=mode, slowdown=slowdown,
                                          lag=lag, pushes=pushes, mass_scale=mass_scale,
                                          friction_scale=friction_scale, gain_scale=gain_scale,
                                          latency=latency, **kw)
        report = {"task": task.name, "planner": "idto", **result.summary()}
        if errors:
            report["model_error"] = errors
        it = result.iteration_ms()
        report["mpc_rate_hz"] = float(1e3 / np.median(it)) if it.size else None
        report["mpc_rate_target_hz"] = task.rate_target_hz
        report["horizon_steps"] = task.horizon
        report["time_step"] = task.time_step
        report["seed"] = seed
        if task.report is not None:
            report.update(task.report(task, plant, result, x0))
        return write_outputs(report, task.name, plant, result, video, plot)

    run.task = task
    return run


def register_idto_task(task: IDTOTask) -> None:
    """Register ``task``'s IDTO runner (:func:`idto_runner`) in the task registry under ``task.name``,
    with its planner-independent form (:func:`contactopt.tasks.idto_form.as_task`) unless the
    scenario already has one."""
    from functools import partial

    from . import register_task
    from .idto_form import as_task

    register_task(task.name, "idto", idto_runner(task), model=task.model, description=task.description,
                  default_seconds=task.default_seconds, task_factory=partial(as_task, task))
