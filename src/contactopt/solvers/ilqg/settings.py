"""Settings of :class:`~contactopt.solvers.ilqg.solver.ILQG`: :class:`ILQGSettings`, the
:class:`Regularization` and :class:`ValueUpdate` choices, and the quadratic μ schedule
(:func:`increase_regularization`, :func:`decrease_regularization`; Tassa, Erez & Todorov 2012,
Sec. II-F)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from ...errors import ParameterError

__all__ = [
    "ILQGSettings",
    "Regularization",
    "ValueUpdate",
    "decrease_regularization",
    "increase_regularization",
]


# =========================================================================== enums / settings


class Regularization(enum.Enum):
    """Where the Levenberg-Marquardt parameter μ enters the backward pass."""

    STATE = "state"        #: eq. 10: ``μ I`` added to ``V'_xx`` (penalizes state deviations)
    CONTROL = "control"    #: eq. 9: ``μ I`` added to ``Q_uu`` (textbook)


class ValueUpdate(enum.Enum):
    """Which formulas propagate the value function."""

    IMPROVED = "improved"  #: eq. 11 (no cancellation of the regularized ``Q̃_uu``)
    STANDARD = "standard"  #: eq. 7 (textbook)


def _enum(cls, value, name):
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in cls)
        raise ParameterError(f"{name} must be one of {choices}, got {value!r}") from None


_DEFAULT_ALPHAS = tuple(float(a) for a in 10.0 ** np.linspace(0.0, -3.0, 11))


@dataclass(frozen=True)
class ILQGSettings:
    """Algorithm parameters of :class:`ILQG` (validated on construction).

    Attributes:
      max_iterations: iteration budget (≥ 1).  An MPC step typically uses 1–3.
      tol_cost: converged when an accepted full step (the first α) reduces the cost by
        less than ``tol_cost · |J|`` (relative), or when the predicted reduction of the
        full step ``−ΔJ(1)`` is below that (with ``μ ≤ mu_converged``).
      tol_grad: converged when ``mean_i max_j |k_ij| / (|u_ij| + 1) < tol_grad`` and
        ``μ ≤ mu_converged`` (the feedforward step has become negligible).
      regularization: :class:`Regularization` (``STATE`` = eq. 10, the default).
      value_update: :class:`ValueUpdate` (``IMPROVED`` = eq. 11, the default).
      mu_init: initial μ (≥ 0; 0 gives the exact Newton-like step when it is safe).
      mu_min: μ_min of the schedule (seed: 1e-6).
      mu_max: μ above which the solve gives up (status ``*_FAILED``).
      mu_converged: largest μ at which the gradient test may declare convergence.
      delta0: Δ₀ of the schedule (> 1; seed: 2).
      c1: acceptance threshold ``0 < c₁ < 1`` of the ratio z (eq. 13).
      line_search_steps: the α values tried in order (each in (0, 1], decreasing);
        default ``10^linspace(0, −3, 11)``.
      time_limit: wall-clock budget in seconds per solve (None = unlimited); checked
        at the start of every iteration.
      box_qp_max_iterations: projected-Newton iterations of the control-limit QP.
    """

    max_iterations: int = 100
    tol_cost: float = 1e-7
    tol_grad: float = 1e-4
    regularization: Regularization = Regularization.STATE
    value_update: ValueUpdate = ValueUpdate.IMPROVED
    mu_init: float = 0.0
    mu_min: float = 1e-6
    mu_max: float = 1e10
    mu_converged: float = 1e-5
    delta0: float = 2.0
    c1: float = 1e-4
    line_search_steps: tuple = _DEFAULT_ALPHAS
    time_limit: float | None = None
    box_qp_max_iterations: int = 100

    def __post_init__(self):
        def pos_int(name):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ParameterError(f"ILQGSettings.{name} must be an integer >= 1, got {v!r}")
            object.__setattr__(self, name, int(v))

        def num(name, lo=None, lo_strict=False, hi=None):
            v = getattr(self, name)
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise ParameterError(f"ILQGSettings.{name} must be a number, got {v!r}") from None
            if not math.isfinite(f):
                raise ParameterError(f"ILQGSettings.{name} must be finite, got {v!r}")
            if lo is not None and (f < lo or (lo_strict and f == lo)):
                rel = ">" if lo_strict else ">="
                raise ParameterError(f"ILQGSettings.{name} must be {rel} {lo}, got {v!r}")
            if hi is not None and f >= hi:
                raise ParameterError(f"ILQGSettings.{name} must be < {hi}, got {v!r}")
            object.__setattr__(self, name, f)

        pos_int("max_iterations")
        pos_int("box_qp_max_iterations")
        num("tol_cost", 0.0)
        num("tol_grad", 0.0)
        num("mu_init", 0.0)
        num("mu_min", 0.0, lo_strict=True)
        num("mu_max", 0.0, lo_strict=True)
        num("mu_converged", 0.0)
        num("delta0", 1.0, lo_strict=True)
        num("c1", 0.0, lo_strict=True, hi=1.0)
        if self.mu_max <= self.mu_min:
            raise ParameterError(f"ILQGSettings.mu_max ({self.mu_max}) must exceed mu_min ({self.mu_min})")
        object.__setattr__(self, "regularization",
                           _enum(Regularization, self.regularization, "ILQGSettings.regularization"))
        object.__setattr__(self, "value_update",
                           _enum(ValueUpdate, self.value_update, "ILQGSettings.value_update"))
        try:
            alphas = tuple(float(a) for a in self.line_search_steps)
        except (TypeError, ValueError):
            raise ParameterError(
                f"ILQGSettings.line_search_steps must be a sequence of numbers, got {self.line_search_steps!r}"
            ) from None
        if not alphas or any(not (0.0 < a <= 1.0) for a in alphas) \
                or any(b >= a for a, b in zip(alphas, alphas[1:])):
            raise ParameterError(
                "ILQGSettings.line_search_steps must be non-empty, strictly decreasing, in (0, 1]; "
                f"got {self.line_search_steps!r}")
        object.__setattr__(self, "line_search_steps", alphas)
        if self.time_limit is not None:
            num("time_limit", 0.0, lo_strict=True)

    @classmethod
    def textbook(cls, **overrides) -> "ILQGSettings":
        """Settings of the textbook iLQG: ``Q_uu + μI`` and the standard value update (eq. 7, 9)."""
        overrides.setdefault("regularization", Regularization.CONTROL)
        overrides.setdefault("value_update", ValueUpdate.STANDARD)
        return cls(**overrides)


def increase_regularization(mu: float, delta: float, settings: ILQGSettings) -> tuple[float, float]:
    """Quadratic schedule, increase (Sec. II-F): ``Δ ← max(Δ₀, Δ·Δ₀)``, ``μ ← max(μ_min, μ·Δ)``.

    Returns the new ``(μ, Δ)``.
    """
    delta = max(settings.delta0, delta * settings.delta0)
    mu = max(settings.mu_min, mu * delta)
    return mu, delta


def decrease_regularization(mu: float, delta: float, settings: ILQGSettings) -> tuple[float, float]:
    """Quadratic schedule, decrease (Sec. II-F): ``Δ ← min(1/Δ₀, Δ/Δ₀)``, ``μ ← μ·Δ`` if that
    exceeds ``μ_min``, else 0.  Returns the new ``(μ, Δ)``.

    Δ is floored at 1e-12: an MPC loop decreases it at every update, and a thousand
    halvings would underflow it to 0 (after which ``μ`` could never grow again).
    """
    delta = max(min(1.0 / settings.delta0, delta / settings.delta0), 1e-12)
    mu = mu * delta if mu * delta > settings.mu_min else 0.0
    return mu, delta
