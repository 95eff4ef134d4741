"""Desired accelerations of the goal-directed cost terms (see :mod:`contactopt.solvers.gdd.costs`).

:class:`SpringDamper`, :class:`MinimumJerk` and fixed arrays give the desired acceleration of a
frame (:class:`FrameState`) for the frame terms; :class:`PostureTarget` is a PD acceleration
target toward a reference configuration for :class:`~contactopt.solvers.gdd.costs.AccelerationTarget`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import mujoco
import numpy as np

from ...errors import ParameterError, as_array, check_nonnegative, check_positive
from . import kernels as K
from .cost_base import _bump_structure

__all__ = ["FrameState", "MinimumJerk", "PostureTarget", "SpringDamper"]


# --------------------------------------------------------------------------- desired accelerations


class FrameState(NamedTuple):
    """Kinematic state of an end-effector frame (world coordinates).

    pos (3,) m, vel (3,) m/s, quat (4,) (w, x, y, z) and angvel (3,) rad/s
    (None when the target only needs the position), time s.
    """

    pos: np.ndarray
    vel: np.ndarray
    quat: np.ndarray | None
    angvel: np.ndarray | None
    time: float


class _BufferGain:
    """Descriptor for a gain kept at ``_kbuf[index]`` (the array the compiled solver reads): a
    float, validated by ``check(name, value)`` when assigned."""

    def __init__(self, index, check, doc):
        self.index = index
        self.check = check
        self.__doc__ = doc

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return float(obj._kbuf[self.index])

    def __set__(self, obj, value):
        obj._kbuf[self.index] = self.check(self.name, value)


class SpringDamper:
    """Desired acceleration of a virtual spring-damper toward a spatial goal.

    ``a* = k S (x_goal − x) − b ẋ`` (3 rows; ``S = diag(axes)`` selects the axes the
    spring acts on, default all three); with an orientation goal also
    ``α* = k_r · log(q_goal q⁻¹) − b_r ω`` (rotation vector in the world frame),
    making 6 rows ``(linear, angular)``.  The linear part can be capped to
    ``max_acceleration`` (norm), which keeps far goals from asking for huge accelerations.

    Args:
      position: ``(3,)`` goal position, m.
      stiffness: k in 1/s² (> 0).  damping: b in 1/s (≥ 0; default critical, ``2√k``).
      orientation: optional ``(4,)`` goal quaternion (w, x, y, z).
      rot_stiffness, rot_damping: orientation gains (default: same as the linear ones).
      max_acceleration: optional cap in m/s² on the norm of the linear part.
      axes: ``(3,)`` 0/1 weights of the spring per world axis (default ``(1, 1, 1)``;
        e.g. ``(1, 1, 0)``: a horizontal spring with damping on all three axes).

    The linear gains and the goal live in one array the compiled solver reads
    directly (``position`` is a view of it; assign to it or write into it in place).
    """

    def __init__(self, position, *, stiffness: float = 100.0, damping: float | None = None,
                 orientation=None, rot_stiffness: float | None = None,
                 rot_damping: float | None = None, max_acceleration: float | None = None,
                 axes=None):
        # layout: goal (3), k, b, cap (0: none), axes (3), offset (3) — kernels.SPRING_LEN
        self._kbuf = np.zeros(K.SPRING_LEN)
        self._kbuf[6:9] = 1.0
        self.position = as_array("position", position, (3,))
        self.stiffness = stiffness
        self.damping = (2.0 * math.sqrt(self.stiffness) if damping is None else damping)
        if orientation is not None:
            q = as_array("orientation", orientation, (4,)).copy()
            n = np.linalg.norm(q)
            if not n > 0:
                raise ParameterError("orientation must be a nonzero quaternion (w, x, y, z)")
            orientation = q / n
        self.orientation = orientation
        self.rot_stiffness = (self.stiffness if rot_stiffness is None
                              else check_positive("rot_stiffness", rot_stiffness))
        self.rot_damping = (2.0 * math.sqrt(self.rot_stiffness) if rot_damping is None
                            else check_nonnegative("rot_damping", rot_damping))
        self.max_acceleration = max_acceleration
        if axes is not None:
            ax = as_array("axes", axes, (3,))
            if np.any((ax != 0.0) & (ax != 1.0)):
                raise ParameterError(f"axes must hold 0 or 1 per axis, got {ax.tolist()}")
            self._kbuf[6:9] = ax
        self._all_axes = bool(np.all(self._kbuf[6:9] == 1.0))

    @property
    def position(self) -> np.ndarray:
        """``(3,)`` goal position, m (assignable, validated; a view the solver reads)."""
        return self._kbuf[0:3]

    @position.setter
    def position(self, value) -> None:
        self._kbuf[0:3] = as_array("position", value, (3,))

    stiffness = _BufferGain(3, check_positive, "k, 1/s² (> 0).")
    damping = _BufferGain(4, check_nonnegative, "b, 1/s (≥ 0).")

    @property
    def max_acceleration(self) -> float | None:
        """Cap on the norm of the linear part, m/s² (None: no cap)."""
        cap = float(self._kbuf[5])
        return None if cap == 0.0 else cap

    @max_acceleration.setter
    def max_acceleration(self, value) -> None:
        self._kbuf[5] = 0.0 if value is None else check_positive("max_acceleration", value)

    @property
    def axes(self) -> np.ndarray:
        """``(3,)`` axes the spring acts on (copy)."""
        return self._kbuf[6:9].copy()

    def _kernel_gains(self):
        """``(k, b, cap or 0)`` for :func:`kernels.spring_residual` (current attributes)."""
        return float(self._kbuf[3]), float(self._kbuf[4]), float(self._kbuf[5])

    @property
    def dim(self) -> int:
        """3 (position goal) or 6 (position and orientation goal)."""
        return 3 if self.orientation is None else 6

    def __call__(self, frame: FrameState) -> np.ndarray:
        """Desired ``(3,)`` or ``(6,)`` acceleration for the frame's current state."""
        kb = self._kbuf
        lin = kb[3] * kb[6:9] * (kb[0:3] - frame.pos) - kb[4] * np.asarray(frame.vel, dtype=float)
        cap = kb[5]
        if cap > 0:
            n = math.sqrt(lin.dot(lin))
            if n > cap:
                lin *= cap / n
        if self.orientation is None:
            return lin
        err = np.empty(3)
        # rotation taking the current orientation to the goal, in the current frame → world
        mujoco.mju_subQuat(err, self.orientation, frame.quat)
        mat = np.empty(9)
        mujoco.mju_quat2Mat(mat, frame.quat)
        err_world = mat.reshape(3, 3) @ err
        ang = self.rot_stiffness * err_world - self.rot_damping * frame.angvel
        return np.concatenate([lin, ang])


class MinimumJerk:
    """Desired acceleration that tracks a minimum-jerk profile (Flash & Hogan 1985).

    Reference ``x_ref(t) = x0 + (x1 − x0) s(τ)``, ``s = 10τ³ − 15τ⁴ + 6τ⁵``,
    ``τ = clip((t − t0)/T, 0, 1)``; desired acceleration
    ``a* = ẍ_ref + k (x_ref − x) + b (ẋ_ref − ẋ)``.

    Args:
      goal: ``(3,)`` end position x1, m.  duration: T in s (> 0).
      start: ``(3,)`` start position x0; None: the frame position at the first call.
      start_time: t0 in s; None: the simulation time at the first call.
      stiffness, damping: feedback gains around the reference (1/s², 1/s).
    """

    dim = 3

    def __init__(self, goal, duration: float, *, start=None, start_time: float | None = None,
                 stiffness: float = 100.0, damping: float | None = None):
        self.goal = as_array("goal", goal, (3,)).copy()
        self.duration = check_positive("duration", duration)
        self.start = None if start is None else as_array("start", start, (3,)).copy()
        self.start_time = None if start_time is None else float(start_time)
        self.stiffness = check_nonnegative("stiffness", stiffness)
        self.damping = (2.0 * math.sqrt(self.stiffness) if damping is None
                        else check_nonnegative("damping", damping))

    def reference(self, t: float):
        """``(x_ref, ẋ_ref, ẍ_ref)`` at time ``t`` (needs the start to be set)."""
        if self.start is None or self.start_time is None:
            raise ParameterError("MinimumJerk: start and start_time are not set yet")
        T = self.duration
        tau = min(max((t - self.start_time) / T, 0.0), 1.0)
        s = tau ** 3 * (10 - 15 * tau + 6 * tau ** 2)
        inside = 0.0 < (t - self.start_time) < T
        ds = (30 * tau ** 2 - 60 * tau ** 3 + 30 * tau ** 4) / T if inside else 0.0
        dds = (60 * tau - 180 * tau ** 2 + 120 * tau ** 3) / T ** 2 if inside else 0.0
        delta = self.goal - self.start
        return self.start + delta * s, delta * ds, delta * dds

    def __call__(self, frame: FrameState) -> np.ndarray:
        if self.start is None:
            self.start = np.array(frame.pos, dtype=float)
        if self.start_time is None:
            self.start_time = float(frame.time)
        x, v, acc = self.reference(frame.time)
        return acc + self.stiffness * (x - frame.pos) + self.damping * (v - frame.vel)


class _FixedTarget:
    """A constant desired acceleration ``(3,)`` or ``(6,)``."""

    def __init__(self, value):
        value = as_array("target", value)
        if value.shape not in ((3,), (6,)):
            raise ParameterError(f"target acceleration must have shape (3,) or (6,), got {value.shape}")
        self.value = value.copy()
        self.dim = value.size
        # spring layout (kernels.SPRING_LEN) with k = b = 0 and the value as offset
        self._kbuf = np.zeros(K.SPRING_LEN)
        if self.dim == 3:
            self._kbuf[9:12] = self.value

    def __call__(self, frame: FrameState) -> np.ndarray:
        return self.value


def _as_target(target):
    if isinstance(target, (SpringDamper, MinimumJerk, _FixedTarget)):
        return target
    if callable(target):
        dim = getattr(target, "dim", None)
        if dim not in (3, 6):
            raise ParameterError("a callable target needs an attribute dim = 3 or 6")
        return target
    return _FixedTarget(target)


class _TargetAttr:
    """Descriptor for a frame term's ``target``: validated and converted by :func:`_as_target`;
    replacing it bumps the structure version."""

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj._target

    def __set__(self, obj, value):
        obj._target = _as_target(value)
        _bump_structure()


class PostureTarget:
    """A PD acceleration target toward a reference configuration, for :class:`AccelerationTarget`.

    ``a* = kp ⊙ (qref ⊖ q) − kd ⊙ v`` ``(nv,)`` (m/s², rad/s²), with ``⊖`` the
    configuration difference of ``mj_differentiatePos`` (quaternions for free and
    ball joints) and per-dof gains ``kp`` (1/s²) and ``kd`` (1/s).  The compiled
    solver evaluates it itself (no Python call per step); as a callable
    ``problem -> (nv,)`` it gives the same values.

    Args:
      model: the MuJoCo model.  qref: ``(nq,)`` reference (default ``qpos0``).
      kp: stiffness, scalar or ``(nv,)`` (≥ 0).  kd: damping, scalar or ``(nv,)``
        (≥ 0; default ``2√kp``, critical).
    """

    def __init__(self, model: mujoco.MjModel, qref=None, *, kp=10.0, kd=None):
        self.model = model
        self.nv, self.nq = model.nv, model.nq
        # layout: kp (nv), kd (nv), qref (nq) — read by the compiled solver
        self._kbuf = np.zeros(2 * self.nv + self.nq)
        self.qref = model.qpos0 if qref is None else qref
        kp_arr = np.broadcast_to(np.asarray(kp, dtype=float), (self.nv,))
        self.set_gains(kp_arr, np.sqrt(np.maximum(kp_arr, 0.0)) * 2.0 if kd is None else kd)
        self._dq = np.zeros(self.nv)

    @property
    def qref(self) -> np.ndarray:
        """``(nq,)`` reference configuration (a view; assign or write in place)."""
        return self._kbuf[2 * self.nv:]

    @qref.setter
    def qref(self, value) -> None:
        self._kbuf[2 * self.nv:] = as_array("qref", value, (self.nq,))

    @property
    def kp(self) -> np.ndarray:
        """``(nv,)`` stiffness per dof, 1/s² (a view)."""
        return self._kbuf[:self.nv]

    @property
    def kd(self) -> np.ndarray:
        """``(nv,)`` damping per dof, 1/s (a view)."""
        return self._kbuf[self.nv:2 * self.nv]

    def set_gains(self, kp=None, kd=None) -> None:
        """Set the gains (scalars or ``(nv,)``, ≥ 0); None keeps the current ones."""
        for name, value, sl in (("kp", kp, slice(0, self.nv)), ("kd", kd, slice(self.nv, 2 * self.nv))):
            if value is None:
                continue
            arr = np.broadcast_to(np.asarray(value, dtype=float), (self.nv,))
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ParameterError(f"{name} must be finite and >= 0")
            self._kbuf[sl] = arr

    def __call__(self, problem) -> np.ndarray:
        mujoco.mj_differentiatePos(self.model, self._dq, 1.0, problem.data.qpos, self.qref)
        return self.kp * self._dq - self.kd * problem.data.qvel
