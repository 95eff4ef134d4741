"""Quaternion helpers, MuJoCo's convention: ``q = (w, x, y, z)``; a free joint's qpos quaternion
maps body to world.  Inputs are checked (shape, finiteness, non-zero) with errors that name the
argument.  The product and the axis-angle conversion are written out in NumPy: they equal
MuJoCo's ``mju_mulQuat`` / ``mju_axisAngle2Quat`` to rounding, and in about 3 of 4 cases differ
from them in the last bit (MuJoCo's C build contracts to fused multiply-adds); the fixed-lag
tasks that use them repeat bit for bit across machines only with one implementation, and the
written-out one is what they were measured with.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ParameterError, as_array

__all__ = ["orientation_error", "quat_conjugate", "quat_from_axis_angle", "quat_multiply", "relative_rotation",
           "rotate_toward", "rotation_vector_difference", "turn", "unit_quat"]


def unit_quat(name: str, q) -> np.ndarray:
    """``q (4,)`` normalized; ``ParameterError`` naming ``name`` for a zero or non-finite one."""
    q = as_array(name, q, (4,))
    n = float(np.linalg.norm(q))
    if not n > 0:
        raise ParameterError(f"{name}: a quaternion must be non-zero, got {q}")
    return q / n


def quat_multiply(a, b) -> np.ndarray:
    """Hamilton product ``a ⊗ b`` of two ``(4,)`` quaternions ``(w, x, y, z)`` (not normalized)."""
    return _hamilton_product(as_array("a", a, (4,)), as_array("b", b, (4,)))


def _hamilton_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of quaternions ``a (..., 4)`` and ``b (..., 4)`` ``(w, x, y, z)``,
    broadcast over the leading axes; returns ``(..., 4)``.  Unchecked: callers validate."""
    w1, x1, y1, z1 = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    w2, x2, y2, z2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
                     w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2], axis=-1)


def quat_conjugate(q) -> np.ndarray:
    """Conjugate ``(w, −x, −y, −z)`` of a ``(4,)`` quaternion (the inverse of a unit one)."""
    q = as_array("q", q, (4,))
    return np.array([q[0], -q[1], -q[2], -q[3]])


def quat_from_axis_angle(axis, angle: float) -> np.ndarray:
    """Unit quaternion ``(4,)`` of a rotation by ``angle`` [rad] about ``axis`` ``(3,)`` (normalized here)."""
    axis = as_array("axis", axis, (3,))
    n = float(np.linalg.norm(axis))
    if not n > 0:
        raise ParameterError(f"axis must be non-zero, got {axis}")
    if not math.isfinite(angle):
        raise ParameterError(f"angle must be finite, got {angle!r}")
    return np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis / n])


def relative_rotation(q, q_target) -> tuple[float, np.ndarray]:
    """``(angle [rad] in [0, π], unit axis (3,))`` of the world-frame rotation ``q_target ⊗ q⁻¹``
    (the short way: ``q`` and ``−q`` are one rotation; axis x for a zero angle)."""
    r = quat_multiply(unit_quat("q_target", q_target), quat_conjugate(unit_quat("q", q)))
    if r[0] < 0:
        r = -r
    s = float(np.linalg.norm(r[1:]))
    angle = 2.0 * math.atan2(s, r[0])
    axis = r[1:] / s if s > 1e-15 else np.array([1.0, 0.0, 0.0])
    return angle, axis


def orientation_error(q, q_target) -> float:
    """Angle [rad] in ``[0, π]`` of the rotation between two orientations ``(4,)`` (sign-invariant)."""
    return relative_rotation(q, q_target)[0]


def turn(q, axis, angle: float) -> np.ndarray:
    """Unit ``exp(angle · axis) ⊗ q`` for a unit ``q (4,)``, unit ``axis (3,)`` and ``angle`` [rad]."""
    out = quat_multiply(quat_from_axis_angle(axis, angle), q)
    return out / np.linalg.norm(out)


def rotate_toward(q, q_target, max_angle: float) -> np.ndarray:
    """``q (4,)`` turned toward ``q_target (4,)`` along the shortest arc by at most ``max_angle`` [rad] ≥ 0.

    Returns the unit quaternion ``exp(s · log(q_target ⊗ q⁻¹)) ⊗ q`` with the rotated angle
    ``s · angle = min(max_angle, angle)``; ``q_target`` itself (up to sign) once within reach.
    """
    if not (math.isfinite(max_angle) and max_angle >= 0):
        raise ParameterError(f"max_angle must be >= 0, got {max_angle!r}")
    q = unit_quat("q", q)
    angle, axis = relative_rotation(q, q_target)
    return turn(q, axis, min(max_angle, angle))


def rotation_vector_difference(q, q_ref) -> np.ndarray:
    """Rotation vectors ``φ = log(q_refˉ¹ ⊗ q)`` [rad] of quaternions ``q (..., 4)`` relative to
    ``q_ref (..., 4)`` (broadcast over the leading axes), as MuJoCo's ``mju_subQuat(φ, q, q_ref)``
    and the rotation blocks of ``mj_differentiatePos(q_ref → q)`` compute them, with no
    normalization: ``p = conj(q_ref) ⊗ q``, ``φ = θ · p_xyz / ‖p_xyz‖`` with
    ``θ = 2 atan2(‖p_xyz‖, p_w)`` moved into ``(−π, π]`` (the short way round), and
    ``φ = 2 p_xyz / p_w`` (its limit) where ``‖p_xyz‖`` underflows.  Returns ``(..., 3)``.
    Vectorized: the batched configuration residual evaluates every stage with it."""
    q = np.asarray(q, dtype=float)
    r = np.asarray(q_ref, dtype=float)
    p = _hamilton_product(r * np.array([1.0, -1.0, -1.0, -1.0]), q)
    pw, v = p[..., 0], p[..., 1:]
    s = np.sqrt(np.sum(v * v, axis=-1))
    angle = 2.0 * np.arctan2(s, pw)
    angle = np.where(angle > np.pi, angle - 2.0 * np.pi, angle)
    tiny = s < 1e-15
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(tiny, 2.0 / pw, angle / np.where(tiny, 1.0, s))
    return v * scale[..., None]
