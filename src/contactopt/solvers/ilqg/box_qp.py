"""Box-constrained QP of the iLQG backward pass: :func:`solve_box_qp` (projected Newton,
Tassa, Erez & Todorov 2012, Alg. 1), :class:`BoxQPResult` and :class:`BoxQPStatus`; the
Cholesky helpers shared with the Python reference of the backward pass."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from scipy.linalg import lapack

__all__ = ["BoxQPResult", "BoxQPStatus", "solve_box_qp"]


# =========================================================================== box QP


class BoxQPStatus(enum.Enum):
    """Outcome of :func:`solve_box_qp`."""

    SMALL_GRADIENT = "small_gradient"        #: projected gradient below tolerance (converged)
    SMALL_IMPROVEMENT = "small_improvement"  #: relative improvement below tolerance (converged)
    ALL_CLAMPED = "all_clamped"              #: every variable at a bound pushing outward (converged)
    MAX_ITERATIONS = "max_iterations"
    NO_DESCENT = "no_descent"                #: line search found no decrease (numerical limit)
    NOT_POSITIVE_DEFINITE = "not_positive_definite"  #: free block of H not PD

    @property
    def ok(self) -> bool:
        """True unless the free block of H was not positive definite."""
        return self is not BoxQPStatus.NOT_POSITIVE_DEFINITE


@dataclass(frozen=True)
class BoxQPResult:
    """Solution of ``min ½ xᵀHx + gᵀx  s.t. lower ≤ x ≤ upper``.

    Attributes:
      x: ``(n,)`` minimizer (the start point if ``status`` is NOT_POSITIVE_DEFINITE).
      free: ``(n,)`` bool, variables not held at a bound by the gradient.
      chol: lower Cholesky factor of ``H[free][:, free]`` (None if no free variable or failure).
      status: :class:`BoxQPStatus`.
      iterations: projected-Newton iterations.
      value: objective at ``x``.
    """

    x: np.ndarray
    free: np.ndarray
    chol: np.ndarray | None
    status: BoxQPStatus
    iterations: int
    value: float


def _cholesky(M: np.ndarray):
    """Lower Cholesky factor or None if ``M`` is not (numerically) positive definite."""
    c, info = lapack.dpotrf(M, lower=1, clean=1)
    return c if info == 0 else None


def _chol_solve(L: np.ndarray, b: np.ndarray) -> np.ndarray:
    x, info = lapack.dpotrs(L, b, lower=1)
    if info != 0:  # pragma: no cover - only on invalid arguments
        raise RuntimeError(f"dpotrs failed with info={info}")
    return x


def solve_box_qp(H, g, lower, upper, x0=None, *, max_iterations: int = 100,
                 min_gradient: float = 1e-8, min_relative_improvement: float = 1e-8,
                 step_decrease: float = 0.6, min_step: float = 1e-22, armijo: float = 0.1) -> BoxQPResult:
    """Minimize ``½ xᵀHx + gᵀx`` subject to ``lower ≤ x ≤ upper`` by projected Newton.

    The method of Bertsekas (1982) as used for control-limited DDP (Tassa, Mansard &
    Todorov 2014): at each iteration variables at a bound whose gradient pushes
    outward are *clamped*; a Newton step is taken on the *free* variables (Cholesky of
    ``H_ff`` only), projected onto the box, with an Armijo backtracking line search.

    Args:
      H: ``(n, n)`` symmetric; its free block must be positive definite.
      g: ``(n,)`` linear term.
      lower, upper: ``(n,)`` bounds (±inf allowed), ``lower ≤ upper``.
      x0: ``(n,)`` warm start (projected onto the box; default 0 projected).
      max_iterations, min_gradient, min_relative_improvement: stopping rules.
      step_decrease, min_step, armijo: projected line-search parameters.

    Returns:
      :class:`BoxQPResult`.  The free set and its Cholesky factor refer to the final
      ``x``, so feedback gains can be formed as ``K_f = −H_ff⁻¹ Q_ux,f``.
    """
    H = np.asarray(H, dtype=float)
    g = np.asarray(g, dtype=float)
    lower = np.asarray(lower, dtype=float)
    upper = np.asarray(upper, dtype=float)
    n = g.size
    x = np.zeros(n) if x0 is None else np.array(x0, dtype=float)
    np.clip(x, lower, upper, out=x)
    value = float(x @ g + 0.5 * x @ H @ x)
    status = BoxQPStatus.MAX_ITERATIONS
    factored_free = None
    L = None
    it = 0
    for it in range(1, max_iterations + 1):
        grad = g + H @ x
        clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))
        free = ~clamped
        if not free.any():
            status = BoxQPStatus.ALL_CLAMPED
            break
        if factored_free is None or np.any(free != factored_free):
            L = _cholesky(H[np.ix_(free, free)])
            if L is None:
                return BoxQPResult(x, free, None, BoxQPStatus.NOT_POSITIVE_DEFINITE, it, value)
            factored_free = free
        if np.linalg.norm(grad[free]) < min_gradient:
            status = BoxQPStatus.SMALL_GRADIENT
            break
        # Newton step on the free variables with the clamped ones held fixed
        grad_held = g[free] + H[np.ix_(free, clamped)] @ x[clamped]
        search = np.zeros(n)
        search[free] = -_chol_solve(L, grad_held) - x[free]
        sdotg = float(search @ grad)
        if not sdotg < 0:
            status = BoxQPStatus.SMALL_GRADIENT if abs(sdotg) < min_gradient ** 2 else BoxQPStatus.NO_DESCENT
            break
        step = 1.0
        while True:
            xc = np.clip(x + step * search, lower, upper)
            vc = float(xc @ g + 0.5 * xc @ H @ xc)
            if (vc - value) / (step * sdotg) >= armijo:
                break
            step *= step_decrease
            if step < min_step:
                status = BoxQPStatus.NO_DESCENT
                break
        if status is BoxQPStatus.NO_DESCENT:
            break
        improvement = value - vc
        x, value = xc, vc
        if improvement < min_relative_improvement * abs(value):
            status = BoxQPStatus.SMALL_IMPROVEMENT
            break
    # free set and factor at the final point (used for the feedback gains)
    grad = g + H @ x
    free = ~(((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0)))
    if not free.any():
        return BoxQPResult(x, free, None, status, it, value)
    if factored_free is None or np.any(free != factored_free):
        L = _cholesky(H[np.ix_(free, free)])
        if L is None:
            return BoxQPResult(x, free, None, BoxQPStatus.NOT_POSITIVE_DEFINITE, it, value)
    return BoxQPResult(x, free, L, status, it, value)
