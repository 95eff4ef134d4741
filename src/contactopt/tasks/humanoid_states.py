"""The humanoid's initial states and standing test, shared by ``humanoid-getup``
(:mod:`.humanoid_getup`) and ``humanoid-push`` (:mod:`.humanoid_push`).

* **lying states** (:func:`sample_lying_state`) — random yaw, random roll about the body's
  long axis (back, front or side), random joint angles within the limits, dropped onto the
  floor and settled under zero control until at rest.
* **standing** (:func:`is_standing`) — head and torso high above the feet, feet on the floor,
  CoM above the feet and nearly still (:data:`STANDING_THRESHOLDS`, :func:`standing_metrics`).

Units: metres, seconds, radians.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from ..errors import ParameterError, check_positive
from ..rotations import quat_from_axis_angle, quat_multiply

__all__ = ["sample_lying_state", "standing_metrics", "STANDING_THRESHOLDS", "is_standing"]


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
