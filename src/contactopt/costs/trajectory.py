"""Trajectory costs: :class:`TrajectoryCost` (running + terminal stage costs) and
:class:`LinearQuadraticCost`."""

from __future__ import annotations

from typing import Protocol

import mujoco
import numpy as np

from ..errors import ParameterError, as_array, check_positive
from .stage import CostDerivatives, StageCost, _evaluate_stages, moving_residuals

__all__ = [
    "LinearQuadraticCost",
    "TrajectoryCost",
    "TrajectoryCostLike",
]


# =========================================================================== trajectory costs


def _check_trajectory(X, U, nx: int, nu: int):
    """``(X (T+1, nx), U (T, nu))`` checked: shapes, finiteness, ``T ≥ 1``."""
    U = as_array("U", U, (None, nu))
    if U.shape[0] < 1:
        raise ParameterError("horizon must be at least one step (U has 0 rows)")
    X = as_array("X", X, (U.shape[0] + 1, nx))
    return X, U


class TrajectoryCostLike(Protocol):
    """What a trajectory optimizer needs from a cost (see :class:`TrajectoryCost`)."""

    def total(self, X: np.ndarray, U: np.ndarray) -> float:
        """``J(X (T+1, nx), U (T, nu))``."""

    def evaluate(self, X: np.ndarray, U: np.ndarray) -> CostDerivatives:
        """Per-stage values and tangent-space derivatives."""


class _StageCosts:
    """What the trajectory costs share: the argument check, the total as the sum of the stage
    values and :attr:`total_is_evaluate_sum`.  A subclass sets ``nx``, ``nu`` and defines
    ``stage_values`` and ``evaluate``; declared with ``exact=True`` it is the class whose own
    ``total``, ``stage_values`` and ``evaluate`` agree bit for bit."""

    _exact_class: type

    def __init_subclass__(cls, *, exact: bool = False, **kwargs):
        super().__init_subclass__(**kwargs)
        if exact:
            cls._exact_class = cls

    @property
    def total_is_evaluate_sum(self) -> bool:
        """Whether ``total(X, U)`` is exactly ``evaluate(X, U).l.sum()`` (bit for bit), so that a
        solver needing both on the same trajectory may take the total from the derivatives
        (true unless a subclass overrides how either is computed)."""
        return all(getattr(type(self), n) is getattr(self._exact_class, n)
                   for n in ("total", "stage_values", "evaluate"))

    def _check(self, X, U):
        return _check_trajectory(X, U, self.nx, self.nu)

    def total(self, X, U) -> float:
        """Total cost ``J`` of ``X (T+1, nx)``, ``U (T, nu)``: the sum of :meth:`stage_values`."""
        return float(self.stage_values(X, U).sum())


class TrajectoryCost(_StageCosts, exact=True):
    """Total cost of a trajectory: ``J = Σ_{i<T} h ℓ(x_i, u_i) + ℓ_f(x_T)``.

    Args:
      running: the running :class:`StageCost` ``ℓ`` (a rate, cost per second).
      terminal: the terminal :class:`StageCost` ``ℓ_f`` (not scaled; must not use
        the control).  None: ``ℓ_f = h · (state terms of ℓ)``.
      timestep: ``h`` in seconds; default the model's ``opt.timestep``.  Use the
        *planner's* step when planning on a coarser grid than the model file's.

    Raises:
      ParameterError: non-positive time step, a terminal cost with control terms, or
        costs built for different models.
    """

    def __init__(self, running: StageCost, terminal: StageCost | None = None, *,
                 timestep: float | None = None):
        if not isinstance(running, StageCost):
            raise ParameterError(f"running must be a StageCost, got {type(running).__name__}")
        self.model = running.model
        self.timestep = check_positive(
            "timestep", self.model.opt.timestep if timestep is None else timestep)
        self.running = running
        if terminal is None:
            self.terminal = running.state_terms()
            self.terminal_scale = self.timestep
        else:
            if not isinstance(terminal, StageCost):
                raise ParameterError(f"terminal must be a StageCost or None, got {type(terminal).__name__}")
            if terminal.model is not running.model:
                raise ParameterError("terminal cost was built for a different model than the running cost")
            if terminal.uses_control:
                names = [t.name for t in terminal.terms if t.residual.uses_control]
                raise ParameterError(f"terminal cost must not depend on the control (terms {names})")
            self.terminal = terminal
            self.terminal_scale = 1.0
        self.nx, self.ndx, self.nu = running.nx, running.ndx, running.nu
        self._data = mujoco.MjData(self.model)

    @property
    def moving_residuals(self) -> list:
        """The residuals of the running and terminal terms whose target follows a reference, each
        once (:func:`~contactopt.costs.stage.moving_residuals`)."""
        return moving_residuals(self.running.terms + self.terminal.terms)

    @property
    def has_references(self) -> bool:
        """Whether some target moves (:meth:`schedule` then has work to do)."""
        return bool(self.moving_residuals)

    def schedule(self, t0: float, x0, num_stages: int) -> None:
        """Moving targets for a plan of ``num_stages`` stages (``T + 1`` with the terminal) that
        starts at ``t0`` [s] from ``x0 (nx,)``: stage ``k`` at ``t0 + k h``, the terminal stage
        (evaluated as stage ``T``) at ``t0 + T h``.  A no-op when no target moves."""
        moving = self.moving_residuals
        if not moving:
            return
        times = float(t0) + self.timestep * np.arange(int(num_stages))
        for r in moving:  # a residual shared by the running and terminal terms is scheduled once
            r.schedule(times, t0, x0)

    def stage_values(self, X, U) -> np.ndarray:
        """Per-stage costs ``(T+1,)`` (running stages multiplied by ``h``)."""
        X, U = self._check(X, U)
        T = U.shape[0]
        l = np.empty(T + 1)
        l[:T] = self.timestep * _evaluate_stages(self.running, self._data, X[:T], U, False)[0]
        l[T] = self.terminal_scale * _evaluate_stages(self.terminal, self._data, X[T:], None, False,
                                                      row_offset=T)[0][0]
        return l

    def evaluate(self, X, U) -> CostDerivatives:
        """Values and tangent-space derivatives of every stage (see :class:`CostDerivatives`)."""
        X, U = self._check(X, U)
        T = U.shape[0]
        h = self.timestep
        l, lx, lu, lxx, luu, lux = _evaluate_stages(self.running, self._data, X[:T], U, True)
        lf, lfx, _, lfxx, _, _ = _evaluate_stages(self.terminal, self._data, X[T:], None, True,
                                                  row_offset=T)
        s = self.terminal_scale
        return CostDerivatives(
            l=np.concatenate([h * l, s * lf]),
            lx=np.concatenate([h * lx, s * lfx]),
            lu=h * lu,
            lxx=np.concatenate([h * lxx, s * lfxx]),
            luu=h * luu,
            lux=h * lux,
        )


class LinearQuadraticCost(_StageCosts, exact=True):
    """Quadratic cost for Euclidean states (tests, linear systems):

    ``J = Σ_{i<T} [½ (x_i − x̄)ᵀQ(x_i − x̄) + ½ (u_i − ū)ᵀR(u_i − ū)] + ½ (x_T − x̄)ᵀQ_f(x_T − x̄)``.

    No time-step factor: the weights are per step.  Here ``ndx = nx``.

    Args:
      Q: ``(nx, nx)`` symmetric PSD state weight.
      R: ``(nu, nu)`` symmetric PSD control weight.
      Qf: ``(nx, nx)`` terminal weight (default ``Q``).
      x_ref: ``(nx,)`` target state (default 0).
      u_ref: ``(nu,)`` target control (default 0).
    """

    def __init__(self, Q, R, Qf=None, *, x_ref=None, u_ref=None):
        Q = as_array("Q", Q, (None, None))
        nx = Q.shape[0]
        Q = as_array("Q", Q, (nx, nx))
        R = as_array("R", R, (None, None))
        nu = R.shape[0]
        R = as_array("R", R, (nu, nu))
        Qf = Q if Qf is None else as_array("Qf", Qf, (nx, nx))
        for name, M in (("Q", Q), ("R", R), ("Qf", Qf)):
            if not np.allclose(M, M.T, atol=1e-12 * max(1.0, np.abs(M).max(initial=0.0))):
                raise ParameterError(f"{name} must be symmetric")
            if M.size and np.linalg.eigvalsh(M).min() < -1e-10 * max(1.0, np.abs(M).max()):
                raise ParameterError(f"{name} must be positive semi-definite")
        self.Q, self.R, self.Qf = Q, R, Qf
        self.nx = self.ndx = nx
        self.nu = nu
        self.x_ref = np.zeros(nx) if x_ref is None else as_array("x_ref", x_ref, (nx,))
        self.u_ref = np.zeros(nu) if u_ref is None else as_array("u_ref", u_ref, (nu,))

    def stage_values(self, X, U) -> np.ndarray:
        """Per-stage costs ``(T+1,)``."""
        X, U = self._check(X, U)
        dx = X - self.x_ref
        du = U - self.u_ref
        l = np.empty(X.shape[0])
        l[:-1] = 0.5 * np.einsum("ni,ij,nj->n", dx[:-1], self.Q, dx[:-1]) \
            + 0.5 * np.einsum("ni,ij,nj->n", du, self.R, du)
        l[-1] = 0.5 * dx[-1] @ self.Qf @ dx[-1]
        return l

    def evaluate(self, X, U) -> CostDerivatives:
        """Values and (exact) derivatives of every stage."""
        X, U = self._check(X, U)
        T = U.shape[0]
        dx = X - self.x_ref
        du = U - self.u_ref
        lx = np.empty((T + 1, self.nx))
        lx[:T] = dx[:T] @ self.Q
        lx[T] = self.Qf @ dx[T]
        lxx = np.empty((T + 1, self.nx, self.nx))
        lxx[:T] = self.Q
        lxx[T] = self.Qf
        return CostDerivatives(
            l=self.stage_values(X, U), lx=lx, lu=du @ self.R,
            lxx=lxx, luu=np.broadcast_to(self.R, (T, self.nu, self.nu)).copy(),
            lux=np.zeros((T, self.nu, self.nx)))
