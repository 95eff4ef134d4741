"""Outcome of an :class:`~contactopt.solvers.ilqg.solver.ILQG` solve: :class:`ILQGStatus`,
the per-iteration :class:`ILQGIterationLog` and :class:`ILQGResult`."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from ...errors import ParameterError, as_array

__all__ = ["ILQGIterationLog", "ILQGResult", "ILQGStatus"]


class ILQGStatus(enum.Enum):
    """Why a solve ended.

    Every status except ``DIVERGED`` returns a finite trajectory at least as good
    as the initial one.
    """

    CONVERGED = "converged"                      #: small step (gradient) or small cost improvement
    MAX_ITERATIONS = "max_iterations"            #: iteration budget used up
    TIME_LIMIT = "time_limit"                    #: ``time_limit`` seconds used up
    LINE_SEARCH_FAILED = "line_search_failed"    #: no acceptable step even with μ = μ_max
    REGULARIZATION_FAILED = "regularization_failed"  #: Q̃_uu not PD even with μ = μ_max
    DIVERGED = "diverged"                        #: the initial rollout or its derivatives are not finite


@dataclass(frozen=True)
class ILQGIterationLog:
    """One iLQG iteration.

    Attributes:
      iteration: 0-based index.
      cost: total cost ``J`` before the iteration.
      new_cost: cost after it (``cost`` if no step was accepted).
      expected_reduction: ``−ΔJ(α)`` for the accepted α (for α = 1 if none was accepted).
      alpha: accepted line-search step (0 if none).
      mu: μ used by the successful backward pass (after any restarts).
      accepted: whether the trajectory changed.
      gradient_norm: ``mean_i max_j |k_ij| / (|u_ij| + 1)``.
      backward_restarts: backward passes restarted for a non-PD ``Q̃_uu``.
      line_search_trials: rollouts tried.
      time_derivatives: seconds in dynamics + cost derivatives (0 if reused).
      time_dynamics_derivatives: of which the dynamics (finite differences); in the first
        iteration they may run in the background while the cost derivatives are evaluated
        (``MujocoDynamics.derivatives_async``), and then this is the time until both are done.
      time_backward: seconds in backward passes (restarts included).
      time_line_search: seconds in forward rollouts and cost evaluations.
    """

    iteration: int
    cost: float
    new_cost: float
    expected_reduction: float
    alpha: float
    mu: float
    accepted: bool
    gradient_norm: float
    backward_restarts: int
    line_search_trials: int
    time_derivatives: float
    time_dynamics_derivatives: float
    time_backward: float
    time_line_search: float

    @property
    def time_total(self) -> float:
        """Seconds of the whole iteration."""
        return self.time_derivatives + self.time_backward + self.time_line_search


@dataclass(frozen=True)
class ILQGResult:
    """Outcome of :meth:`ILQG.solve`.

    Attributes:
      X: ``(T+1, nx)`` planned states (the best trajectory found; for ``DIVERGED``
        the initial rollout, whose rows after the blow-up are NaN).
      U: ``(T, nu)`` planned controls (always finite; within the control limits).
      K: ``(T, nu, ndx)`` feedback gains of the last backward pass (zero rows for
        clamped controls): ``u ≈ U[i] + K[i] (x ⊖ X[i])``.
      k: ``(T, nu)`` feedforward steps of the last backward pass.
      cost: total cost ``J(X, U)``.
      status: :class:`ILQGStatus`.
      iterations: number of iterations run (``len(log)``).
      log: per-iteration :class:`ILQGIterationLog` records (frozen), a tuple.
      mu, delta: regularization state at the end (a warm start continues from it).
      initial_cost: cost of the initial rollout.
      solve_time: wall-clock seconds of the solve.
      x0: ``(nx,)`` the initial state the plan starts from.
      A, B: ``(T, ndx, ndx)``, ``(T, ndx, nu)`` the dynamics Jacobians of the last backward pass
        (around the trajectory before its last accepted step), or None (no backward pass).
      fresh_rows: ``(T,)`` bool, which rows of ``A``/``B`` this solve differentiated (the rest
        came from ``derivative_hint``); None when ``A`` is None.
    """

    X: np.ndarray
    U: np.ndarray
    K: np.ndarray
    k: np.ndarray
    cost: float
    status: ILQGStatus
    iterations: int
    log: tuple[ILQGIterationLog, ...]
    mu: float
    delta: float
    initial_cost: float
    solve_time: float
    x0: np.ndarray = field(repr=False, default=None)
    A: np.ndarray | None = field(repr=False, default=None)
    B: np.ndarray | None = field(repr=False, default=None)
    fresh_rows: np.ndarray | None = field(repr=False, default=None)

    @property
    def converged(self) -> bool:
        """True if the status is ``CONVERGED``."""
        return self.status is ILQGStatus.CONVERGED

    @property
    def ok(self) -> bool:
        """True unless the solve ``DIVERGED``: ``X``, ``U`` are finite and no worse than the initial guess."""
        return self.status is not ILQGStatus.DIVERGED

    @property
    def horizon(self) -> int:
        """Number of control steps ``T``."""
        return self.U.shape[0]

    def control(self, i: int, dx=None) -> np.ndarray:
        """Feedback control of step ``i``: ``U[i] + K[i] dx`` with ``dx = x ⊖ X[i]`` (ndx,), or ``U[i]``.

        Not clamped; clamp to the control limits before applying.
        """
        if not 0 <= i < self.horizon:
            raise ParameterError(f"step index {i} outside the plan's {self.horizon} steps")
        if dx is None:
            return self.U[i].copy()
        dx = as_array("dx", dx, (self.K.shape[2],))
        return self.U[i] + self.K[i] @ dx

    def timing(self) -> dict[str, float]:
        """Seconds summed over iterations, with the keys shared by the three solvers.

        ``derivatives`` (dynamics + cost derivatives), ``solve`` (backward passes, restarts
        included), ``line_search`` (forward rollouts and cost evaluations), ``total`` (the whole
        solve), and iLQG's ``dynamics_derivatives`` (of ``derivatives``, the dynamics').
        """
        it = self.log
        return {
            "derivatives": sum(l.time_derivatives for l in it),
            "solve": sum(l.time_backward for l in it),
            "line_search": sum(l.time_line_search for l in it),
            "total": self.solve_time,
            "dynamics_derivatives": sum(l.time_dynamics_derivatives for l in it),
        }
