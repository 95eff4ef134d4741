"""IDTO contact-implicit MPC tasks of the seed paper: spinner, hopper (``--planner idto``).

Each task is an :class:`IDTOTask`: the IDTO problem (horizon ``T``, step ``h``, diagonal
weights, compliant contact parameters of Table I/II), the nominal trajectory — re-anchored
at the measured state at every update where the task asks for it — the PD gains of the
tracking policy, the seeded initial state and the success test on the plant.  The plant
is the bundled MuJoCo model with MuJoCo's own contact; the compliant contact model is only
the planner's.  :func:`run_idto_task` runs one closed loop through
:func:`contactopt.mpc.run_mpc` (sync mode: a fixed policy lag of one replan period).

Tasks:

* ``spinner`` — keep the damped spinner turning: the target is always 2 rad ahead of its
  current angle (a ramp over the horizon), the finger's nominal pose is its home pose.
  Reports ``radians_per_10s``; success when it reaches ``SPINNER_MIN_RAD_PER_10S``.
  Status: succeeds (finger gaiting emerges).
* ``hopper`` — the footed hopper (``hopper-foot``) hops forward to a target ``x`` 0.5 m ahead
  (nominal: the home pose with the torso ``x`` running toward the target at a fixed speed,
  anchored to time; no gait is given); success when the torso is within ``HOPPER_TOL`` of the
  target, upright, for 0.5 s, before any fall (torso below 0.4 m or pitch beyond 0.6 rad,
  latched).  Status: succeeds for 13 of seeds 0–15 (10 s runs).
The acrobot's IDTO planner is in :mod:`.acrobot`.

Experiment logs: docs/experiments/spinner-idto.md, docs/experiments/hopper-idto.md.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import mujoco
import numpy as np

from ..errors import ParameterError
from . import register_task

__all__ = ["IDTOTask", "TASKS", "build_idto_planner", "run_idto_task", "idto_runner",
           "SPINNER", "HOPPER"]


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
        plan's starting trajectory (default: ``q`` held; see :class:`~contactopt.mpc.IDTOPlanner`).
      planner_model: optional ``(model) -> None`` that edits the planner's own model before
        the problem is built (e.g. collision filters the compliant model should see); the
        plant is never edited.
      metric: ``(model, data) -> float`` recorded on the plant.
      kp, kd: policy gains along each actuator's direction (``(nu,)`` or scalar).
      lag: sync-mode policy lag [s] (one replan period at the paper's MPC rate);
      update_period: simulated seconds between update starts (≥ lag).
      rate_target_hz: the paper's MPC rate (Table III), for the report.
      initial_iterations, iterations_per_update: solver iterations.
      solver: extra :class:`~contactopt.solvers.idto.IDTOSettings` fields.
      restart_radius: the planner's trust radius after a collapsed or failed solve
        (:class:`~contactopt.mpc.idto_planner.IDTOPlanner`; None: ``solver``'s ``initial_radius``).
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
    rate_target_hz: float = 100.0
    initial_iterations: int = 50
    iterations_per_update: int = 1
    solver: dict = field(default_factory=dict)
    restart_radius: float | None = None
    report: Callable | None = None
    success_factory: Callable | None = None
    failure: Callable | None = None
    planner_model: Callable | None = None
    initial_guess: Callable | None = None


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
    return IDTOPlanner(problem, plant_model=m, options=options, initial_iterations=task.initial_iterations,
                       iterations_per_update=task.iterations_per_update,
                       nominal=task.nominal(m, task.horizon, task.time_step), kp=task.kp, kd=task.kd,
                       restart_radius=task.restart_radius,
                       initial_guess=None if task.initial_guess is None
                       else task.initial_guess(m, task.horizon, task.time_step))


def run_idto_task(task: IDTOTask, *, seconds: float | None = None, seed: int = 0, mode: str = "sync",
                  lag=None, slowdown: float = 1.0, update_period: float | None = None, pushes=(),
                  stop_on_success: bool = False, mass_scale: float = 1.0, friction_scale: float = 1.0,
                  gain_scale: float = 1.0, latency: float = 0.0, **overrides):
    """Run ``task`` closed loop with IDTO MPC.

    Args:
      seconds: simulated duration (default ``task.default_seconds``); seed: seeds the initial state.
      mode, lag, slowdown: see :class:`~contactopt.mpc.MPCSettings` (lag default: the task's fixed lag).
      update_period: sync mode: simulated seconds between updates (default the task's).
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


# =========================================================================== spinner

SPINNER_HOME = np.array([0.3, 1.5, 0.0])
SPINNER_AHEAD = 2.0  # rad: the target is always this far ahead of the current angle
SPINNER_MIN_RAD_PER_10S = 3.0


def _spinner_nominal(model, T, h):
    frac = np.linspace(0.0, 1.0, T + 1)

    def nominal(t, x):
        q = np.tile(SPINNER_HOME, (T + 1, 1))
        q[:, 2] = x[2] + SPINNER_AHEAD * frac
        v = np.zeros((T + 1, 3))
        v[:, 2] = SPINNER_AHEAD / (T * h)
        return q, v

    return nominal


def _spinner_initial(model, data, rng):
    data.qpos[:] = SPINNER_HOME + np.array([*rng.uniform(-0.05, 0.05, 2), rng.uniform(-math.pi, math.pi)])
    data.qvel[:] = 0.0


def _spinner_metric(model, data):
    return float(data.qpos[2])


def _spinner_success(model, data):
    return False  # needs the start angle and the run's length: see _spinner_success_factory


def _spinner_success_factory(x0, seconds):
    """Success once the spinner has gained ``SPINNER_MIN_RAD_PER_10S · seconds/10`` rad."""
    need = SPINNER_MIN_RAD_PER_10S * seconds / 10.0

    def success(model, data):
        return bool(data.qpos[2] - x0[2] >= need)

    return success


def _spinner_report(task, model, result, x0):
    gained = float(result.qpos[-1, 2] - x0[2])
    dur = max(float(result.simulated_time), 1e-9)
    return {"radians_gained": gained, "radians_per_10s": gained * 10.0 / dur,
            "required_radians_per_10s": SPINNER_MIN_RAD_PER_10S}


SPINNER = IDTOTask(
    name="spinner", model="spinner",
    description="keep the damped spinner turning with a 2-link finger (target 2 rad ahead; finger gaiting)",
    horizon=40, time_step=0.05,
    # Table II (spinner): Q_q 1/1, Q_f,q 10/10, Q_v 0.1, Q_f,v 0.1, R 0.1 (actuated), 1000 (unactuated)
    weights=dict(Qq=1.0, Qv=0.1, Qf_q=10.0, Qf_v=0.1, R=0.1, unactuated_penalty=1e3),
    # Table I (spinner): k 200 N/m, σ 1 cm, μ 0.5, v_s 0.05 m/s
    contact=dict(stiffness=200.0, smoothing=0.01, friction=0.5, stiction_velocity=0.05,
                 dissipation_velocity=0.1),
    nominal=_spinner_nominal, initial_state=_spinner_initial, success=_spinner_success,
    # replans at the paper's 200 Hz (Table III); the fixed 5 ms lag is above the measured
    # update time (~2 ms) (docs/experiments/idto-mpc-rates.md)
    metric=_spinner_metric, default_seconds=10.0, kp=20.0, kd=2.0, lag=0.005, update_period=0.005,
    rate_target_hz=200.0, initial_iterations=50, report=_spinner_report,
    success_factory=_spinner_success_factory,
    # The paper's spinner MPC uses the Lagrange-multiplier (equality-constrained) method; with
    # the penalty the plan leans on unactuated forces and never makes real contact.
    # Δ_0 = 10 (the notes' default is 0.1): a lower first-plan cost
    # (docs/experiments/spinner-idto.md).
    solver=dict(underactuation="constrained", initial_radius=10.0),
)


# =========================================================================== hopper

HOPPER_HOME = np.array([0.0, 0.63, 0.0, 0.0, 0.0])  # hopper_foot.xml "home": upright, foot flat
HOPPER_TARGET = 0.5  # m ahead of the start (the authors' hopper example: 0.5 m)
HOPPER_SPEED = 0.15  # m/s: the nominal torso x runs toward the target at this speed
HOPPER_LEAD = 0.2  # m: the nominal's start is kept within this of the measured x
HOPPER_TOL = 0.1


def _hopper_nominal(model, T, h):
    """Nominal: the other coordinates at :data:`HOPPER_HOME`; the torso ``x`` runs from
    ``x_0 = clip(HOPPER_SPEED · t, x − HOPPER_LEAD, x + HOPPER_LEAD)`` (``t`` the update's time,
    ``x`` the measured torso ``x``) at :data:`HOPPER_SPEED` and stops at the target; ``v_nom`` is
    its time derivative (``HOPPER_SPEED`` along ``x`` while it runs, 0 elsewhere).

    The reference is anchored to time, not to the measured ``x``: re-anchored at the measured ``x``
    at every update the pull never grows, and the plans settle into a standing or tiptoe lean
    (docs/experiments/hopper-idto.md).  The lead bound keeps a hopper that fell behind from
    lunging."""
    ks = np.arange(T + 1) * h

    def nominal(t, x):
        q = np.tile(HOPPER_HOME, (T + 1, 1))
        start = float(np.clip(min(HOPPER_SPEED * t, nominal.goal), x[0] - HOPPER_LEAD, x[0] + HOPPER_LEAD))
        q[:, 0] = np.minimum(start + HOPPER_SPEED * ks, nominal.goal)
        return q, np.gradient(q, h, axis=0)

    nominal.goal = HOPPER_HOME[0] + HOPPER_TARGET
    return nominal


def _hopper_initial_guess(model, T, h):
    """The first plan starts from the nominal (``x`` ramped toward the target): from a held standing
    guess the solver settles on its toe, leaning forward, and never hops
    (docs/experiments/hopper-idto.md)."""
    nominal = _hopper_nominal(model, T, h)
    return lambda t, x: nominal(t, x)[0]


def _hopper_initial(model, data, rng):
    data.qpos[:] = HOPPER_HOME
    data.qpos[3:] += rng.uniform(-0.05, 0.05, 2)
    data.qvel[:] = 0.0


def _hopper_upright(model, data) -> bool:
    return bool(abs(data.qpos[2]) < 0.6 and data.qpos[1] > 0.4)


def _hopper_success(model, data):
    return bool(abs(data.qpos[0] - (HOPPER_HOME[0] + HOPPER_TARGET)) < HOPPER_TOL and _hopper_upright(model, data))


def _hopper_fell(model, data):
    """Failure (latched by the runner): torso centre below 0.4 m or pitched beyond 0.6 rad — the
    success test's own upright bounds, so a fallen hopper that bounces back up cannot succeed later."""
    return not _hopper_upright(model, data)


def _hopper_metric(model, data):
    return float(abs(data.qpos[0] - (HOPPER_HOME[0] + HOPPER_TARGET)))


def _hopper_flights(model, qpos, clearance=0.005):
    """Flight phases in a recorded ``qpos (N, 5)``: ``(count, fraction of samples)`` with both heel
    and toe more than ``clearance`` [m] above the ground."""
    data = mujoco.MjData(model)
    heel, toe = model.geom("heel").id, model.geom("toe").id
    air = np.empty(len(qpos), dtype=bool)
    for i, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        lowest = min(data.geom_xpos[heel, 2] - model.geom_size[heel, 0], data.geom_xpos[toe, 2] - model.geom_size[toe, 0])
        air[i] = lowest > clearance
    return int(np.sum(air[1:] & ~air[:-1])), float(air.mean()) if air.size else 0.0


def _hopper_report(task, model, result, x0):
    flights, air = _hopper_flights(model, result.qpos)
    return {"distance_m": float(result.qpos[-1, 0] - x0[0]), "target_m": HOPPER_TARGET,
            "flight_phases": flights, "airborne_fraction": air,
            "max_pitch_rad": float(np.max(np.abs(result.qpos[:, 2]))),
            "max_torso_height_m": float(np.max(result.qpos[:, 1]))}


HOPPER = IDTOTask(
    name="hopper", model="hopper-foot",
    description=f"hop forward {HOPPER_TARGET:g} m to a target and stay upright (contact-implicit)",
    # The paper's 2 s horizon (Table II: h 0.05 s, T 40) at h 0.025 s, T 80, updated every h
    # (25 ms, one iteration): the warm start is then the previous plan shifted by exactly one knot.
    # With 10 ms updates on 50 ms knots the shifted guess's linear resampling smooths the impacts
    # and the plans stood still after the first hop (docs/experiments/hopper-idto.md).
    horizon=80, time_step=0.025,
    # x, z, pitch, hip, ankle.  The authors' hopper weights (Q_q 1, Q_v 0.1, R 100 unactuated /
    # 0.1 actuated) with Q_q,x 30 and Q_v,x 1 toward the moving x reference, and no terminal
    # cost: with the authors' Q_f,q 10 / Q_f,v 1 every plan ends in a stop, and the hopper fell
    # when it reached the first plan's stop (at T h; docs/experiments/hopper-idto.md).
    weights=dict(Qq=[30.0, 1.0, 1.0, 1.0, 1.0], Qv=[1.0, 0.1, 0.1, 0.1, 0.1], Qf_q=0.0, Qf_v=0.0,
                 R=[100.0, 100.0, 100.0, 0.1, 0.1], unactuated_penalty=1e3),
    # the paper's hopper contact: k 800 N/m, σ 1 cm, μ 1, v_s 0.05 m/s, v_d 0.1 m/s
    contact=dict(stiffness=800.0, smoothing=0.01, friction=1.0, stiction_velocity=0.05,
                 dissipation_velocity=0.1),
    nominal=_hopper_nominal, initial_guess=_hopper_initial_guess, initial_state=_hopper_initial,
    success=_hopper_success, failure=_hopper_fell,
    # the authors' PD gains (K_p 100, K_d 5 on the two motors)
    metric=_hopper_metric, success_hold=0.5, default_seconds=10.0, kp=100.0, kd=5.0, lag=0.025,
    update_period=0.025, rate_target_hz=100.0, initial_iterations=200, report=_hopper_report,
    # Δ_0 = 10 for the first plan; it converges (its radius collapses), and the updates restart
    # from ``restart_radius`` 0.1 (larger restarts: bolder hops; docs/experiments/hopper-idto.md)
    solver=dict(underactuation="constrained", initial_radius=10.0), restart_radius=0.1,
)


TASKS = (SPINNER, HOPPER)

for _task in TASKS:
    register_task(_task.name, "idto", idto_runner(_task), model=_task.model, description=_task.description,
                  default_seconds=_task.default_seconds)
