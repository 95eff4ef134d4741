"""``humanoid-getup``: the bundled 22-DoF humanoid gets up from random lying poses (iLQG MPC).

The task of the seed paper (Tassa, Erez & Todorov 2012, Sec. V), issue 4:

* **cost** (:func:`getup_cost`) — four state terms and a control term, all rates (per second):

  1. smooth-abs horizontal distance between the centre of mass (CoM) and the mean of the feet,
  2. smooth-abs horizontal distance between the torso and the CoM,
  3. smooth-abs vertical distance between the torso and a point :data:`TORSO_HEIGHT` m above
     the mean of the feet,
  4. quadratic horizontal CoM velocity,
  5. cosh control cost ``α²(cosh(u/α) − 1)`` on the 16 normalized motor commands.

  The final cost equals the running state cost (the paper's choice).
* **models** — the plant (:func:`plant_model`) is MuJoCo at 2 ms (the paper's simulator step);
  the planner (:func:`planner_model`) steps 10 ms (the paper: 8 ms) and can be given softer
  contacts (:func:`~contactopt.dynamics.smooth_contacts`).  The tuned default keeps the model
  file's contacts (``solref = (0.02, 1)``) in both.
* **initial states** (:func:`sample_lying_state`) — random yaw, random roll about the body's
  long axis (back, front or side), random joint angles within the limits, dropped onto the
  floor and settled under zero control until at rest.
* **success** (:func:`is_standing`) — head and torso high above the feet, feet on the floor,
  CoM above the feet and nearly still, held for :data:`SUCCESS_HOLD_S` seconds.

Tuned planner settings are in :data:`PLANNER_DEFAULTS`; :func:`make_planner` builds the
dynamics, cost and :class:`~contactopt.solvers.ILQG` solver from them.  The module also
registers ``humanoid-push`` (stand, take a push on the torso, stay up) with the same planner
and cost.

Status: the issue's target (≥ 90 % within 5 s at ≤ 2× slowdown) is met (19/20 and 39/40 seeds).

Experiment log: docs/experiments/humanoid-getup-ilqg.md.

Units: metres, seconds, radians; controls are MuJoCo ``ctrl`` values in ``[-1, 1]``
(torque = gear × ctrl).
"""

from __future__ import annotations

import math
from typing import Any

import mujoco
import numpy as np

from ..costs import (
    CenterOfMass,
    CenterOfMassVelocity,
    Combination,
    Control,
    Cosh,
    CostTerm,
    Quadratic,
    SitePosition,
    SmoothAbs,
    StageCost,
    TrajectoryCost,
)
from ..errors import ParameterError, check_positive
from ..rotations import quat_from_axis_angle, quat_multiply

__all__ = [
    "MODEL_NAME",
    "TORSO_HEIGHT",
    "SUCCESS_HOLD_S",
    "TASK_SECONDS",
    "PLANT_TIMESTEP",
    "PLANNER_DEFAULTS",
    "COST_DEFAULTS",
    "plant_model",
    "planner_model",
    "getup_cost",
    "sample_lying_state",
    "is_standing",
    "has_fallen",
    "recovered",
    "push_recovery_pushes",
    "HUMANOID_PUSH",
    "standing_metrics",
    "make_planner",
]

#: Bundled model the task runs on.
MODEL_NAME = "humanoid"

#: Height (m) of the torso target point above the mean of the feet (the paper's 1.3 m).
TORSO_HEIGHT = 1.3

#: Seconds the standing test must hold without interruption to count as success.
SUCCESS_HOLD_S = 0.5

#: Simulated seconds within which the humanoid must be standing (issue 4 target).
TASK_SECONDS = 5.0

#: Plant time step (s): the paper's simulator used 2 ms.
PLANT_TIMESTEP = 0.002

#: Cost parameters of :func:`getup_cost` (weights are per second of simulated time).
COST_DEFAULTS: dict[str, float] = {
    "w_com_feet": 10.0,      # smooth-abs |CoM_xy − mean feet_xy|
    "w_torso_com": 3.0,      # smooth-abs |torso_xy − CoM_xy|
    "w_height": 10.0,        # smooth-abs |torso_z − (mean feet_z + TORSO_HEIGHT)|
    "w_com_vel": 1.0,        # ½ |CoM velocity_xy|²
    "w_control": 0.1,        # α²(cosh(u/α) − 1) summed over the 16 motors (1.0 → squats too long)
    "alpha_position": 0.1,   # smooth-abs smoothing length (m)
    "alpha_control": 0.5,    # cosh soft limit (ctrl units; ctrlrange is ±1)
    "torso_height": TORSO_HEIGHT,
    "com_vel_position_jacobian": 0.0,  # 1: include ∂(J_com v)/∂q (finite differences, ~2× cost time)
}

#: Tuned iLQG-MPC settings, consumed by an MPC loop (and by :func:`make_planner`).
#:
#: * ``planner_timestep``, ``horizon_steps``: the planner's ``h`` (s) and ``T`` (0.5 s horizon,
#:   the paper's; a 20 ms / 25-step planner halves the compute but fails to balance).
#: * ``iterations_per_update``: iLQG iterations per MPC update (``solve_from_warm_start(...,
#:   max_iterations=n)``); progress per simulated second is ``slowdown / iteration time``
#:   whatever ``n``, and ``n = 1`` keeps the policy lag smallest.
#: * ``derivative_stride``: ``MujocoDynamics(derivative_stride=...)``; 4 was worse than 2.
#: * ``planner_solref`` / ``planner_solimp``: contacts of the planner model (None = model file's).
#: * ``lag_compensation``: of :class:`~contactopt.mpc.ILQGPlanner`; ``"auto"`` plans from the
#:   state predicted at ``t + lag`` (the lag the runner measured for the previous update) under
#:   the policy in force (docs/experiments/humanoid-getup-ilqg.md).
#: * ``settings``: :class:`~contactopt.solvers.ILQGSettings` fields.  ``mu_init = 1e-3`` and a
#:   short line search (warm-started plans rarely need small α; a long one wastes rollouts).
#: * ``slowdown``: the plant slowdown the settings were tuned at (policy lag = compute / slowdown).
PLANNER_DEFAULTS: dict[str, Any] = {
    "planner_timestep": 0.01,
    "horizon_steps": 50,
    "iterations_per_update": 1,
    "derivative_stride": 2,
    "centered_differences": False,
    "planner_solref": None,
    "planner_solimp": None,
    "lag_compensation": "auto",
    "slowdown": 2.0,
    "settings": {
        "mu_init": 1e-3,
        "line_search_steps": (1.0, 0.5, 0.25, 0.1),
        "max_iterations": 1,
    },
}


# =========================================================================== models


def plant_model(timestep: float = PLANT_TIMESTEP) -> mujoco.MjModel:
    """The simulated "real" humanoid: the bundled model at ``timestep`` seconds (default 2 ms).

    Contacts are the model file's (``solref = (0.02, 1)``, the stiffer of the two models).
    """
    from ..model import load_model

    return load_model(MODEL_NAME, timestep=check_positive("timestep", timestep))


def planner_model(timestep: float | None = None, *, solref=None, solimp=None) -> mujoco.MjModel:
    """The planner's humanoid: a larger time step and (optionally) softer contacts.

    Args:
      timestep: planner step in seconds (default ``PLANNER_DEFAULTS["planner_timestep"]``).
      solref: ``(2,)`` contact (timeconst, dampratio) for every geom (default
        ``PLANNER_DEFAULTS["planner_solref"]``; None there keeps the model file's).
      solimp: ``(5,)`` contact impedance (default ``PLANNER_DEFAULTS["planner_solimp"]``).

    Returns:
      A fresh ``MjModel``.

    Raises:
      ParameterError: non-positive time step, or a ``solref`` time constant below twice the
        time step (MuJoCo would silently stiffen such a contact).
    """
    from ..dynamics import smooth_contacts
    from ..model import load_model

    h = PLANNER_DEFAULTS["planner_timestep"] if timestep is None else timestep
    h = check_positive("timestep", h)
    solref = PLANNER_DEFAULTS["planner_solref"] if solref is None else solref
    solimp = PLANNER_DEFAULTS["planner_solimp"] if solimp is None else solimp
    model = load_model(MODEL_NAME, timestep=h)
    if solref is not None and float(solref[0]) > 0 and float(solref[0]) < 2 * h:
        raise ParameterError(f"planner solref time constant {solref[0]} s is below 2 × the time step "
                             f"({h} s); MuJoCo would silently stiffen it")
    if solref is not None or solimp is not None:
        model = smooth_contacts(model, solref=solref, solimp=solimp)
    return model


# =========================================================================== cost


def _feet_mean(model, axes):
    return [(-0.5, SitePosition(model, "left_foot", axes=axes)),
            (-0.5, SitePosition(model, "right_foot", axes=axes))]


def getup_cost(model: mujoco.MjModel, *, timestep: float | None = None, **weights) -> TrajectoryCost:
    """The paper's get-up cost on ``model`` (the planner's humanoid).

    Running cost rate (per second)::

        ℓ(x, u) = w_com_feet  · sabs(CoM_xy − ½(lf + rf)_xy)
                + w_torso_com · sabs(torso_xy − CoM_xy)
                + w_height    · sabs(torso_z − ½(lf + rf)_z − torso_height)
                + w_com_vel   · ½ |v_CoM,xy|²
                + w_control   · Σ_j α_u² (cosh(u_j/α_u) − 1)

    with ``sabs(r) = Σ_k √(r_k² + α²) − α`` (α = ``alpha_position``, m) and ``lf, rf`` the
    ``left_foot``/``right_foot`` sites.  The final cost is the state part counted as one
    more step (:class:`~contactopt.costs.TrajectoryCost` with no terminal cost).

    Args:
      model: a humanoid model with sites ``torso``, ``left_foot``, ``right_foot``.
      timestep: planner step ``h`` (s) that multiplies the running cost; default
        ``model.opt.timestep``.
      **weights: overrides of :data:`COST_DEFAULTS` (unknown names are an error).

    Returns:
      :class:`~contactopt.costs.TrajectoryCost` over ``x = [qpos (23), qvel (22)]``, ``u (16,)``.

    Raises:
      ParameterError: unknown weight names, negative weights, a model without the sites.
    """
    unknown = set(weights) - set(COST_DEFAULTS)
    if unknown:
        raise ParameterError(f"getup_cost: unknown parameters {sorted(unknown)}; "
                             f"known: {sorted(COST_DEFAULTS)}")
    p = {**COST_DEFAULTS, **weights}
    a_pos = check_positive("alpha_position", p["alpha_position"])
    a_u = check_positive("alpha_control", p["alpha_control"])
    com_feet = Combination([(1.0, CenterOfMass(model, axes="xy"))] + _feet_mean(model, "xy"),
                           name="com_over_feet")
    torso_com = Combination([(1.0, SitePosition(model, "torso", axes="xy")),
                             (-1.0, CenterOfMass(model, axes="xy"))], name="torso_over_com")
    height = Combination([(1.0, SitePosition(model, "torso", axes="z"))] + _feet_mean(model, "z"),
                         offset=[float(p["torso_height"])], name="torso_height")
    com_vel = CenterOfMassVelocity(model, axes="xy", name="com_velocity",
                                   position_jacobian=bool(p["com_vel_position_jacobian"]))
    terms = [
        CostTerm(com_feet, SmoothAbs(a_pos), p["w_com_feet"]),
        CostTerm(torso_com, SmoothAbs(a_pos), p["w_torso_com"]),
        CostTerm(height, SmoothAbs(a_pos), p["w_height"]),
        CostTerm(com_vel, Quadratic(), p["w_com_vel"]),
        CostTerm(Control(model), Cosh(a_u), p["w_control"]),
    ]
    return TrajectoryCost(StageCost(model, terms), timestep=timestep)


# =========================================================================== initial states




def sample_lying_state(model: mujoco.MjModel, rng: np.random.Generator | int | None = None, *,
                       spread: float = 0.6, settle_seconds: float = 2.0,
                       max_settle_seconds: float = 6.0, rest_speed: float = 0.05,
                       side: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A random lying pose of the humanoid, settled on the floor at rest.

    Orientation: the long axis is laid horizontal, rolled about itself by a random angle
    (``side`` picks ``"back"``, ``"front"``, ``"left"``, ``"right"`` ± 30°; None = uniform
    roll), with a uniformly random yaw.  Hinge angles are uniform in the joint ranges shrunk
    by ``spread`` about their centre (``spread = 1`` uses the full range).  The body is placed
    just above the floor and simulated with zero control on ``model`` until its speed stays
    below ``rest_speed`` (at least ``settle_seconds``, at most ``max_settle_seconds``).

    Args:
      model: the humanoid (the plant model; its time step is used for settling).
      rng: a ``numpy.random.Generator`` or a seed.
      spread: fraction of each joint range used (0 < spread ≤ 1).
      settle_seconds, max_settle_seconds: settling time bounds (s).
      rest_speed: ``max |qvel|`` (rad/s or m/s) regarded as at rest.
      side: optional lying side (see above).

    Returns:
      ``(qpos (nq,), qvel (nv,))`` of the settled state (time 0, ``qvel`` nearly zero).

    Raises:
      ParameterError: bad arguments, or a model without a free root joint.
    """
    if not isinstance(model, mujoco.MjModel):
        raise ParameterError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
    if model.njnt == 0 or model.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE:
        raise ParameterError("sample_lying_state needs a model whose first joint is a free joint")
    if not 0.0 < float(spread) <= 1.0:
        raise ParameterError(f"spread must lie in (0, 1], got {spread!r}")
    check_positive("settle_seconds", settle_seconds)
    check_positive("rest_speed", rest_speed)
    if max_settle_seconds < settle_seconds:
        raise ParameterError("max_settle_seconds must be >= settle_seconds")
    rolls = {"back": 0.0, "left": 0.5 * math.pi, "front": math.pi, "right": 1.5 * math.pi}
    if side is not None and side not in rolls:
        raise ParameterError(f"side must be one of {sorted(rolls)} or None, got {side!r}")
    rng = np.random.default_rng(rng)

    yaw = rng.uniform(-math.pi, math.pi)
    if side is None:
        roll = rng.uniform(0.0, 2.0 * math.pi)
    else:
        roll = rolls[side] + rng.uniform(-math.pi / 6, math.pi / 6)
    # body z (head) → horizontal; body x (front) → up for roll 0 (on the back)
    tilt = quat_from_axis_angle([0, 1, 0], -0.5 * math.pi)
    quat = quat_multiply(quat_from_axis_angle([0, 0, 1], yaw), quat_multiply(tilt, quat_from_axis_angle([0, 0, 1], roll)))

    data = mujoco.MjData(model)
    qpos = model.qpos0.copy()
    qpos[3:7] = quat
    for j in range(1, model.njnt):
        if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
            continue
        adr = model.jnt_qposadr[j]
        lo, hi = model.jnt_range[j] if model.jnt_limited[j] else (-math.pi, math.pi)
        c, r = 0.5 * (lo + hi), 0.5 * (hi - lo) * float(spread)
        qpos[adr] = rng.uniform(c - r, c + r)
    data.qpos[:] = qpos
    data.qvel[:] = 0.0
    mujoco.mj_kinematics(model, data)
    # lift the body so that its lowest geom (bounding spheres of capsules are too crude:
    # use the capsule/sphere end points) is 1 cm above the floor
    low = math.inf
    for g in range(model.ngeom):
        if model.geom_bodyid[g] == 0:
            continue
        p, R, size = data.geom_xpos[g], data.geom_xmat[g].reshape(3, 3), model.geom_size[g]
        if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE:
            half = R[:, 2] * size[1]
            low = min(low, p[2] - abs(half[2]) - size[0])
        else:
            low = min(low, p[2] - model.geom_rbound[g])
    data.qpos[2] += 0.01 - low
    data.ctrl[:] = 0.0
    mujoco.mj_forward(model, data)

    h = model.opt.timestep
    n_min = int(math.ceil(settle_seconds / h))
    n_max = int(math.ceil(max_settle_seconds / h))
    window = max(1, int(round(0.2 / h)))
    calm = 0
    for n in range(n_max):
        mujoco.mj_step(model, data)
        calm = calm + 1 if np.max(np.abs(data.qvel)) < rest_speed else 0
        if n >= n_min and calm >= window:
            break
    if not np.isfinite(data.qpos).all():  # pragma: no cover - MuJoCo resets on blow-up
        raise ParameterError("settling the sampled pose diverged")
    return data.qpos.copy(), data.qvel.copy()


# =========================================================================== success test


def standing_metrics(model: mujoco.MjModel, data: mujoco.MjData) -> dict[str, float]:
    """Quantities of the standing test at ``data`` (kinematics must be current, e.g. after ``mj_step``).

    Returns a dict with ``head_height``, ``torso_height`` (above the mean of the feet, m),
    ``feet_height`` (the higher foot site above the floor, m), ``com_offset`` (horizontal
    distance CoM ↔ mean of the feet, m) and ``com_speed`` (horizontal CoM speed, m/s).
    """
    sid = {n: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, n)
           for n in ("head", "torso", "left_foot", "right_foot")}
    if min(sid.values()) < 0:
        raise ParameterError("is_standing needs sites head, torso, left_foot, right_foot")
    feet = 0.5 * (data.site_xpos[sid["left_foot"]] + data.site_xpos[sid["right_foot"]])
    com = data.subtree_com[0]
    # CoM velocity of the whole model: total linear momentum / mass (cvel-based, cheap)
    jac = np.zeros((3, model.nv))
    mujoco.mj_jacSubtreeCom(model, data, jac, 0)
    v = jac @ data.qvel
    return {
        "head_height": float(data.site_xpos[sid["head"], 2] - feet[2]),
        "torso_height": float(data.site_xpos[sid["torso"], 2] - feet[2]),
        "feet_height": float(max(data.site_xpos[sid["left_foot"], 2],
                                 data.site_xpos[sid["right_foot"], 2])),
        "com_offset": float(np.linalg.norm(com[:2] - feet[:2])),
        "com_speed": float(np.linalg.norm(v[:2])),
    }


#: Thresholds of :func:`is_standing` (m, m/s).  Standing upright ("home"): head 1.49 m and
#: torso 1.27 m above the feet; kneeling upright puts the head ≈ 1.0 m above the shins.
STANDING_THRESHOLDS = {
    "min_head_height": 1.35,
    "min_torso_height": 1.12,
    "max_feet_height": 0.12,
    "max_com_offset": 0.15,
    "max_com_speed": 0.5,
}


def is_standing(model: mujoco.MjModel, data: mujoco.MjData) -> bool:
    """True if the humanoid stands upright on its feet, balanced and nearly still.

    Conditions (see :data:`STANDING_THRESHOLDS`): head ≥ 1.35 m and torso ≥ 1.12 m above
    the mean of the feet, both foot sites ≤ 0.12 m above the floor, CoM within 0.15 m
    horizontally of the mean of the feet, horizontal CoM speed ≤ 0.5 m/s.  ``data`` must
    have current kinematics (positions, ``subtree_com``), as after ``mj_step``/``mj_forward``.
    Success of the task is this test holding for :data:`SUCCESS_HOLD_S` seconds.
    """
    m = standing_metrics(model, data)
    t = STANDING_THRESHOLDS
    return (m["head_height"] >= t["min_head_height"] and m["torso_height"] >= t["min_torso_height"]
            and m["feet_height"] <= t["max_feet_height"] and m["com_offset"] <= t["max_com_offset"]
            and m["com_speed"] <= t["max_com_speed"])


# =========================================================================== planner


def make_planner(model: mujoco.MjModel | None = None, *, nthread: int | None = None, **overrides):
    """Build ``(dynamics, cost, solver)`` for iLQG MPC from :data:`PLANNER_DEFAULTS`.

    Args:
      model: the planner model (default :func:`planner_model`).
      nthread: derivative threads (default all cores).
      **overrides: keys of :data:`PLANNER_DEFAULTS` (``settings`` is merged key by key).

    Returns:
      ``(MujocoDynamics, TrajectoryCost, ILQG)``.
    """
    from ..dynamics import MujocoDynamics
    from ..solvers import ILQG, ILQGSettings

    unknown = set(overrides) - set(PLANNER_DEFAULTS)
    if unknown:
        raise ParameterError(f"make_planner: unknown settings {sorted(unknown)}")
    cfg = {**PLANNER_DEFAULTS, **overrides}
    cfg["settings"] = {**PLANNER_DEFAULTS["settings"], **overrides.get("settings", {})}
    if model is None:
        model = planner_model(cfg["planner_timestep"], solref=cfg["planner_solref"],
                              solimp=cfg["planner_solimp"])
    dyn = MujocoDynamics(model, nthread=nthread, derivative_stride=cfg["derivative_stride"],
                         centered=cfg["centered_differences"])
    cost = getup_cost(model)
    solver = ILQG(dyn, cost, ILQGSettings(**cfg["settings"]))
    return dyn, cost, solver


# =========================================================================== task registration


def _initial_state(model, data, rng) -> None:
    qpos, qvel = sample_lying_state(model, rng)
    data.qpos[:] = qpos
    data.qvel[:] = qvel


def _head_height(model, data) -> float:
    return standing_metrics(model, data)["head_height"]


def _ilqg_defaults() -> dict:
    cfg = PLANNER_DEFAULTS
    return {"horizon": cfg["horizon_steps"], "iterations_per_update": cfg["iterations_per_update"],
            "initial_iterations": 20, "derivative_stride": cfg["derivative_stride"],
            "lag_compensation": cfg["lag_compensation"],
            "settings": {k: v for k, v in cfg["settings"].items() if k != "max_iterations"}}


def _planner_model_default():
    cfg = PLANNER_DEFAULTS
    return planner_model(cfg["planner_timestep"], solref=cfg["planner_solref"], solimp=cfg["planner_solimp"])


def _build_task():
    from .mpc_task import MPCTask

    return MPCTask(
        name="humanoid-getup", model=MODEL_NAME,
        description="get up from a random lying pose and stand (head above 1.35 m, balanced, for 0.5 s)",
        plant_model=plant_model, planner_model=_planner_model_default,
        cost=lambda m: getup_cost(m), initial_state=_initial_state, success=is_standing,
        metric=_head_height, metric_label="head height above the feet [m]", success_hold=SUCCESS_HOLD_S, default_seconds=TASK_SECONDS,
        ilqg=_ilqg_defaults(), target_slowdown=float(PLANNER_DEFAULTS["slowdown"]))


#: The registered :class:`~contactopt.tasks.mpc_task.MPCTask` (``contactopt run humanoid-getup``).
HUMANOID_GETUP = _build_task()


# =========================================================================== push recovery

#: ``humanoid-push``: the push (s, s, N·s) — a horizontal impulse on the torso in a seeded random
#: direction.  25 N·s changes the 54.9 kg humanoid's CoM velocity by 0.46 m/s.
PUSH_TIME = 1.0
PUSH_DURATION = 0.1
PUSH_IMPULSE = 25.0
#: Seconds after the push ends before a recovered stance counts (the push must be absorbed).
PUSH_SETTLE_S = 0.5
#: The humanoid has fallen when its head is lower than this above the feet (m): kneeling
#: upright is ≈ 1.0 m, a deep squat ≈ 0.8 m.
FALLEN_HEAD_HEIGHT = 0.8


def push_recovery_pushes(rng: np.random.Generator) -> tuple:
    """The seeded push of ``humanoid-push``: :data:`PUSH_IMPULSE` N·s on the torso over
    :data:`PUSH_DURATION` s from :data:`PUSH_TIME`, horizontal, direction uniform in [0, 2π)."""
    from ..mpc import Push

    angle = rng.uniform(0.0, 2.0 * math.pi)
    force = PUSH_IMPULSE / PUSH_DURATION * np.array([math.cos(angle), math.sin(angle), 0.0])
    return (Push(PUSH_TIME, PUSH_DURATION, "torso", tuple(float(f) for f in force)),)


def _standing_state(model, data, rng) -> None:
    """Standing at rest at ``qpos0`` (the seed draws only the push direction: with ±0.02 rad of
    joint noise the first MPC updates sometimes plan a hop and 1 of 8 seeds fell before the push)."""
    data.qpos[:] = model.qpos0
    data.qvel[:] = 0.0
    mujoco.mj_forward(model, data)


def has_fallen(model: mujoco.MjModel, data: mujoco.MjData) -> bool:
    """``humanoid-push``'s failure test: the head is below :data:`FALLEN_HEAD_HEIGHT` above the feet."""
    return standing_metrics(model, data)["head_height"] < FALLEN_HEAD_HEIGHT


def recovered(model: mujoco.MjModel, data: mujoco.MjData) -> bool:
    """``humanoid-push``'s success test: :func:`is_standing` at least :data:`PUSH_SETTLE_S` s after the push."""
    return data.time >= PUSH_TIME + PUSH_DURATION + PUSH_SETTLE_S and is_standing(model, data)


def _build_push_task():
    import dataclasses

    return dataclasses.replace(
        HUMANOID_GETUP, name="humanoid-push",
        description=(f"stand, take a {PUSH_IMPULSE:g} N·s push on the torso in a random horizontal direction "
                     f"at t = {PUSH_TIME:g} s, and stay up (never head below {FALLEN_HEAD_HEIGHT:g} m; "
                     f"standing {SUCCESS_HOLD_S:g} s after it)"),
        initial_state=_standing_state, pushes=push_recovery_pushes, success=recovered, failure=has_fallen,
        default_seconds=5.0)


#: ``contactopt run humanoid-push``: push recovery with the getup task's planner and cost.
HUMANOID_PUSH = _build_push_task()


def _register() -> None:
    from functools import partial

    from . import register_task
    from .mpc_task import as_task, ilqg_runner

    for task in (HUMANOID_GETUP, HUMANOID_PUSH):
        register_task(task.name, "ilqg", ilqg_runner(task), model=task.model, description=task.description,
                      default_seconds=task.default_seconds, task_factory=partial(as_task, task))


_register()
