"""Policies: what a planner hands to the plant between two updates.

A policy is a function ``u(t, x)`` of simulated time ``t`` (seconds, the plant's clock)
and the measured plant state ``x = [qpos, qvel, act]`` (``nx``), valid from the time
``t0`` of the state it was planned from.  The plant evaluates it at every plant step.
"""

from __future__ import annotations

import abc
import math

import mujoco
import numpy as np
from scipy.interpolate import CubicSpline

from ..errors import ParameterError, as_array, check_finite

__all__ = ["ConstantPolicy", "Policy", "SplineTrackingPolicy", "TrajectoryPolicy", "UniformCubicSpline", "plan_index"]


def plan_index(t: float, t0: float, h: float, T: int) -> tuple[int, float]:
    """``(i, w)``: the knot ``i`` of a plan of ``T`` controls on the grid ``t0 + i h`` [s] that
    time ``t`` falls after, and the fraction ``w ∈ [0, 1]`` of the way to the next one; before
    ``t0`` the first knot, after the last control it is held (``i = T − 1``) while ``w`` moves
    the reference state on to ``X[T]`` and stays there."""
    s = (t - t0) / h
    if s <= 0:
        return 0, 0.0
    if s >= T - 1:
        return T - 1, min(s - (T - 1), 1.0)
    i = int(s)
    return i, s - i


class Policy(abc.ABC):
    """A control law ``u = π(t, x)`` planned from the state at time :attr:`t0`.

    Attributes:
      t0: simulated time (s) of the state the policy was planned from.
      nu: control size.
    """

    t0: float
    nu: int

    @abc.abstractmethod
    def control(self, t: float, x: np.ndarray) -> np.ndarray:
        """Control ``(nu,)`` at time ``t`` (s) for plant state ``x`` (``(nx,)``); may be non-finite
        only if ``x`` is (the runner checks)."""

    def feedforward(self, t: float) -> np.ndarray:
        """The open-loop part ``(nu,)`` at time ``t`` (the fallback when feedback is not finite)."""
        return self.control(t, None)


class ConstantPolicy(Policy):
    """``u(t, x) = u₀`` (e.g. zero control before the first plan)."""

    def __init__(self, u, t0: float = 0.0):
        self.u = np.array(u, dtype=float).reshape(-1)
        self.nu = self.u.size
        self.t0 = check_finite("t0", t0)

    def control(self, t, x):
        return self.u.copy()


class TrajectoryPolicy(Policy):
    """Time-indexed plan with linear feedback around it (iLQG's policy)::

        u(t, x) = clip( Ū(t) + K_i · (x ⊖ X̄(t)),  lower, upper ),   i = ⌊(t − t₀)/h⌋

    ``Ū`` is linearly interpolated between the knots ``t₀ + i h``; ``X̄(t) = X_i ⊕ w (X_{i+1} ⊖ X_i)``
    with ``w = (t − t₀)/h − i``, computed as ``x ⊖ X̄(t) ≈ (x ⊖ X_i) − w (X_{i+1} ⊖ X_i)``
    (exact for Euclidean coordinates, first order for quaternions).  After the last knot
    the last control and gain are held against the last state.

    Args:
      model: the model whose configuration manifold ``X`` lives on (quaternion-aware ``⊖``).
      t0: time (s) of ``X[0]``.
      timestep: ``h`` (s), the plan's knot spacing.
      U: ``(T, nu)`` planned controls.
      X: ``(T+1, nx)`` planned states, required with ``K``.
      K: ``(T, nu, ndx)`` feedback gains (None: open loop).
      lower, upper: ``(nu,)`` control limits (±inf allowed; default unbounded).
    """

    def __init__(self, model: mujoco.MjModel, t0: float, timestep: float, U, X=None, K=None,
                 lower=None, upper=None):
        self.model = model
        self.t0 = check_finite("t0", t0)
        if not (np.isfinite(timestep) and timestep > 0):
            raise ParameterError(f"timestep must be positive, got {timestep}")
        self.h = float(timestep)
        self.U = as_array("U", U, (None, model.nu))
        T = self.U.shape[0]
        if T < 1:
            raise ParameterError("a plan needs at least one control step")
        self.nu = model.nu
        self.nq, self.nv = model.nq, model.nv
        nx = model.nq + model.nv + model.na
        ndx = 2 * model.nv + model.na
        self._dq = np.empty(model.nv)
        self.K = None
        if K is not None:
            if X is None:
                raise ParameterError("feedback gains K need the planned states X")
            self.K = as_array("K", K, (T, model.nu, ndx))
            self.X = as_array("X", X, (T + 1, nx))
            # tangent steps between consecutive knots, for the in-between reference state,
            # computed on first use (a plant applies only the first few knots of a plan before
            # the next replaces it: computing all T here cost 0.5 ms of each 160-knot iLQG update)
            self._dX = np.empty((T, ndx))
            self._dX_done = np.zeros(T, dtype=bool)
        self.lower = np.full(model.nu, -np.inf) if lower is None else np.asarray(lower, float)
        self.upper = np.full(model.nu, np.inf) if upper is None else np.asarray(upper, float)

    @property
    def horizon_time(self) -> float:
        """Duration (s) covered by the plan."""
        return self.U.shape[0] * self.h

    def _diff(self, x0, x1) -> np.ndarray:
        """``x1 ⊖ x0`` (ndx,)."""
        nq, nv = self.nq, self.nv
        out = np.empty(2 * nv + (x0.size - nq - nv))
        mujoco.mj_differentiatePos(self.model, self._dq, 1.0, x0[:nq], x1[:nq])
        out[:nv] = self._dq
        out[nv:] = x1[nq:] - x0[nq:]
        return out

    def _index(self, t: float) -> tuple[int, float]:
        return plan_index(t, self.t0, self.h, self.U.shape[0])

    def feedforward(self, t: float) -> np.ndarray:
        i, w = self._index(t)
        T = self.U.shape[0]
        u = self.U[i] if (w == 0.0 or i + 1 >= T) else (1 - w) * self.U[i] + w * self.U[i + 1]
        return np.clip(u, self.lower, self.upper)

    def control(self, t: float, x) -> np.ndarray:
        i, w = self._index(t)
        T = self.U.shape[0]
        u = self.U[i] if (w == 0.0 or i + 1 >= T) else (1 - w) * self.U[i] + w * self.U[i + 1]
        if self.K is not None and x is not None:
            dx = self._diff(self.X[i], x)
            if w:
                dx -= w * self._knot_step(i)
            u = u + self.K[i] @ dx
        return np.clip(u, self.lower, self.upper)

    def _knot_step(self, i: int) -> np.ndarray:
        """``X[i+1] ⊖ X[i]`` (ndx,), cached."""
        if not self._dX_done[i]:
            self._dX[i] = self._diff(self.X[i], self.X[i + 1])
            self._dX_done[i] = True
        return self._dX[i]


# --------------------------------------------------------------------------- spline tracking (IDTO)

_NAK_CACHE: dict = {}


def _not_a_knot_map(n: int) -> np.ndarray:
    """``(n, n)`` map from knot values to second derivatives of the not-a-knot cubic spline on the
    unit-spaced knots ``0 … n−1`` (``n ≥ 4``); divide by ``h²`` for spacing ``h``."""
    S = _NAK_CACHE.get(n)
    if S is None:
        A = np.zeros((n, n))
        B = np.zeros((n, n))
        for i in range(1, n - 1):  # C² continuity: M_{i−1} + 4 M_i + M_{i+1} = 6 Δ²y_i
            A[i, i - 1:i + 2] = (1.0, 4.0, 1.0)
            B[i, i - 1:i + 2] = (6.0, -12.0, 6.0)
        # not-a-knot: third derivative continuous at the second and the second-to-last knot
        A[0, :3] = (1.0, -2.0, 1.0)
        A[-1, -3:] = (1.0, -2.0, 1.0)
        S = _NAK_CACHE[n] = np.linalg.solve(A, B)
    return S


class UniformCubicSpline:
    """C² not-a-knot cubic spline through values ``Y (n, k)`` at uniform knots ``0, h, …, (n−1) h``.

    The same interpolant as ``scipy.interpolate.CubicSpline(knots, Y, bc_type="not-a-knot")``
    (for ``n ≥ 4``; fewer knots fall back to SciPy), built with one precomputed ``(n, n)``
    matrix product.  ``spline(s, nu)`` evaluates derivative ``nu ∈ {0, 1, 2}`` at a scalar
    ``s`` [s] (extrapolating the end pieces outside ``[0, (n−1) h]``); returns ``(k,)``.
    """

    def __init__(self, h: float, Y):
        Y = np.asarray(Y, dtype=float)
        self.h = float(h)
        self.n = Y.shape[0]
        self.Y = Y
        self._scipy = None
        if self.n < 4:
            self._scipy = CubicSpline(self.h * np.arange(self.n), Y, axis=0, bc_type="not-a-knot")
            self.M = None
        else:
            self.M = _not_a_knot_map(self.n) @ Y / (self.h * self.h)

    def __call__(self, s: float, nu: int = 0) -> np.ndarray:
        if self._scipy is not None:
            return self._scipy(s, nu)
        h, Y, M = self.h, self.Y, self.M
        i = min(max(int(math.floor(s / h)), 0), self.n - 2)
        a = (i + 1) * h - s  # distance to the right knot
        b = s - i * h  # distance to the left knot
        Mi, Mj, yi, yj = M[i], M[i + 1], Y[i], Y[i + 1]
        if nu == 0:
            return (Mi * a ** 3 + Mj * b ** 3) / (6 * h) + (yi / h - Mi * h / 6) * a + (yj / h - Mj * h / 6) * b
        if nu == 1:
            return (Mj * b * b - Mi * a * a) / (2 * h) + (yj - yi) / h - (Mj - Mi) * h / 6
        if nu == 2:
            return (Mi * a + Mj * b) / h
        raise ParameterError(f"UniformCubicSpline: derivative order must be 0, 1 or 2, got {nu!r}")


class SplineTrackingPolicy(Policy):
    """The tracking law of an IDTO plan, shared by :class:`~contactopt.mpc.idto_planner.IDTOPolicy` (in process, on an
    ``MjModel``) and :class:`~contactopt.remote.messages.RemoteSplinePolicy` (on a client, from the
    model's joint layout): ``u = clip(u_ff(t) + K_p (q_d(t) ⊖ q) + K_d (v_d(t) − v), lower, upper)``
    with not-a-knot cubic splines of the knots ``q, v, u_ff`` (``u_ff`` repeated at the last knot).

    A subclass sets, before :meth:`_set_plan`, ``nq``, ``nv``, ``t0`` [s], ``h`` [s], ``Kp``,
    ``Kd`` ``(nu, nv)``, ``lower``, ``upper`` ``(nu,)``, and provides the configuration-space
    operations :meth:`_normalize` and :meth:`_difference`.
    """

    def _set_plan(self, q, v, u_ff) -> None:
        """Fit the splines to ``q (T+1, nq)``, ``v (T+1, nv)``, ``u_ff (T, nu)``."""
        self.T = q.shape[0] - 1
        Y = np.concatenate([q, v, np.vstack([u_ff, u_ff[-1:]])], axis=1)  # (T+1, nq+nv+nu)
        self._spline = UniformCubicSpline(self.h, Y)
        self._dq = np.empty(self.nv)

    def _normalize(self, q: np.ndarray) -> None:
        """Normalize the quaternions of ``q (nq,)`` in place."""
        raise NotImplementedError

    def _difference(self, q: np.ndarray, q_target: np.ndarray, out: np.ndarray) -> None:
        """``out = q_target ⊖ q`` ``(nv,)`` (``mj_differentiatePos(q → q_target)``)."""
        raise NotImplementedError

    @property
    def horizon_time(self) -> float:
        """Seconds covered by the plan (``T h``)."""
        return self.T * self.h

    def reference(self, t: float):
        """``(q_d (nq,), v_d (nv,), u_ff (nu,))`` of the splines at time ``t`` [s] (clamped to the plan)."""
        s = min(max(t - self.t0, 0.0), self.T * self.h)
        y = self._spline(s)
        nq, nv = self.nq, self.nv
        qd = y[:nq].copy()
        self._normalize(qd)
        return qd, y[nq:nq + nv], y[nq + nv:]

    def feedforward(self, t: float) -> np.ndarray:
        """Clipped ``u_ff(t)`` ``(nu,)``."""
        return np.clip(self.reference(t)[2], self.lower, self.upper)

    def control(self, t: float, x) -> np.ndarray:
        """The PD + feedforward control ``(nu,)`` for state ``x`` ``(nx,)`` at time ``t`` [s]
        (``x`` None: the clipped feedforward)."""
        qd, vd, u = self.reference(t)
        if x is not None:
            nq, nv = self.nq, self.nv
            x = np.asarray(x, dtype=float)
            self._difference(x[:nq], qd, self._dq)
            u = u + self.Kp @ self._dq + self.Kd @ (vd - x[nq:nq + nv])
        return np.clip(u, self.lower, self.upper)
