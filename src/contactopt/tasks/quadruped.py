"""IDTO contact-implicit MPC of the Mini-Cheetah-like quadruped: walk forward, no gait given.

The seed paper's quadruped example (VI-A2, VI-D2; Tables I–III): the robot is only asked to
move forward at about ``QUAD_SPEED`` = 0.4 m/s while keeping its orientation, with a small
terminal cost pulling the legs toward the standing pose.  No gait, no contact schedule, no
balance term: contacts come out of the optimizer through the planner's compliant contact
model.  The plant is the bundled MuJoCo model (``quadruped`` flat, ``quadruped-hills`` with
three cylinder hills) with MuJoCo's own contact; each task is an
:class:`~contactopt.tasks.idto_task.IDTOTask`.

Tasks (``contactopt run quadruped[-hills] --planner idto``):

* ``quadruped`` — flat ground;
* ``quadruped-hills`` — the hills scene (the nominal base height follows the terrain under
  the nominal base position, found by ray casting on the static geoms:
  :func:`~contactopt.terrain.terrain_height`).

Nominal (re-anchored at every update, :func:`quadruped_nominal`): a goal point moves forward
at ``QUAD_SPEED`` from the start; the nominal base ``x`` ramps from the *measured* ``x`` to
that goal one horizon ahead, at least ``QUAD_SPEED`` and at most ``QUAD_CATCH_UP`` m more
(on schedule: "0.4 m/s from where you are"; behind schedule, e.g. in front of a hill: a
stronger pull).  ``y`` stays at the measured ``y``; base height is ``QUAD_HEIGHT`` above the
terrain; orientation upright facing ``+x``; legs at the standing pose (weighted only at the
horizon's end: Table II's joint weights are 0 in the running cost).

Planner settings: Table I/II/III of the paper (``T = 20``, ``h = 0.05`` s, ``k = 2000`` N/m,
``σ = 1`` cm, ``μ = 1``, ``v_s = 0.5`` m/s, the penalty method with weight 100 on
unactuated forces, one iteration per update on flat ground); chosen: two iterations per
update on the hills, 20 ms lag and 50 Hz updates in sync mode, PD gains ``k_p = 40`` N·m/rad,
``k_d = 2`` N·m·s/rad, and planner contact only on the feet, trunk and motor housings
(:func:`restrict_planner_contacts`: the shank capsules overlap the foot spheres).

Report (JSON): ``metres_walked`` (base ``x`` gained), ``metres_per_10s``, ``falls`` (number
of times the base fell: :func:`is_fallen`, base height above the terrain below
``FALL_HEIGHT`` = 0.12 m or trunk tilt beyond ``FALL_TILT`` = 60°), ``first_fall_s``,
``max_tilt_deg``, ``min_base_height_m``, ``lateral_drift_m``.  Success (``success``, judged on the
whole run): no fall and at least ``QUAD_MIN_METRES_PER_10S`` = 1 m per 10 s (a quarter of
the 4 m that 0.4 m/s would give).

Experiment log: docs/experiments/quadruped-idto.md.
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np

from ..errors import ParameterError, as_array
from ..terrain import base_height, base_tilt, terrain_height
from .idto_task import IDTOTask, register_idto_task

__all__ = ["QUADRUPED", "QUADRUPED_HILLS", "QUAD_HOME", "QUAD_SPEED", "quadruped_nominal",
           "restrict_planner_contacts", "is_fallen", "count_falls", "quadruped_report"]

#: standing configuration (the models' ``home`` keyframe): base at 0.28 m, feet under the hips
QUAD_HOME = np.array([0.0, 0.0, 0.28, 1.0, 0.0, 0.0, 0.0,
                      0.0, -0.8311, 1.7447, 0.0, -0.8311, 1.7447,
                      0.0, -0.8311, 1.7447, 0.0, -0.8311, 1.7447])
QUAD_SPEED = 0.4  # m/s: the paper's forward speed
QUAD_HEIGHT = 0.28  # m: nominal base height above the terrain
FALL_HEIGHT = 0.12  # m: base (trunk centre) closer than this to the terrain = fallen
FALL_TILT = math.radians(60.0)  # rad: trunk z-axis tilted beyond this from vertical = fallen
QUAD_CATCH_UP = 0.4  # m: at most this much extra nominal lead when behind schedule
QUAD_MIN_METRES_PER_10S = 1.0  # success threshold (target 4 m per 10 s at 0.4 m/s)


def is_fallen(model: mujoco.MjModel, data: mujoco.MjData) -> bool:
    """Fallen: base below ``FALL_HEIGHT`` above the terrain or tilted beyond ``FALL_TILT``."""
    return bool(base_height(model, data) < FALL_HEIGHT or base_tilt(data.qpos) > FALL_TILT)


def count_falls(model: mujoco.MjModel, qpos) -> tuple[int, np.ndarray]:
    """Falls in a recorded trajectory ``qpos (N, nq)``.

    A fall is an entry into the fallen state (:func:`is_fallen`); recovering and falling
    again counts twice.

    Returns:
      ``(falls, fallen (N,) bool)``.
    """
    qpos = as_array("qpos", qpos, (None, model.nq))
    data = mujoco.MjData(model)
    fallen = np.zeros(qpos.shape[0], dtype=bool)
    for i, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        fallen[i] = is_fallen(model, data)
    entries = int(fallen[0]) + int(np.count_nonzero(fallen[1:] & ~fallen[:-1]))
    return entries, fallen


def quadruped_nominal(model: mujoco.MjModel, T: int, h: float, *, speed: float = QUAD_SPEED,
                      height: float = QUAD_HEIGHT, catch_up: float = QUAD_CATCH_UP):
    """The re-anchored nominal of the walking task.

    A goal point moves forward at ``speed`` from where the base was at the first call
    (``x_goal(t) = x_first + speed (t − t_first)``; a call at a ``t`` earlier than the
    previous call's starts over).
    Every call re-anchors the nominal at the measured base: ``x`` goes linearly from the
    measured ``x`` to ``x_goal(t + T h)``, clipped to lie ``speed·T h`` to
    ``speed·T h + catch_up`` metres ahead — on schedule this is the plain "``speed`` from
    here" ramp; a robot that fell behind is pulled harder, at most by ``catch_up`` m more
    (``speed < 0``: the plain ramp, no catch-up).

    Args:
      model: the quadruped model (free-joint base first: ``qpos[:7]``, then 12 joints).
      T, h: planner steps and time step [s].
      speed: forward speed [m/s] of the goal; height: base height above the terrain [m];
      catch_up: extra lead [m] allowed when behind schedule (0 = pure re-anchoring).

    Returns:
      ``nominal(t, x) -> (q_nom (T+1, nq), v_nom (T+1, nv))``: base ``x`` as above, ``y``
      held at the measured ``x[1]``, height ``height`` above the terrain under each nominal
      point, upright quaternion facing ``+x``, legs at ``QUAD_HOME``; ``v_nom`` is the ramp's
      slope along ``x`` for the base, zero elsewhere.
    """
    if model.nq != QUAD_HOME.size or model.nv != QUAD_HOME.size - 1:
        raise ParameterError(f"quadruped_nominal: model has nq={model.nq}, nv={model.nv}; expected 19, 18")
    for name, val in (("speed", speed), ("height", height), ("catch_up", catch_up)):
        if not (isinstance(val, (int, float)) and math.isfinite(val)):
            raise ParameterError(f"quadruped_nominal: {name} must be a finite number, got {val!r}")
    if height <= 0 or catch_up < 0:
        raise ParameterError(
            f"quadruped_nominal: need height > 0 and catch_up >= 0, got {height!r}, {catch_up!r}")
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    frac = np.linspace(0.0, 1.0, T + 1)
    span = speed * T * h
    start = {}

    def nominal(t, x):
        x = np.asarray(x, dtype=float)
        t = float(t)
        if not start or t < start["last"]:  # first call, or time went back: a new run
            start.update(t=t, x=float(x[0]))
        start["last"] = t
        goal = start["x"] + speed * (t - start["t"]) + span
        lead = min(max(goal - x[0], span), span + catch_up) if span >= 0 else span
        q = np.tile(QUAD_HOME, (T + 1, 1))
        q[:, 0] = x[0] + lead * frac
        q[:, 1] = x[1]
        q[:, 2] = height + terrain_height(model, data, q[:, 0], q[:, 1])
        v = np.zeros((T + 1, model.nv))
        v[:, 0] = lead / (T * h)
        return q, v

    return nominal


#: robot geoms without contact in the *planner's* model: the leg links (thigh and shank capsules)
PLANNER_NO_CONTACT_SUFFIXES = ("_thigh", "_calf")


def restrict_planner_contacts(model: mujoco.MjModel) -> list[str]:
    """Switch off collisions of the leg-link capsules in ``model`` (the planner's own copy!).

    The shank capsule ends at the foot sphere's centre, 9 mm above the sole: with the planner's
    long-range compliant contact (σ = 1 cm) every stance foot then pushes twice (foot and shank,
    ~40 % extra force), and at a hill's flank the shank's distant push holds the foot back
    (the robot stalled in front of the first hill or fell near the second without this).  Like the paper (Remark 3: spherical
    collision geometry), the planner keeps only the feet (spheres), the trunk and the motor
    housings; the plant keeps every collision.

    Returns:
      the names of the geoms switched off.

    Raises:
      ParameterError: ``model`` has no such geoms (not the quadruped).
    """
    off = []
    for g in range(model.ngeom):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or ""
        if model.geom_bodyid[g] != 0 and name.endswith(PLANNER_NO_CONTACT_SUFFIXES):
            model.geom_contype[g] = 0
            model.geom_conaffinity[g] = 0
            off.append(name)
    if not off:
        raise ParameterError("restrict_planner_contacts: no thigh/calf geoms in this model")
    return off


def _quad_initial(model, data, rng):
    data.qpos[:] = QUAD_HOME
    data.qpos[7:] += rng.uniform(-0.02, 0.02, 12)
    data.qvel[:] = 0.0


def _quad_metric(model, data):
    """Base forward position [m] (recorded on the plant)."""
    return float(data.qpos[0])


def _quad_success(model, data):
    return False  # needs the start and the run's length: see _quad_success_factory


def _quad_success_factory(x0, seconds):
    """Success once the base has gained ``QUAD_MIN_METRES_PER_10S · seconds/10`` m without falling."""
    need = QUAD_MIN_METRES_PER_10S * seconds / 10.0
    state = {"fallen": False}

    def success(model, data):
        if state["fallen"] or is_fallen(model, data):
            state["fallen"] = True
            return False
        return bool(data.qpos[0] - x0[0] >= need)

    return success


def quadruped_report(task, model, result, x0) -> dict:
    """The quadruped's JSON measures of a closed-loop ``result`` (``MPCResult``) from ``x0``.

    Keys: ``metres_walked`` (base ``x`` gained [m]), ``metres_per_10s``, ``lateral_drift_m``,
    ``falls`` (:func:`count_falls`), ``first_fall_s``, ``max_tilt_deg``, ``min_base_height_m``,
    ``required_metres_per_10s``, and ``success``: the whole run's test — no fall and the required
    rate over the run — which replaces the runner's "held once" ``success`` in the ``run`` report
    (a robot that covered 1 m and fell afterwards did not succeed); ``time_to_success`` (when the
    distance was reached) is kept only for a success.
    """
    qpos = result.qpos
    dur = max(float(result.simulated_time), 1e-9)
    walked = float(qpos[-1, 0] - x0[0])
    falls, fallen = count_falls(model, qpos)
    data = mujoco.MjData(model)
    heights = []
    for q in qpos:
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        heights.append(base_height(model, data))
    tilt = max(base_tilt(q) for q in qpos)
    rate = walked * 10.0 / dur
    ok = bool(falls == 0 and rate >= QUAD_MIN_METRES_PER_10S)
    first_fall = round(float(result.time[np.argmax(fallen)]), 4) if falls else None
    return {"metres_walked": walked, "metres_per_10s": rate, "lateral_drift_m": float(qpos[-1, 1] - x0[1]),
            "falls": falls, "first_fall_s": first_fall,
            "max_tilt_deg": math.degrees(tilt), "min_base_height_m": float(min(heights)),
            "required_metres_per_10s": QUAD_MIN_METRES_PER_10S, "success": ok,
            "time_to_success": getattr(result, "time_to_success", None) if ok else None}


# Table II (quadruped), tangent order: base x y z, base rotation (3), 12 joints
_BASE_POS, _BASE_ROT, _JOINTS = slice(0, 3), slice(3, 6), slice(6, 18)


def _diag(pos, rot, joints):
    w = np.empty(18)
    w[_BASE_POS], w[_BASE_ROT], w[_JOINTS] = pos, rot, joints
    return w


QUADRUPED = IDTOTask(
    name="quadruped", model="quadruped",
    description=f"walk forward at {QUAD_SPEED:g} m/s on flat ground, no gait given (contact-implicit)",
    horizon=20, time_step=0.05,
    # Table II (quadruped): Q_q 10 (base pos.), 1 (base ori.), 0 (joints); Q_f,q 10 / 1;
    # Q_v 1 (base), 0.1 (joints), same terminal; R 0.01 (actuated), 100 (unactuated penalty)
    weights=dict(Qq=_diag(10.0, 1.0, 0.0), Qf_q=_diag(10.0, 10.0, 1.0), Qv=_diag(1.0, 1.0, 0.1),
                 Qf_v=_diag(1.0, 1.0, 0.1), R=_diag(0.0, 0.0, 0.01), unactuated_penalty=100.0,
                 workers=2),
    # Table I (quadruped): k 2000 N/m, σ 1 cm, μ 1, v_s 0.5 m/s (dissipation velocity chosen 0.1 m/s)
    contact=dict(stiffness=2000.0, smoothing=0.01, friction=1.0, stiction_velocity=0.5,
                 dissipation_velocity=0.1),
    nominal=quadruped_nominal, planner_model=restrict_planner_contacts, initial_state=_quad_initial, success=_quad_success, failure=is_fallen,
    # replans at the paper's 60 Hz (Table III); the fixed 10 ms lag is above the measured
    # update time (~5 ms) (docs/experiments/idto-mpc-rates.md)
    metric=_quad_metric, default_seconds=10.0, kp=40.0, kd=2.0, lag=0.01, update_period=1.0 / 60.0,
    rate_target_hz=60.0, initial_iterations=30, iterations_per_update=1, report=quadruped_report,
    success_factory=_quad_success_factory,
    # Δ_0 = 10 (the notes' default 0.1): a lower first-plan cost, the same closed loop
    # (docs/experiments/quadruped-idto.md)
    solver=dict(initial_radius=10.0),
)

QUADRUPED_HILLS = dataclasses.replace(
    QUADRUPED, name="quadruped-hills", model="quadruped-hills",
    description=f"walk forward at {QUAD_SPEED:g} m/s over three cylinder hills, no gait given",
    # chosen: two iterations per update (with one, seeds fell on a hill), and a new plan as soon
    # as the last one is done: in sync mode once its 10 ms lag is over (100 Hz, above the
    # paper's 60; the update takes about 9 ms): 32/32 and 30/32 against 26/32 and 24/32 at
    # 60 Hz (docs/experiments/quadruped-idto.md).  No period beyond the lag: in async mode a
    # 10 ms one fell on seeds 1000-1005 (docs/experiments/remote-quadruped.md)
    iterations_per_update=2, update_period=0.0)

TASKS = (QUADRUPED, QUADRUPED_HILLS)

for _task in TASKS:
    register_idto_task(_task)
