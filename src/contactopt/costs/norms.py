"""Norms ``n(r) ≥ 0`` of a residual, with gradients, Hessians and least-squares forms."""

from __future__ import annotations

import abc
import functools

import numpy as np

from ..errors import ParameterError, check_positive

__all__ = [
    "L2",
    "Cosh",
    "Norm",
    "OneSidedQuadratic",
    "Quadratic",
    "SmoothAbs",
]


# =========================================================================== norms


class Norm(abc.ABC):
    """A scalar function ``n(r) ≥ 0`` of a residual vector with ``n(0) = 0``.

    All methods accept ``r`` of shape ``(..., m)`` and act on the last axis.
    """

    #: True when the Hessian is diagonal (then :meth:`hessian_diagonal` is exact).
    diagonal_hessian: bool = True

    @abc.abstractmethod
    def value(self, r: np.ndarray) -> np.ndarray:
        """``n(r)``, shape ``(...)``."""

    @abc.abstractmethod
    def gradient(self, r: np.ndarray) -> np.ndarray:
        """``∂n/∂r``, shape ``(..., m)``."""

    def hessian_diagonal(self, r: np.ndarray) -> np.ndarray:
        """Diagonal of ``∂²n/∂r²``, shape ``(..., m)`` (only exact if :attr:`diagonal_hessian`)."""
        return np.diagonal(self.hessian(r), axis1=-2, axis2=-1).copy()

    def hessian(self, r: np.ndarray) -> np.ndarray:
        """``∂²n/∂r²``, shape ``(..., m, m)``."""
        d = self.hessian_diagonal(r)
        out = np.zeros(d.shape + (d.shape[-1],))
        idx = np.arange(d.shape[-1])
        out[..., idx, idx] = d
        return out

    def least_squares(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The norm as a sum of squares, for Gauss-Newton solvers that minimize ``½‖ρ‖²``.

        Returns ``(ρ (..., m), ∂ρ/∂r (..., m, m))`` with ``½ ρᵀρ = n(r)`` and
        ``(∂ρ/∂r)ᵀ ρ = ∂n/∂r`` exactly; ``(∂ρ/∂r)ᵀ(∂ρ/∂r)`` is the Gauss-Newton curvature
        (equal to ``∂²n/∂r²`` for :class:`Quadratic`, and at ``r = 0`` for every built-in norm).
        A norm that has no such form raises :class:`~contactopt.errors.ParameterError`.
        """
        raise ParameterError(f"norm {type(self).__name__} has no least-squares form; implement "
                             "least_squares(r) -> (rho, drho_dr) to use it with a least-squares planner")

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


def _diagonal_jacobian(d: np.ndarray) -> np.ndarray:
    """``(..., m) → (..., m, m)`` diagonal matrices."""
    out = np.zeros(d.shape + (d.shape[-1],))
    idx = np.arange(d.shape[-1])
    out[..., idx, idx] = d
    return out


def _overflow_to_inf(method):
    """``method(self, r)`` with numpy's overflow warning silenced: a value that overflows is ``inf``."""

    @functools.wraps(method)
    def wrapped(self, r):
        with np.errstate(over="ignore"):
            return method(self, r)

    return wrapped


class Quadratic(Norm):
    """``n(r) = ½ rᵀr``; gradient ``r``; Hessian ``I``; least-squares form ``ρ = r``."""

    def least_squares(self, r):
        r = np.asarray(r, dtype=float)
        return r.copy(), _diagonal_jacobian(np.ones_like(r))

    def value(self, r):
        r = np.asarray(r, dtype=float)
        return 0.5 * np.einsum("...i,...i->...", r, r)

    def gradient(self, r):
        return np.array(r, dtype=float, copy=True)

    def hessian_diagonal(self, r):
        return np.ones(np.shape(r))


class SmoothAbs(Norm):
    """Smooth absolute value, summed over components: ``n(r) = Σ_j √(r_j² + α²) − α``.

    Quadratic (curvature ``1/α``) within ``|r_j| ≲ α`` and linear with slope 1
    beyond, so a weight keeps the units of the residual (seed paper, Sec. IV-A).
    Gradient ``r_j / s_j``, Hessian ``diag(α² / s_j³)`` with ``s_j = √(r_j² + α²)``.

    Args:
      alpha: smoothing length ``α > 0`` in the residual's units.
    """

    def __init__(self, alpha: float = 0.1):
        self.alpha = check_positive("alpha", alpha)

    def value(self, r):
        r = np.asarray(r, dtype=float)
        a = self.alpha
        return np.sum(np.sqrt(r * r + a * a) - a, axis=-1)

    def gradient(self, r):
        r = np.asarray(r, dtype=float)
        return r / np.sqrt(r * r + self.alpha ** 2)

    def hessian_diagonal(self, r):
        r = np.asarray(r, dtype=float)
        a2 = self.alpha ** 2
        s = np.sqrt(r * r + a2)
        return a2 / (s * s * s)

    def least_squares(self, r):
        """``ρ_j = r_j √(2/(s_j + α))`` (so ``½ρ_j² = s_j − α``), ``∂ρ_j/∂r_j = √((s_j + α)/2)/s_j``."""
        r = np.asarray(r, dtype=float)
        a = self.alpha
        s = np.sqrt(r * r + a * a)
        return r * np.sqrt(2.0 / (s + a)), _diagonal_jacobian(np.sqrt(0.5 * (s + a)) / s)


class Cosh(Norm):
    """Control-limiting cost, summed over components: ``n(r) = Σ_j α² (cosh(r_j/α) − 1)``.

    Curvature 1 at the origin (like ``½ r²``) and exponential growth beyond
    ``|r_j| ≈ α`` (seed paper, Sec. IV-A, Fig. 3).  Gradient ``α sinh(r_j/α)``,
    Hessian ``diag(cosh(r_j/α))``.  Overflows to ``inf`` for ``|r/α| ≳ 710``.

    Args:
      alpha: soft limit ``α > 0`` in the residual's units.
    """

    def __init__(self, alpha: float = 1.0):
        self.alpha = check_positive("alpha", alpha)

    @_overflow_to_inf
    def value(self, r):
        r = np.asarray(r, dtype=float)
        a = self.alpha
        return np.sum(a * a * (np.cosh(r / a) - 1.0), axis=-1)

    @_overflow_to_inf
    def gradient(self, r):
        r = np.asarray(r, dtype=float)
        a = self.alpha
        return a * np.sinh(r / a)

    @_overflow_to_inf
    def hessian_diagonal(self, r):
        r = np.asarray(r, dtype=float)
        return np.cosh(r / self.alpha)

    @_overflow_to_inf
    def least_squares(self, r):
        """``ρ_j = 2α sinh(r_j/2α)`` (so ``½ρ_j² = α²(cosh(r_j/α) − 1)``), ``∂ρ_j/∂r_j = cosh(r_j/2α)``."""
        r = np.asarray(r, dtype=float)
        a = self.alpha
        return 2.0 * a * np.sinh(r / (2.0 * a)), _diagonal_jacobian(np.cosh(r / (2.0 * a)))


class L2(Norm):
    """Smooth Euclidean norm: ``n(r) = √(rᵀr + p²) − p``.

    Quadratic (curvature ``1/p``) within ``‖r‖ ≲ p``, linear in the distance
    beyond.  With ``s = √(rᵀr + p²)``: gradient ``r/s``, Hessian
    ``I/s − r rᵀ/s³`` (positive definite: eigenvalues ``1/s`` and ``p²/s³``).

    Args:
      p: smoothing length ``p > 0`` in the residual's units.
    """

    diagonal_hessian = False

    def __init__(self, p: float = 0.1):
        self.p = check_positive("p", p)

    def _s(self, r):
        return np.sqrt(np.einsum("...i,...i->...", r, r) + self.p ** 2)

    def value(self, r):
        r = np.asarray(r, dtype=float)
        return self._s(r) - self.p

    def gradient(self, r):
        r = np.asarray(r, dtype=float)
        return r / self._s(r)[..., None]

    def hessian(self, r):
        r = np.asarray(r, dtype=float)
        s = self._s(r)[..., None, None]
        eye = np.eye(r.shape[-1])
        return eye / s - r[..., :, None] * r[..., None, :] / s ** 3

    def hessian_diagonal(self, r):
        r = np.asarray(r, dtype=float)
        s = self._s(r)[..., None]
        return 1.0 / s - r * r / s ** 3

    def least_squares(self, r):
        """``ρ = c r`` with ``c = √(2/(s + p))`` (so ``½‖ρ‖² = s − p``) and
        ``∂ρ/∂r = c I − c r rᵀ / (2 s (s + p))``."""
        r = np.asarray(r, dtype=float)
        p = self.p
        s = self._s(r)[..., None]
        c = np.sqrt(2.0 / (s + p))
        eye = np.eye(r.shape[-1])
        J = c[..., None] * eye - (c / (2.0 * s * (s + p)))[..., None] * r[..., :, None] * r[..., None, :]
        return c * r, J


class OneSidedQuadratic(Norm):
    """Soft bound, summed over components: ``n(r) = ½ Σ_j min(r_j, 0)²`` (``upper=False``:
    penalizes ``r < 0``) or ``n(r) = ½ Σ_j max(r_j, 0)²`` (``upper=True``: penalizes ``r > 0``).

    Zero on the allowed side and quadratic beyond, so with a large weight it keeps a
    residual ``r = z − z_min`` (``upper=False``) or ``r = z − z_max`` (``upper=True``) on its
    side without pulling it anywhere inside.  Gradient ``min(r_j, 0)`` (``max(r_j, 0)``),
    Gauss-Newton Hessian ``diag(1 where the bound is violated, else 0)``.  Not a norm in
    the strict sense (zero on a half-space); convex and once continuously differentiable.

    Args:
      upper: which side is penalized: False (default) ``r < 0``, True ``r > 0``.
    """

    def __init__(self, upper: bool = False):
        if not isinstance(upper, (bool, np.bool_)):
            raise ParameterError(f"upper must be True or False, got {upper!r}")
        self.upper = bool(upper)

    def _violation(self, r):
        r = np.asarray(r, dtype=float)
        return np.maximum(r, 0.0) if self.upper else np.minimum(r, 0.0)

    def value(self, r):
        v = self._violation(r)
        return 0.5 * np.einsum("...i,...i->...", v, v)

    def gradient(self, r):
        return self._violation(r)

    def hessian_diagonal(self, r):
        r = np.asarray(r, dtype=float)
        return ((r > 0.0) if self.upper else (r < 0.0)).astype(float)

    def least_squares(self, r):
        """``ρ = min(r, 0)`` (``max(r, 0)`` with ``upper``), ``∂ρ/∂r = diag(1 where violated)``."""
        return self._violation(r), _diagonal_jacobian(self.hessian_diagonal(r))
