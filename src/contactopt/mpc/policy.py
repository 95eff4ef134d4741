"""Policies: what a planner hands to the plant between two updates.

A policy is a function ``u(t, x)`` of simulated time ``t`` (seconds, the plant's clock)
and the measured plant state ``x = [qpos, qvel, act]`` (``nx``), valid from the time
``t0`` of the state it was planned from.  The plant evaluates it at every plant step.
"""

from __future__ import annotations

import abc

import mujoco
import numpy as np

from ..errors import ParameterError, as_array, check_finite

__all__ = ["ConstantPolicy", "Policy", "TrajectoryPolicy", "plan_index"]


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
            # tangent steps between consecutive knots, for the in-between reference state
            self._dX = np.empty((T, ndx))
            for i in range(T):
                self._dX[i] = self._diff(self.X[i], self.X[i + 1])
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
                dx -= w * self._dX[i]
            u = u + self.K[i] @ dx
        return np.clip(u, self.lower, self.upper)
