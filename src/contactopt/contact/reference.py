"""Exact conic reference for the convex contact model: problem 13 solved by Clarabel.

The forward contact impulse of Todorov (2011) is the fixed-κ barrier minimizer of

    minimize_f   ½ fᵀ(A + R) f + fᵀ c                                   (13 with eq. 15)
    subject to   μ_i f_{i,n} ≥ ‖(f_{i,t1}, f_{i,t2})‖    per contact      (9)
                 f_l ≥ 0 per limit,  f_{i,n} ≥ 0 per contact             (10)
                 N (A f + c) ≥ v_min                                       (11)

This module hands the same problem, without barriers, to the interior-point conic
solver Clarabel (``pip install clarabel``; a test/benchmark dependency, not a runtime
one).  As κ → 0 the convex model's forward solution converges to this one, which is
the formulation check of the test suite, and ``bench contact`` times it as the
solver a user would otherwise reach for.

Clarabel's form is ``min ½xᵀPx + qᵀx  s.t.  Gx + s = b, s ∈ K``:

* velocity rows (nonnegative cone): ``−N A f + s = N c − v_min``;
* limit rows (nonnegative cone): ``−f_l + s = 0``;
* each contact with μ > 0 (second-order cone of size 3): ``s = (μ f_n, f_t1, f_t2)``;
  a frictionless contact: ``f_t = 0`` (zero cone) and ``f_n ≥ 0`` (nonnegative cone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import ContactoptError

__all__ = ["ReferenceSolution", "solve_forward_exact", "clarabel_available"]


def clarabel_available() -> bool:
    """Whether the optional ``clarabel`` package can be imported."""
    try:
        import clarabel  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class ReferenceSolution:
    """Clarabel's answer: ``f (n,)``, ``v = A f + c (n,)``, its status string and iterations."""

    f: np.ndarray
    v: np.ndarray
    status: str
    iterations: int

    @property
    def solved(self) -> bool:
        return self.status == "Solved"


def solve_forward_exact(A, c, *, friction, v_min, R, n_limits: int = 0, tol: float = 1e-9,
                        settings=None) -> ReferenceSolution:
    """Solve problem 13 (with the regularizer R) exactly with Clarabel.

    Args:
      A: ``(n, n)`` symmetric PSD; c: ``(n,)``; friction: ``(n_c,)``; v_min: ``(n_l + n_c,)``;
      R: ``(n,)`` positive diagonal; n_limits: n_l (rows first).
      tol: Clarabel's absolute and relative gap and feasibility tolerances.
      settings: an optional ``clarabel.DefaultSettings`` (overrides ``tol``).

    Raises:
      ContactoptError: clarabel is not installed.
    """
    try:
        import clarabel
    except ImportError:
        raise ContactoptError("the exact reference needs the optional package clarabel "
                              "(pip install clarabel, or pip install -e '.[test]')") from None
    A = np.asarray(A, dtype=float)
    c = np.asarray(c, dtype=float)
    mu = np.asarray(friction, dtype=float)
    vmin = np.asarray(v_min, dtype=float)
    n = A.shape[0]
    nl = int(n_limits)
    nc = (n - nl) // 3
    normal = np.concatenate([np.arange(nl), nl + 3 * np.arange(nc) + 2]).astype(int)
    P = sp.csc_matrix(np.triu(A + np.diag(np.asarray(R, dtype=float))))

    blocks, rhs, cones = [], [], []
    # (11) velocity: -N A f + s = N c - v_min, s >= 0
    blocks.append(-A[normal])
    rhs.append(c[normal] - vmin)
    nonneg = len(normal)
    # (10) limits: -f_l + s = 0
    if nl:
        G = np.zeros((nl, n))
        G[np.arange(nl), np.arange(nl)] = -1.0
        blocks.append(G)
        rhs.append(np.zeros(nl))
        nonneg += nl
    cones.append(clarabel.NonnegativeConeT(nonneg))
    frictionless = np.flatnonzero(mu <= 0.0)
    if frictionless.size:  # tangents zero, normal nonnegative
        G = np.zeros((2 * frictionless.size, n))
        for r, k in enumerate(frictionless):
            G[2 * r, nl + 3 * k] = -1.0
            G[2 * r + 1, nl + 3 * k + 1] = -1.0
        blocks.append(G)
        rhs.append(np.zeros(2 * frictionless.size))
        cones.append(clarabel.ZeroConeT(2 * frictionless.size))
        G = np.zeros((frictionless.size, n))
        for r, k in enumerate(frictionless):
            G[r, nl + 3 * k + 2] = -1.0
        blocks.append(G)
        rhs.append(np.zeros(frictionless.size))
        cones.append(clarabel.NonnegativeConeT(frictionless.size))
    for k in np.flatnonzero(mu > 0.0):  # (9) s = (mu f_n, f_t1, f_t2) in the SOC
        o = nl + 3 * k
        G = np.zeros((3, n))
        G[0, o + 2] = -mu[k]
        G[1, o] = -1.0
        G[2, o + 1] = -1.0
        blocks.append(G)
        rhs.append(np.zeros(3))
        cones.append(clarabel.SecondOrderConeT(3))
    G = sp.csc_matrix(np.vstack(blocks))
    b = np.concatenate(rhs)
    if settings is None:
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        settings.tol_gap_abs = settings.tol_gap_rel = tol
        settings.tol_feas = tol
    solver = clarabel.DefaultSolver(P, c, G, b, cones, settings)
    sol = solver.solve()
    f = np.asarray(sol.x, dtype=float)
    return ReferenceSolution(f, A @ f + c, str(sol.status), int(sol.iterations))
