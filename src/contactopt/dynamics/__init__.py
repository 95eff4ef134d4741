"""Discrete-time dynamics ``x_{i+1} = f(x_i, u_i)`` and their derivatives, for the solvers.

A dynamics object satisfies :class:`Dynamics`: sizes, batched rollouts with an
optional feedback policy, tangent-space state arithmetic, and the transition
Jacobians ``A_i = ∂f/∂x (ndx, ndx)``, ``B_i = ∂f/∂u (ndx, nu)`` along a trajectory.

* :class:`~contactopt.dynamics.mujoco_fd.MujocoDynamics` — ``mj_step`` on a (planner)
  model, derivatives by ``mjd_transitionFD`` threaded over time steps.
* :class:`LinearDynamics` — ``x' = A x + B u + c`` on a Euclidean state (tests, LQR).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import ParameterError, ShapeError, as_array

__all__ = [
    "Dynamics",
    "RolloutResult",
    "LinearDynamics",
    "check_control_limits",
    "MujocoDynamics",
    "smooth_contacts",
]


@dataclass(frozen=True)
class RolloutResult:
    """A simulated trajectory.

    Attributes:
      X: ``(T+1, nx)`` states, ``X[0] = x0``.
      U: ``(T, nu)`` controls actually applied (after feedback and clamping).
      diverged: True if the simulation blew up (non-finite state, or MuJoCo's
        bad-qpos/qvel/qacc/ctrl warning, after which MuJoCo resets the state or zeroes
        the control, |value| > 1e10); the rows
        from ``diverged_at + 1`` on are then meaningless.
      diverged_at: first step index whose result is bad, or None.
    """

    X: np.ndarray
    U: np.ndarray
    diverged: bool = False
    diverged_at: int | None = None


@runtime_checkable
class Dynamics(Protocol):
    """What a trajectory optimizer needs from the dynamics.

    Attributes:
      nx: packed state size; ndx: tangent size; nu: control size.
      control_lower, control_upper: ``(nu,)`` default control limits (±inf if none).
    """

    nx: int
    ndx: int
    nu: int
    control_lower: np.ndarray
    control_upper: np.ndarray

    def rollout(self, x0, U, *, X_ref=None, K=None, lower=None, upper=None) -> RolloutResult:
        """Simulate ``u_i = clip(U_i + K_i (x_i ⊖ X_ref_i), lower, upper)``, ``x_{i+1} = f(x_i, u_i)``."""

    def derivatives(self, X, U) -> tuple[np.ndarray, np.ndarray]:
        """``A (T, ndx, ndx)``, ``B (T, ndx, nu)`` at ``(X[i], U[i])``, ``i < T``."""

    def state_difference(self, X0, X1) -> np.ndarray:
        """``X1 ⊖ X0`` row by row, ``(N, ndx)``."""

    def state_integrate(self, X, dX) -> np.ndarray:
        """``X ⊕ dX`` row by row, ``(N, nx)``."""


def check_control_limits(nu: int, lower, upper) -> tuple[np.ndarray, np.ndarray]:
    """Validate control limits: ``(nu,)`` arrays (or None = unbounded) with ``lower ≤ upper``.

    ±inf entries are allowed; NaN is not.

    Raises:
      ShapeError, NonFiniteError (NaN), ParameterError (``lower > upper`` somewhere).
    """
    lo = np.full(nu, -np.inf) if lower is None else as_array("control lower limit", lower, (nu,),
                                                               finite=False).copy()
    hi = np.full(nu, np.inf) if upper is None else as_array("control upper limit", upper, (nu,),
                                                              finite=False).copy()
    for name, v in (("control lower limit", lo), ("control upper limit", hi)):
        if np.any(np.isnan(v)):
            from ..errors import NonFiniteError
            raise NonFiniteError(f"{name}: contains NaN at index {int(np.argmax(np.isnan(v)))}")
    if np.any(lo > hi):
        i = int(np.argmax(lo > hi))
        raise ParameterError(
            f"control limits: lower > upper for control {i} ({lo[i]} > {hi[i]})")
    return lo, hi


class LinearDynamics:
    """Linear (optionally time-varying) dynamics on a Euclidean state: ``x_{i+1} = A_i x_i + B_i u_i + c_i``.

    Args:
      A: ``(n, n)`` or ``(T, n, n)``.
      B: ``(n, m)`` or ``(T, n, m)``.
      c: ``(n,)`` or ``(T, n)`` drift (default zero).
      control_lower, control_upper: ``(m,)`` control limits (default unbounded).
    """

    def __init__(self, A, B, c=None, *, control_lower=None, control_upper=None):
        A = as_array("A", A)
        B = as_array("B", B)
        if A.ndim not in (2, 3) or A.shape[-1] != A.shape[-2]:
            raise ShapeError(f"A: expected shape (n, n) or (T, n, n), got {A.shape}")
        n = A.shape[-1]
        if B.ndim != A.ndim or B.shape[-2] != n:
            raise ShapeError(f"B: expected shape {'(T, ' if A.ndim == 3 else '('}{n}, m), got {B.shape}")
        if A.ndim == 3 and B.shape[0] != A.shape[0]:
            raise ShapeError(f"B: time dimension {B.shape[0]} differs from A's {A.shape[0]}")
        self.A, self.B = A, B
        self.nx = self.ndx = n
        self.nu = B.shape[-1]
        self.time_varying = A.ndim == 3
        if c is None:
            c = np.zeros(A.shape[:-1])
        self.c = as_array("c", c, A.shape[:-1])
        self.control_lower, self.control_upper = check_control_limits(self.nu, control_lower,
                                                                      control_upper)

    def _at(self, M, i):
        return M[i] if self.time_varying else M

    def _horizon_check(self, T):
        if self.time_varying and T > self.A.shape[0]:
            raise ParameterError(f"horizon {T} exceeds the {self.A.shape[0]} steps of the time-varying system")

    def rollout(self, x0, U, *, X_ref=None, K=None, lower=None, upper=None) -> RolloutResult:
        """Simulate with ``u_i = clip(U_i + K_i (x_i − X_ref_i), lower, upper)``."""
        U = as_array("U", U, (None, self.nu))
        T = U.shape[0]
        self._horizon_check(T)
        x = as_array("x0", x0, (self.nx,))
        lo = self.control_lower if lower is None else lower
        hi = self.control_upper if upper is None else upper
        X = np.empty((T + 1, self.nx))
        Ua = np.empty_like(U)
        X[0] = x
        for i in range(T):
            u = U[i]
            if K is not None:
                u = u + K[i] @ (X[i] - X_ref[i])
            u = np.clip(u, lo, hi)
            Ua[i] = u
            X[i + 1] = self._at(self.A, i) @ X[i] + self._at(self.B, i) @ u + self._at(self.c, i)
        bad = ~np.all(np.isfinite(X), axis=1)
        if bad.any():
            return RolloutResult(X, Ua, True, max(int(np.argmax(bad)) - 1, 0))
        return RolloutResult(X, Ua)

    def derivatives(self, X, U):
        """``A (T, n, n)``, ``B (T, n, m)`` (copies of the system matrices)."""
        U = as_array("U", U, (None, self.nu))
        T = U.shape[0]
        self._horizon_check(T)
        if self.time_varying:
            return self.A[:T].copy(), self.B[:T].copy()
        return (np.broadcast_to(self.A, (T,) + self.A.shape).copy(),
                np.broadcast_to(self.B, (T,) + self.B.shape).copy())

    def state_difference(self, X0, X1):
        """``X1 − X0``."""
        return np.asarray(X1, dtype=float) - np.asarray(X0, dtype=float)

    def state_integrate(self, X, dX):
        """``X + dX``."""
        return np.asarray(X, dtype=float) + np.asarray(dX, dtype=float)


from .mujoco_fd import MujocoDynamics, smooth_contacts  # noqa: E402  (re-export)
