"""Nominal-trajectory helpers of MPC tasks.

* :func:`free_joint` — the qpos and dof addresses of a named free joint; :func:`home_qpos` —
  the configuration of a model's ``home`` keyframe.
* :func:`pose_ramp` — a free body ramping from its measured pose toward a target pose while the
  other joints are held; :func:`finite_velocity` — the velocities ``v_k = (q_k ⊖ q_{k−1})/h``
  of a configuration trajectory, as the IDTO planner defines them.
* :func:`planner_rest_offset` — the depth at which the planner's compliant contact carries a
  weight (a nominal at the plant's resting height would ask the planner to lift the body).

The bundled IDTO tasks ``hand-ball`` and ``bimanual-box`` build their nominals from these.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from .errors import ParameterError, as_array
from .rotations import relative_rotation as _relative
from .rotations import turn as _turn
from .rotations import unit_quat as _quat

__all__ = ["free_joint", "home_qpos", "pose_ramp", "finite_velocity", "planner_rest_offset"]


def free_joint(model: mujoco.MjModel, name: str) -> tuple[int, int]:
    """``(qpos address, dof address)`` of the free joint ``name``."""
    j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if j < 0 or model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE:
        raise ParameterError(f"model has no free joint named {name!r}")
    return int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j])


def home_qpos(model: mujoco.MjModel) -> np.ndarray:
    """``(nq,)`` configuration of the model's ``home`` keyframe (a copy).

    Raises ParameterError if the model has no such keyframe."""
    k = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home")
    if k < 0:
        raise ParameterError("model has no 'home' keyframe")
    return model.key_qpos[k].copy()


def pose_ramp(model: mujoco.MjModel, q_rest, qadr: int, pos, quat, target_pos, target_quat, T: int, h: float,
              speed: float, spin: float):
    """Nominal ``(q (T+1, nq), v (T+1, nv))``: a free body moving from ``(pos, quat)`` toward a target pose.

    Args:
      model: the model (its ``nq``/``nv`` and configuration arithmetic).
      q_rest: ``(nq,)`` configuration of every other joint (held).
      qadr: qpos address of the free joint (position 3, quaternion 4).
      pos, quat: ``(3,)`` [m] and ``(4,)`` start pose (the measured one).
      target_pos, target_quat: ``(3,)`` [m] and ``(4,)`` target pose.
      T, h: knots ``0 … T`` spaced ``h`` [s].
      speed: [m/s] and spin: [rad/s] — the largest translation / rotation rate of the ramp
        (knot ``k`` is ``min(speed·k·h, distance)`` along the straight line and likewise on
        the shortest arc).

    Returns:
      ``q`` with the free joint on the ramp and ``v`` its finite-difference velocity
      (``v_k = (q_k ⊖ q_{k−1})/h`` as the planner defines it, ``v_0 = v_1``); zero on the
      other joints.
    """
    pos, target_pos = as_array("pos", pos, (3,)), as_array("target_pos", target_pos, (3,))
    q_rest = as_array("q_rest", q_rest, (model.nq,))
    d = target_pos - pos
    dist = float(np.linalg.norm(d))
    q = np.tile(q_rest, (T + 1, 1))
    quat = _quat("quat", quat)
    angle, axis = _relative(quat, target_quat)  # once: the arc is the same for every knot
    for k in range(T + 1):
        s = k * h
        q[k, qadr:qadr + 3] = pos + (d * min(1.0, speed * s / dist) if dist > 0 else 0.0)
        q[k, qadr + 3:qadr + 7] = _turn(quat, axis, min(spin * s, angle))
    return q, finite_velocity(model, q, h)


def finite_velocity(model, q, h):
    """Velocities ``v (N, nv)`` of the configurations ``q (N, nq)`` spaced ``h`` [s]:
    ``v_k = (q_k ⊖ q_{k−1})/h`` (``mj_differentiatePos``) for ``k ≥ 1`` and ``v_0 = v_1``."""
    v = np.zeros((q.shape[0], model.nv))
    for k in range(1, q.shape[0]):
        mujoco.mj_differentiatePos(model, v[k], h, q[k - 1], q[k])
    v[0] = v[1]
    return v


def planner_rest_offset(weight: float, stiffness: float, smoothing: float) -> float:
    """Depth [m] (≥ 0 into the surface; negative: above it) at which the planner's compliant
    contact carries ``weight`` [N] (stiffness ``k`` [N/m], smoothing ``σ`` [m]):
    ``φ = −σ log(exp(W/(σk)) − 1)`` solves ``σ k log(1 + exp(−φ/σ)) = W`` (one contact; ``−φ``
    is returned).

    Raises:
      ParameterError: a non-positive or non-finite argument.
    """
    for name, v in (("weight", weight), ("stiffness", stiffness), ("smoothing", smoothing)):
        if not (isinstance(v, (int, float, np.floating)) and math.isfinite(v) and v > 0):
            raise ParameterError(f"{name} must be positive and finite, got {v!r}")
    x = weight / (smoothing * stiffness)
    # log(expm1(x)) = x + log(1 − exp(−x)) without overflow for large x
    return float(smoothing * (x + math.log(-math.expm1(-x))))
