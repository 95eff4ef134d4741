"""Settings of the goal-directed dynamics solver: :class:`GDDSettings`, :class:`DualUpdate`,
:class:`LineSearch` (see :mod:`contactopt.solvers.gdd.solver`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ...errors import ParameterError, check_positive

__all__ = ["DualUpdate", "GDDSettings", "LineSearch"]


class DualUpdate(enum.Enum):
    """Augmented-Lagrangian multiplier update."""

    NEWTON = "newton"
    """Second order: ``ν += (C H⁻¹ Cᵀ)⁻¹ t`` — in the current piece the next inner
    solve then lands on the constraints (falls back to first order if singular).
    The first step of a solve uses ``ν += (C H⁻¹ Cᵀ)⁻¹ (t − C H⁻¹ ∇L)`` together
    with the Gauss-Newton step (a KKT step of the current piece)."""
    FIRST_ORDER = "first_order"
    """The classical ``λ += ρ h``, ``μ± = max(0, μ± + ρ t±)``."""


class LineSearch(enum.Enum):
    """Line-search method."""

    AUTO = "auto"
    """Exact piecewise-quadratic sweep with pyramidal cones, 1-D search with elliptic ones."""
    EXACT = "exact"
    """Force the breakpoint sweep (falls back to 1-D search if elliptic cones are present)."""
    NEWTON_1D = "newton1d"
    """Safeguarded 1-D Newton/bisection on the directional derivative (any cone)."""


@dataclass(frozen=True)
class GDDSettings:
    """Settings of :class:`GDDSolver` (validated on construction).

    Attributes:
      max_iterations: Gauss-Newton iterations per solve, all multiplier updates included (≥ 1).
      max_dual_updates: augmented-Lagrangian multiplier updates per solve (≥ 0).
      penalty: dimensionless penalty ρ; the penalty of constraint row k is
        ``ρ · n_kᵀ M⁻¹ n_k`` (n_k its generalized-force direction), so ρ is relative
        to the ``M⁻¹``-weighted force regularizer (> 0).  Larger values need fewer
        multiplier updates but amplify roundoff in the gradient (≈ ρ·ε·‖g‖·‖P‖).
      tol_gradient: stop the inner iterations when ``‖∇L‖₂ ≤ tol_gradient · max(1, ‖c‖₂, ‖g(a₀)‖₂)``
        (∇L is a generalized force in N; ``c`` is gravity + bias force, ``g(a₀)`` the force at
        the initial guess) (> 0).
      tol_feasibility: constraint violation accepted, in acceleration units
        ``‖M⁻¹ n_k‖ · |violation_k|`` (m/s²) (> 0).
      line_search: :class:`LineSearch`.
      dual_update: :class:`DualUpdate`.
      warm_start: start from the previous solution and multipliers of this solver.
      safeguard: guard against roundoff blow-ups: an initial guess that is not finite or
        absurdly large (beyond ``1e4`` times the state's acceleration scale — the free
        acceleration ``M⁻¹(−c)``, the constraint reference accelerations and the cost's
        targets) is replaced by the free acceleration, and a non-finite or huge step
        (beyond ``1e6`` times that scale) or a failed solve restarts once from the free
        acceleration with fresh multipliers; if that fails too the status is
        :attr:`GDDStatus.NUMERICAL_ERROR` (never applied).  ``GDDResult.safeguards`` counts it.
    """

    max_iterations: int = 50
    max_dual_updates: int = 10
    penalty: float = 100.0
    tol_gradient: float = 1e-10
    tol_feasibility: float = 1e-10
    line_search: LineSearch = LineSearch.AUTO
    dual_update: "DualUpdate" = None
    warm_start: bool = True
    safeguard: bool = True

    def __post_init__(self):
        if not (isinstance(self.max_iterations, (int, np.integer)) and self.max_iterations >= 1):
            raise ParameterError(f"max_iterations must be an integer >= 1, got {self.max_iterations!r}")
        if not (isinstance(self.max_dual_updates, (int, np.integer)) and self.max_dual_updates >= 0):
            raise ParameterError(f"max_dual_updates must be an integer >= 0, got {self.max_dual_updates!r}")
        check_positive("penalty", self.penalty)
        check_positive("tol_gradient", self.tol_gradient)
        check_positive("tol_feasibility", self.tol_feasibility)
        for name, enum_cls, default in (("line_search", LineSearch, LineSearch.AUTO),
                                        ("dual_update", DualUpdate, DualUpdate.NEWTON)):
            value = getattr(self, name)
            if value is None:
                value = default
            if not isinstance(value, enum_cls):
                try:
                    value = enum_cls(value)
                except ValueError:
                    raise ParameterError(
                        f"{name} must be one of {[m.value for m in enum_cls]}, got {value!r}"
                    ) from None
            object.__setattr__(self, name, value)
