"""Trust-region Gauss–Newton solver for :class:`~contactopt.solvers.idto.problem.IDTOProblem`.

Per iteration (penalty treatment of underactuation):

1. linearize: residual ``r`` and block Jacobian ``J`` (finite differences over
   the three neighbouring configurations of each ``τ_t``);
2. Gauss–Newton ``H = JᵀJ``, ``g = Jᵀr`` assembled directly into
   block-pentadiagonal storage ``Hb[k, d] = H_{k, k+d}`` (``d = 0, 1, 2``,
   blocks ``nv × nv``), never a dense ``(T·nv)²`` matrix;
3. diagonal scaling ``D_ii = min(1, H_ii^(−1/4))`` (or ``^(−1/2)``),
   ``H̃ = DHD``, ``g̃ = Dg``;
4. banded Cholesky of ``H̃`` (``scipy.linalg.cholesky_banded``, upper bandwidth
   ``3nv − 1``; cost ``O(T·nv³)``) for the Gauss–Newton point ``p_H = −H̃⁻¹g̃``;
5. dogleg between the Cauchy point ``p_U = −(g̃ᵀg̃/g̃ᵀH̃g̃) g̃`` and ``p_H`` at
   radius ``Δ``; ``Δq = D p``; ``q_t ← q_t ⊕ Δq_t``;
6. ratio ``ρ = (L(q) − L(q ⊕ Δq)) / (−g̃ᵀp − ½pᵀH̃p)``; accept if ``ρ > 0``;
   ``Δ ← Δ/4`` if ``ρ < 0.25``; ``Δ ← min(2Δ, Δ_max)`` if ``ρ > 0.75`` and the
   step reached the boundary.

Equality-constrained treatment of underactuation (``IDTOSettings(underactuation="constrained")``):
the unactuated forces ``h(q) = [Zᵀτ_0; …; Zᵀτ_{T−1}] = 0`` are equality
constraints (the penalty rows are dropped from the cost; the problem's optional
actuator-limit rows stay), with the block-banded
Jacobian ``A = ∂h/∂q`` (``Zᵀ ∂τ_t/∂(q_{t−1}, q_t, q_{t+1})``).  In scaled variables
(``Ã = A D``) the multipliers are

    λ = (Ã H̃⁻¹ Ãᵀ)⁻¹ (h − Ã H̃⁻¹ g̃),

computed with the banded Cholesky of ``H̃`` (``T·nz`` right-hand sides) and a
dense ``(T·nz)²`` Cholesky of the multiplier system (``nz`` = unactuated
directions; never a ``(T·nv)²`` factorization) — ``IDTOSettings(multipliers="schur")``, cubic
in ``T`` — or, by default (``"banded"``), from the KKT system below with each knot's unknowns
interleaved, a banded LU linear in ``T``.  The dogleg then runs on
``g̃_λ = g̃ + Ãᵀλ``: ``p_H = −H̃⁻¹ g̃_λ`` is the KKT step of
``[H̃ Ãᵀ; Ã 0][p; λ] = [−g̃; −h]`` (it satisfies ``Ã p = −h``), the Cauchy point
is taken along ``−g̃_λ``, and steps are judged on the merit ``φ = L + λᵀh(q)``
with ``λ`` held fixed (predicted reduction ``−g̃_λᵀp − ½pᵀH̃p``).  In this mode the
convergence tests also require ``max|h| ≤ constraint_tol``.  With
``IDTOSettings(constrained_step="l1")`` a ``p_H`` longer than ``Δ`` is scaled back to the
radius instead of taking the dogleg, so truncated steps stay on the linearized constraints, and
steps are judged on the exact-penalty merit ``L + μ‖h‖₁`` (``μ = 2‖λ‖∞``).

Trust radius: ``IDTOSettings(initial_radius=None)`` scales ``Δ_0`` to the problem, as a fraction
``auto_radius_scale`` of the first iteration's scaled Gauss–Newton step ``‖p_H‖``.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from ...errors import ParameterError, check_instance, check_positive
from ...native.blas import single_threaded_blas
from ...native.lapack import banded_lu_solve, banded_transposed_solve
from .problem import IDTOProblem, Linearization

__all__ = [
    "IDTOStatus",
    "IDTOSettings",
    "ConvergenceCriteria",
    "IDTOIterationLog",
    "IDTOResult",
    "BandedHessian",
    "IDTOSolver",
    "gauss_newton_system",
]

#: the timing keys shared by the three solvers' ``result.timing()`` (and the MPC planners' breakdowns)
_DERIVATIVES = ("residual", "jacobian")
_SOLVE = ("assemble", "factor")
_LINE_SEARCH = ("trial",)


class IDTOStatus(enum.Enum):
    """Why :meth:`IDTOSolver.solve` stopped."""

    CONVERGED = "converged"
    MAX_ITERATIONS = "max_iterations"
    TRUST_REGION_COLLAPSED = "trust_region_collapsed"
    FACTORIZATION_FAILED = "factorization_failed"
    #: the cost or Gauss–Newton system at the current iterate overflowed (e.g. a guess whose
    #: inverse dynamics need absurd forces): no step can be computed from it
    NON_FINITE = "non_finite"


@dataclass(frozen=True)
class ConvergenceCriteria:
    """Optional stopping tests, checked after each accepted step (any one suffices).

    With ``ε = abs_tol + rel_tol · L`` (cost) or ``abs_tol + rel_tol·‖q‖``:
    ``cost``: ``|ΔL| < ε``; ``gradient``: ``|gᵀΔq| < ε``; ``step``: ``‖Δq‖ < abs_tol + rel_tol‖q‖``.
    """

    abs_tol: float = 1e-12
    rel_tol: float = 1e-8
    cost: bool = True
    gradient: bool = True
    step: bool = True

    def __post_init__(self):
        for name in ("abs_tol", "rel_tol"):
            v = float(getattr(self, name))
            if not (math.isfinite(v) and v >= 0):
                raise ParameterError(f"ConvergenceCriteria.{name} must be non-negative, got {v!r}")


@dataclass(frozen=True)
class IDTOSettings:
    """Settings of :class:`IDTOSolver` (validated on construction).

    Attributes:
      max_iterations: iteration cap (≥ 0).
      initial_radius: ``Δ_0`` (scaled units), > 0; the notes' default 0.1.  It bounds the
        scaled step of the whole trajectory, so at 0.1 a cold solve spends its first iterations
        doubling ``Δ``; the tasks choose their own (``contactopt.tasks``: 10 for the spinner, the
        quadruped and the hopper, 1 for the acrobot, measured there; the MPC planner's
        ``restart_radius`` is the radius its updates restart from).  ``None``: scaled to the
        problem — ``Δ_0 = auto_radius_scale · ‖p_H‖``, the norm of the first iteration's scaled
        Gauss–Newton step ``p_H = −H̃⁻¹g̃`` (capped at ``max_radius``), so the first trial
        is that fraction of the Gauss–Newton step whatever the problem's units and size.
        max_radius: ``Δ_max``.
      auto_radius_scale: the fraction above (> 0, default 1: the first trial is the full
        Gauss–Newton step; a failed trial divides ``Δ`` by 4 as usual).
      min_radius: stop with TRUST_REGION_COLLAPSED when ``Δ`` drops below it.
      scaling: ``"quartic"`` (``D = min(1, H_ii^−1/4)``), ``"sqrt"`` (``^−1/2``) or ``"none"``.
      convergence: :class:`ConvergenceCriteria` or None (run ``max_iterations``).
      underactuation: ``"penalty"`` (the problem's ``w_u ‖Zᵀτ‖²`` rows, default) or
        ``"constrained"`` (``Zᵀτ_t = 0`` as equality constraints, Lagrange-multiplier dogleg).
      constraint_tol: in constrained mode, convergence also needs ``max_t ‖Zᵀτ_t‖∞ ≤ constraint_tol``.
      constrained_step: how constrained mode steps and judges steps. ``"dogleg"`` (default, the
        notes' method): the dogleg between the Cauchy point along ``−g̃_λ`` and the KKT step
        ``p_H``, judged on the merit ``L + λᵀh`` with ``λ`` fixed.  ``"l1"``: the KKT step scaled
        to the radius, ``p = α p_H`` with ``α = min(1, Δ/‖p_H‖)``, judged on the exact-penalty
        merit ``φ = L + μ‖h‖₁`` with ``μ = 2‖λ‖∞``: predicted reduction
        ``−g̃ᵀp − ½pᵀH̃p + μα‖h‖₁`` (the linearized violation of ``p`` is ``(1 − α) h``), which
        is ``≥ α(1 − α/2) p_HᵀH̃p_H + α(μ − ‖λ‖∞)‖h‖₁ > 0``.  Every truncated step stays on
        the linearized constraints and no step is rewarded for violating them, where the
        dogleg's Cauchy leg leaves them and the merit ``L + λᵀh``, linear in ``h``, can drop
        as the violation grows.  Penalty mode always takes the dogleg.
      single_thread_blas: run the solve's dense linear algebra on one OpenBLAS thread
        (:mod:`contactopt.native.blas`; the matrices are small, and threads only add waiting).
      multipliers: how constrained mode computes ``λ``.  ``"schur"`` (the notes' method): the
        dense ``(T·nz)²`` system ``Ã H̃⁻¹ Ãᵀ`` above, time cubic in ``T`` at long horizons (the
        paper's Fig. 4).  ``"banded"`` (default): the KKT system
        ``[H̃ Ãᵀ; Ã 0][p; λ] = [−g̃; −h]`` itself with the unknowns of each knot interleaved
        (``[p_k; λ_k]``), a band of half-width ``3(nv + nz) − 1`` solved by banded LU with
        partial pivoting (LAPACK ``gbsv``, :func:`~contactopt.native.lapack.banded_lu_solve`):
        time linear in ``T``.  The same ``λ`` up to the conditioning of the two systems (the
        Schur complement loses digits when ``H̃`` is nearly singular); a singular KKT system
        (redundant constraints) falls back to ``"schur"``.
    """

    max_iterations: int = 100
    initial_radius: float | None = 0.1
    max_radius: float = 1e5
    min_radius: float = 1e-12
    scaling: str = "quartic"
    convergence: ConvergenceCriteria | None = field(default_factory=ConvergenceCriteria)
    underactuation: str = "penalty"
    constraint_tol: float = 1e-8
    single_thread_blas: bool = True
    auto_radius_scale: float = 1.0
    constrained_step: str = "dogleg"
    multipliers: str = "banded"

    def __post_init__(self):
        if self.multipliers not in ("schur", "banded"):
            raise ParameterError(
                f"multipliers must be 'schur' or 'banded', got {self.multipliers!r}")
        if self.constrained_step not in ("dogleg", "l1"):
            raise ParameterError(
                f"constrained_step must be 'dogleg' or 'l1', got {self.constrained_step!r}")
        if self.underactuation not in ("penalty", "constrained"):
            raise ParameterError(
                f"underactuation must be 'penalty' or 'constrained', got {self.underactuation!r}")
        check_positive("constraint_tol", self.constraint_tol)
        if int(self.max_iterations) != self.max_iterations or self.max_iterations < 0:
            raise ParameterError(f"max_iterations must be a non-negative integer, got {self.max_iterations!r}")
        if self.initial_radius is not None:
            check_positive("initial_radius", self.initial_radius)
        check_positive("max_radius", self.max_radius)
        check_positive("min_radius", self.min_radius)
        check_positive("auto_radius_scale", self.auto_radius_scale)
        if self.initial_radius is not None and self.initial_radius > self.max_radius:
            raise ParameterError("initial_radius must not exceed max_radius")
        if self.scaling not in ("quartic", "sqrt", "none"):
            raise ParameterError(f"scaling must be 'quartic', 'sqrt' or 'none', got {self.scaling!r}")


@dataclass(frozen=True)
class IDTOIterationLog:
    """One iteration: cost before the step, trust radius used, ratio, and timings [s].

    ``times`` keys: residual, jacobian, assemble, factor (Cholesky, multipliers and the dogleg
    step), trial (retracting to and evaluating the trial point).  Frozen (like ``times`` it is
    not to be modified).  ``violation`` = max ‖Zᵀτ_t‖∞ at the current iterate
    (the constraint violation in constrained mode); ``multiplier_norm`` = ‖λ‖ (0 in penalty mode);
    ``cost`` is the problem's cost ``L`` (without penalty rows in constrained mode).
    """

    iteration: int
    cost: float
    radius: float
    ratio: float
    step_norm: float
    accepted: bool
    violation: float
    gradient_norm: float
    times: dict
    multiplier_norm: float = 0.0


@dataclass(frozen=True)
class IDTOResult:
    """Result of a solve (frozen: derive a changed copy with :func:`dataclasses.replace`).

    Attributes:
      q: ``(T+1, nq)`` optimal configurations; v: ``(T+1, nv)``; tau: ``(T, nv)``
      generalized forces; contact: ``(T, nv)`` contact forces; cost: final ``L``;
      status: :class:`IDTOStatus`; iterations: count; log: tuple of :class:`IDTOIterationLog`;
      trust_radius: final ``Δ`` (reused by :meth:`IDTOSolver.solve_from_warm_start`; None when the
      radius was to be scaled to the problem and no iteration got that far); solve_time [s].
    """

    q: np.ndarray
    v: np.ndarray
    tau: np.ndarray
    contact: np.ndarray
    cost: float
    status: IDTOStatus
    iterations: int
    log: tuple
    trust_radius: float | None
    solve_time: float

    def __post_init__(self):
        if not isinstance(self.log, tuple):
            object.__setattr__(self, "log", tuple(self.log))

    @property
    def converged(self) -> bool:
        return self.status is IDTOStatus.CONVERGED

    def timing(self) -> dict[str, float]:
        """Seconds summed over iterations, with the keys shared by the three solvers.

        ``derivatives`` (residual + Jacobian), ``solve`` (Gauss–Newton assembly and scaling,
        factorization, multipliers and dogleg), ``line_search`` (the trial points' evaluation),
        ``total`` (the whole solve, :attr:`solve_time`).
        """
        def part(keys):
            return float(sum(lg.times.get(k, 0.0) for lg in self.log for k in keys))

        return {"derivatives": part(_DERIVATIVES), "solve": part(_SOLVE),
                "line_search": part(_LINE_SEARCH), "total": float(self.solve_time)}


# --------------------------------------------------------------------------- banded algebra


_BANDED_INDEX: dict = {}


def _banded_index(T: int, n: int):
    """Flat indices into ``blocks (T, 3, n, n)`` and the (row, column) of each in banded storage."""
    key = (T, n)
    idx = _BANDED_INDEX.get(key)
    if idx is None:
        u = min(3 * n - 1, T * n - 1)
        a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        src, rows, cols = [], [], []
        for d in range(3):
            K = T - d
            if K <= 0:
                break
            k = np.arange(K)[:, None, None]
            i = np.broadcast_to(k * n + a[None], (K, n, n))
            j = np.broadcast_to((k + d) * n + b[None], (K, n, n))
            flat = ((k * 3 + d) * n + a[None]) * n + b[None]
            mask = i <= j if d == 0 else np.ones((K, n, n), bool)
            src.append(np.broadcast_to(flat, (K, n, n))[mask])
            rows.append(u + i[mask] - j[mask])
            cols.append(j[mask])
        idx = (np.concatenate(src), np.concatenate(rows), np.concatenate(cols))
        if len(_BANDED_INDEX) > 64:
            _BANDED_INDEX.clear()
        _BANDED_INDEX[key] = idx
    return idx


class BandedHessian:
    """Symmetric block-pentadiagonal matrix: ``blocks[k, d] = H_{k, k+d}``, shape ``(T, 3, n, n)``.

    ``blocks[k, 0]`` are full symmetric blocks; entries with ``k + d ≥ T`` are ignored.
    """

    def __init__(self, blocks: np.ndarray):
        self.blocks = blocks
        self.T, _, self.n, _ = blocks.shape

    @property
    def size(self) -> int:
        return self.T * self.n

    def diagonal(self) -> np.ndarray:
        return np.einsum("kii->ki", self.blocks[:, 0]).ravel()

    def scaled(self, D: np.ndarray) -> "BandedHessian":
        """``D H D`` for a diagonal ``D (T·n,)``."""
        Dk = D.reshape(self.T, self.n)
        out = self.blocks * Dk[:, None, :, None]
        for d in range(3):
            if self.T > d:
                out[: self.T - d, d] *= Dk[d:, None, :]
        return BandedHessian(out)

    def matvec(self, x: np.ndarray) -> np.ndarray:
        xb = x.reshape(self.T, self.n)
        B = self.blocks
        y = np.einsum("kij,kj->ki", B[:, 0], xb)
        for d in (1, 2):
            if self.T > d:
                y[:-d] += np.einsum("kij,kj->ki", B[:-d, d], xb[d:])
                y[d:] += np.einsum("kji,kj->ki", B[:-d, d], xb[:-d])
        return y.ravel()

    def to_banded(self) -> np.ndarray:
        """Upper banded storage ``ab (u+1, N)``, ``u = 3n − 1``: ``ab[u + i − j, j] = H_ij`` (i ≤ j)."""
        T, n = self.T, self.n
        u = min(3 * n - 1, T * n - 1)
        ab = np.zeros((u + 1, T * n))
        src, rows, cols = _banded_index(T, n)
        ab[rows, cols] = self.blocks.reshape(-1)[src]
        return ab

    def to_dense(self) -> np.ndarray:
        """Dense ``(N, N)`` copy (tests and diagnostics only)."""
        T, n = self.T, self.n
        H = np.zeros((T * n, T * n))
        for k in range(T):
            for d in range(3):
                if k + d < T:
                    H[k * n:(k + 1) * n, (k + d) * n:(k + d + 1) * n] = self.blocks[k, d]
                    if d:
                        H[(k + d) * n:(k + d + 1) * n, k * n:(k + 1) * n] = self.blocks[k, d].T
        return H


def _tmm(A, B):
    """Batched ``A_kᵀ B_k`` of ``(K, m, i)`` and ``(K, m, j)`` stacks (``matmul``, faster than einsum)."""
    return np.matmul(np.swapaxes(A, 1, 2), B)


def _tmv(A, r):
    """Batched ``A_kᵀ r_k`` of a ``(K, m, i)`` stack and ``(K, m)`` vectors."""
    return np.matmul(r[:, None, :], A)[:, 0]


def gauss_newton_system(problem: IDTOProblem, lin: Linearization):
    """Gauss–Newton ``H = JᵀJ`` (as :class:`BandedHessian`) and gradient ``g = Jᵀr (T·nv,)``.

    Accumulated block by block from the position, velocity and inverse-dynamics
    residual Jacobians of ``lin``; cost ``O(T·nv²·(nv + mτ))``.
    """
    T, nv, mt = problem.T, problem.nv, lin.Jtau.shape[2]
    r = lin.r
    rq = r[: (T + 1) * nv].reshape(T + 1, nv)[1:]
    rv = r[(T + 1) * nv: 2 * (T + 1) * nv].reshape(T + 1, nv)[1:]
    rt = r[2 * (T + 1) * nv:].reshape(T, mt)
    Hb = np.zeros((T, 3, nv, nv))
    g = np.zeros((T, nv))
    # positions: r_q,k+1 depends on block k
    Hb[:, 0] += _tmm(lin.Jq, lin.Jq)
    g += _tmv(lin.Jq, rq)
    # velocities: r_v,k+1 depends on blocks k−1 (slot 0) and k (slot 1)
    A0, A1 = lin.Jv[:, 0], lin.Jv[:, 1]
    Hb[:, 0] += _tmm(A1, A1)
    g += _tmv(A1, rv)
    if T > 1:
        Hb[:-1, 0] += _tmm(A0[1:], A0[1:])
        Hb[:-1, 1] += _tmm(A0[1:], A1[1:])
        g[:-1] += _tmv(A0[1:], rv[1:])
    # inverse dynamics: r_τ,t depends on blocks t−2, t−1, t (slots 0, 1, 2)
    S = lin.Jtau
    for a in range(3):
        lo = max(0, 2 - a)  # first t whose block t−2+a exists
        if lo >= T:
            continue
        ks = np.arange(lo, T) - 2 + a
        g[ks] += _tmv(S[lo:, a], rt[lo:])
        for b in range(a, 3):
            Hb[ks, b - a] += _tmm(S[lo:, a], S[lo:, b])
    # symmetrize the diagonal blocks exactly
    Hb[:, 0] = 0.5 * (Hb[:, 0] + np.swapaxes(Hb[:, 0], 1, 2))
    return BandedHessian(Hb), g.ravel()


def _dogleg(pU, pH, radius):
    """Dogleg point at ``radius``; returns ``(p, hit_boundary)``."""
    nU = np.linalg.norm(pU)
    if np.linalg.norm(pH) <= radius:
        return pH, False
    if nU >= radius:
        return pU * (radius / nU), True
    d = pH - pU
    a, b, c = d @ d, 2 * pU @ d, pU @ pU - radius ** 2
    s = (-b + math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)
    return pU + s * d, True


# --------------------------------------------------------------------------- solver


class IDTOSolver:
    """Trust-region Gauss–Newton (dogleg) solver for an :class:`IDTOProblem`.

    Usage::

        solver = IDTOSolver(problem)
        result = solver.solve(q_guess)          # full solve
        problem.set_initial_state(q_meas, v_meas)
        result = solver.solve_from_warm_start(q_shifted)   # MPC: one iteration, radius kept
    """

    def __init__(self, problem: IDTOProblem, options: IDTOSettings | None = None):
        self.problem = check_instance("IDTOSolver: problem", problem, IDTOProblem)
        self.options = options = check_instance("IDTOSolver: options", options, IDTOSettings, IDTOSettings)
        self.trust_radius = options.initial_radius

    def _scaling(self, diag: np.ndarray) -> np.ndarray:
        mode = self.options.scaling
        if mode == "none":
            return np.ones_like(diag)
        p = -0.25 if mode == "quartic" else -0.5
        with np.errstate(divide="ignore"):
            return np.minimum(1.0, np.where(diag > 0, diag, 0.0) ** p)

    @staticmethod
    def _factor(Hs: BandedHessian):
        """Banded upper Cholesky factor of ``H̃ + s·I`` with the smallest shift ``s`` of
        ``0, 10⁻¹² max H̃_ii, ×100 …`` (8 tries) that is positive definite: ``(factor, s)``, or
        ``(None, s)`` when none was."""
        ab = Hs.to_banded()
        shift = 0.0
        scale = max(float(np.max(ab[-1])), 1e-300)
        for _ in range(8):
            try:
                abs_ = ab.copy()
                abs_[-1] += shift
                return scipy.linalg.cholesky_banded(abs_, lower=False, check_finite=False), shift
            except np.linalg.LinAlgError:
                shift = 1e-12 * scale if shift == 0 else shift * 100
        return None, shift

    @property
    def constrained(self) -> bool:
        """True in the equality-constrained mode with at least one unactuated direction."""
        return self.options.underactuation == "constrained" and self.problem.Z.shape[1] > 0

    def _cost_rows(self, lin: Linearization) -> Linearization:
        """``lin`` without the unactuated-penalty rows (constrained mode); the ``R`` rows and the
        actuator-limit rows stay (:meth:`IDTOProblem.tau_cost_rows`)."""
        pr = self.problem
        if not self.constrained or pr.num_penalty_rows == 0:
            return lin
        T, nv, mt = pr.T, pr.nv, pr.m_tau
        rows = pr.tau_cost_rows(True)
        off = 2 * (T + 1) * nv
        rt = lin.r[off:].reshape(T, mt)[:, rows]
        r = np.concatenate([lin.r[:off], rt.ravel()])
        return Linearization(r, lin.Jq, lin.Jv, lin.Jtau[:, :, rows], lin.times, lin.tau, lin.dtau)

    def _evaluate(self, q, tr=None):
        """``(L, h)`` at ``q``: the cost (without penalty rows in constrained mode) and ``Zᵀτ`` stacked.

        The trajectory of the last evaluated point is kept in ``self._last`` (``(q, tr)``) so that
        the end of :meth:`solve` does not evaluate the accepted point's inverse dynamics again.
        """
        pr = self.problem
        if tr is None:
            tr = pr._trajectory(q)
        self._last = (q, tr)
        r = pr._residuals(tr)
        if self.constrained and pr.num_penalty_rows:
            off = 2 * (pr.T + 1) * pr.nv
            rows = pr.tau_cost_rows(True)
            r = np.concatenate([r[:off], r[off:].reshape(pr.T, pr.m_tau)[:, rows].ravel()])
        with np.errstate(over="ignore", invalid="ignore"):  # an absurd trial point costs inf, unwarned
            return 0.5 * float(r @ r), pr.unactuated_forces(tr.tau)

    def _constraint_jacobian(self, lin: Linearization) -> np.ndarray:
        """Banded ``A = ∂h/∂q`` as blocks ``(T, 3, nz, nv)`` (slots as ``Jtau``)."""
        return np.einsum("vz,tkvn->tkzn", self.problem.Z, lin.dtau)

    def _multipliers(self, cb, Hs: BandedHessian, gs, D, Ab, hval, shift: float = 0.0):
        """λ and ``g̃ + Ãᵀλ`` (module docstring) by ``options.multipliers``.  ``cb``: the banded
        Cholesky factor of ``H̃ + shift·I`` (:meth:`_factor`; the step solves with it, so the
        multipliers are those of the same shifted ``H̃``).  ``Ab (T, 3, nz, nv)``, ``hval (T·nz,)``.
        ``(None, None)`` when the multiplier system overflowed (not finite)."""
        if self.options.multipliers == "banded":
            try:
                return self._multipliers_banded(Hs, gs, D, Ab, hval, shift)
            except np.linalg.LinAlgError:
                pass  # a singular KKT system: the Schur complement's least squares below
        return self._multipliers_schur(cb, Hs, gs, D, Ab, hval)

    def _multipliers_banded(self, Hs: BandedHessian, gs, D, Ab, hval, shift: float = 0.0):
        """:meth:`_multipliers` from the banded KKT system (``IDTOSettings.multipliers``).

        Unknown ``k·m + a`` (``m = nv + nz``) is ``p_k[a]`` for ``a < nv`` and ``λ_k[a − nv]``
        otherwise; ``H̃_{k,k+d}`` (``d ≤ 2``) and ``Ã_{t,k}`` (``k = t−2, t−1, t``) then lie within
        ``3m − 1`` of the diagonal.  Raises ``LinAlgError`` for a singular system."""
        pr = self.problem
        T, nv, nz = pr.T, pr.nv, pr.Z.shape[1]
        m = nv + nz
        n = T * m
        bw = min(3 * m - 1, n - 1)
        ab = np.zeros((3 * bw + 1, n), order="F")  # gbsv storage: ab[2bw + i − j, j] = K[i, j]
        x_at = np.arange(T)[:, None] * m + np.arange(nv)[None, :]        # (T, nv): p_k[a]
        lam_at = np.arange(T)[:, None] * m + nv + np.arange(nz)[None, :]  # (T, nz): λ_k[z]

        def put(rows, cols, values):  # K[rows, cols] = values and its mirror K[cols, rows]
            rows, cols = np.broadcast_arrays(rows, cols)
            ab[2 * bw + rows - cols, cols] = values
            ab[2 * bw + cols - rows, rows] = values

        for d in range(min(3, T)):
            put(x_at[:T - d, :, None], x_at[d:, None, :], Hs.blocks[:T - d, d])
        ab[2 * bw, x_at.ravel()] += shift
        Dk = D.reshape(T, nv)
        blocks = []  # per slot: (k, Ã_{t,k} (len, nz, nv), t)
        for slot in range(3):
            t = np.arange(max(0, 2 - slot), T)
            k = t - 2 + slot
            At_k = Ab[t, slot] * Dk[k][:, None, :]
            put(lam_at[t][:, :, None], x_at[k][:, None, :], At_k)
            blocks.append((k, At_k, t))
        rhs = -np.concatenate([gs.reshape(T, nv), hval.reshape(T, nz)], axis=1).ravel()
        sol = banded_lu_solve(ab, bw, rhs)  # LAPACK's dgbsv, the interpreter lock released
        if not np.isfinite(sol).all():
            return None, None
        lam_k = sol.reshape(T, m)[:, nv:]
        gl = gs.reshape(T, nv).copy()
        for k, At_k, t in blocks:
            gl[k] += np.einsum("tzn,tz->tn", At_k, lam_k[t])
        return lam_k.ravel(), gl.ravel()

    def _multipliers_schur(self, cb, Hs: BandedHessian, gs, D, Ab, hval):
        """:meth:`_multipliers` from the dense Schur complement ``Ã H̃⁻¹ Ãᵀ`` (module docstring)."""
        pr = self.problem
        T, nv, nz = pr.T, pr.nv, pr.Z.shape[1]
        N = T * nv
        # Ãᵀ (N, T·nz), built block by block: constraint t touches decision blocks t−2, t−1, t.
        At = np.zeros((N, T * nz))
        Dk = D.reshape(T, nv)
        for t in range(T):
            for slot in range(3):
                k = t - 2 + slot
                if k >= 0:
                    At[k * nv:(k + 1) * nv, t * nz:(t + 1) * nz] = (Ab[t, slot] * Dk[k][None, :]).T
        # With H̃ = UᵀU (banded U): Z = U⁻ᵀÃᵀ, so S = ÃH̃⁻¹Ãᵀ = ZᵀZ and ÃH̃⁻¹g̃ = Zᵀ(U⁻ᵀg̃)
        # (one banded triangular solve instead of the two of H̃⁻¹Ãᵀ).
        rhs_all = np.empty((N, T * nz + 1))
        rhs_all[:, :-1] = At
        rhs_all[:, -1] = gs
        # Uᵀ Zw = rhs: LAPACK's dtbtrs with the interpreter lock released (async MPC's plant
        # thread waited for it through the whole solve)
        Zw = banded_transposed_solve(cb, rhs_all)
        Z, w = Zw[:, :-1], Zw[:, -1]
        S = Z.T @ Z
        rhs = hval - Z.T @ w
        if not (np.isfinite(S).all() and np.isfinite(rhs).all()):
            return None, None  # overflowed: the caller stops with IDTOStatus.NON_FINITE
        try:
            lam = scipy.linalg.cho_solve(scipy.linalg.cho_factor(S), rhs)
        except np.linalg.LinAlgError:
            lam = np.linalg.lstsq(S, rhs, rcond=None)[0]
        return lam, gs + At @ lam

    def solve(self, q_guess, *, max_iterations: int | None = None, trust_radius: float | None = None) -> IDTOResult:
        """Minimize the problem's cost from ``q_guess (T+1, nq)`` (``q_guess[0]`` must equal ``q_init``).

        Args:
          max_iterations: override of ``options.max_iterations``.
          trust_radius: initial ``Δ`` (default ``options.initial_radius``; where that is None,
            scaled to the problem from the first Gauss–Newton step, see :class:`IDTOSettings`).

        Returns:
          :class:`IDTOResult`.  ``self.trust_radius`` keeps the final radius.

        Raises:
          ShapeError, NonFiniteError, ParameterError: bad ``q_guess``.
        """
        if self.options.single_thread_blas:
            with single_threaded_blas():
                return self._solve(q_guess, max_iterations, trust_radius)
        return self._solve(q_guess, max_iterations, trust_radius)

    def _solve(self, q_guess, max_iterations, trust_radius) -> IDTOResult:
        pr = self.problem
        q = pr.check_trajectory(q_guess)
        opts = self.options
        iters = opts.max_iterations if max_iterations is None else int(max_iterations)
        if iters < 0:
            raise ParameterError(f"max_iterations must be non-negative, got {max_iterations!r}")
        radius = opts.initial_radius if trust_radius is None else check_positive("trust_radius", trust_radius)
        t_start = time.perf_counter()
        log = []
        status = IDTOStatus.MAX_ITERATIONS
        lin = None
        cost = None
        k = 0
        constrained = self.constrained
        lam = None
        hval = None
        lam_norm = 0.0
        for k in range(iters):
            times = {}
            if lin is None:
                # an absurd iterate (e.g. a sampled guess) can overflow here: checked below instead
                # of warned about, and the solve stops with IDTOStatus.NON_FINITE
                with np.errstate(over="ignore", invalid="ignore"):
                    lin = self._cost_rows(pr._linearize(q))
                    times.update(lin.times)
                    cost = 0.5 * float(lin.r @ lin.r)
                    t0 = time.perf_counter()
                    H, g = gauss_newton_system(pr, lin)
                    D = self._scaling(H.diagonal())
                    Hs = H.scaled(D)
                    gs = D * g
                times["assemble"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                if not (math.isfinite(cost) and np.isfinite(gs).all() and np.isfinite(D).all()
                        and np.isfinite(lin.tau).all()):
                    status = IDTOStatus.NON_FINITE
                    break
                cb, shift = self._factor(Hs)
                if cb is None:
                    status = IDTOStatus.FACTORIZATION_FAILED
                    break
                if constrained:
                    hval = pr.unactuated_forces(lin.tau)
                    with np.errstate(over="ignore", invalid="ignore"):
                        Ab = self._constraint_jacobian(lin)
                        lam, gl = self._multipliers(cb, Hs, gs, D, Ab, hval, shift)
                    if lam is None:
                        status = IDTOStatus.NON_FINITE
                        break
                    lam_norm = float(np.linalg.norm(lam))
                else:
                    gl = gs
                pH = -scipy.linalg.cho_solve_banded((cb, False), gl, check_finite=False)
                gHg = gl @ Hs.matvec(gl)
                pU = -(gl @ gl) / gHg * gl if gHg > 0 else -gl
                if radius is None:  # scaled to the problem: a fraction of the first Gauss–Newton step
                    radius = min(max(opts.auto_radius_scale * float(np.linalg.norm(pH)), 10.0 * opts.min_radius),
                                 opts.max_radius)
                times["factor"] = time.perf_counter() - t0
                violation = pr.unactuated_violation(lin.tau)
            else:
                times.update({"residual": 0.0, "jacobian": 0.0, "assemble": 0.0, "factor": 0.0})
            t0 = time.perf_counter()
            l1 = constrained and opts.constrained_step == "l1"
            if l1:
                nH = float(np.linalg.norm(pH))
                alpha = 1.0 if nH <= radius else radius / nH
                p, hit = pH * alpha, alpha < 1.0
                mu = 2.0 * float(np.max(np.abs(lam), initial=0.0))
                h1 = float(np.sum(np.abs(hval)))
                # ℓ1 merit L + μ‖h‖₁; the linearized violation of p = α p_H is (1 − α) h
                pred = -(gs @ p + 0.5 * p @ Hs.matvec(p)) + mu * alpha * h1
            else:
                p, hit = _dogleg(pU, pH, radius)
                pred = -(gl @ p + 0.5 * p @ Hs.matvec(p))
            dq = D * p
            t1 = time.perf_counter()
            times["factor"] += t1 - t0
            t0 = t1
            q_new = pr.retract(q, dq)
            cost_new, h_new = self._evaluate(q_new)
            times["trial"] = time.perf_counter() - t0
            actual = cost - cost_new
            if l1:
                actual += mu * (h1 - float(np.sum(np.abs(h_new))))
            elif constrained:
                actual += float(lam @ (hval - h_new))
            rho = actual / pred if pred > 0 else (0.0 if actual <= 0 else 1.0)
            accepted = bool(rho > 0 and np.isfinite(cost_new))
            log.append(IDTOIterationLog(k, cost, radius, float(rho), float(np.linalg.norm(p)), accepted,
                                    violation, float(np.linalg.norm(g)), times, lam_norm))
            if rho < 0.25:
                radius /= 4.0
            elif rho > 0.75 and hit:
                radius = min(2.0 * radius, opts.max_radius)
            if accepted:
                done = self._converged(cost, cost_new, gl @ p, dq, q)
                if constrained and done:
                    done = float(np.max(np.abs(h_new), initial=0.0)) <= opts.constraint_tol
                q, cost, lin = q_new, cost_new, None
                if done:
                    status = IDTOStatus.CONVERGED
                    k += 1
                    break
            if radius < opts.min_radius:
                status = IDTOStatus.TRUST_REGION_COLLAPSED
                k += 1
                break
        else:
            k = iters
        self.trust_radius = radius
        last = getattr(self, "_last", None)
        tr = last[1] if (last is not None and last[0] is q) else pr._trajectory(q)
        final_cost, _ = self._evaluate(q, tr)
        return IDTOResult(q, tr.v, tr.tau, tr.contact, final_cost, status, k, tuple(log), radius,
                            time.perf_counter() - t_start)

    def solve_from_warm_start(self, q_guess, *, max_iterations: int = 1) -> IDTOResult:
        """MPC update: ``max_iterations`` (default 1) iterations from ``q_guess``, keeping the trust radius.

        The caller first updates the problem (``set_initial_state`` with the
        measured state, optionally ``set_nominal``) and passes the previous
        solution resampled at the new start time with ``q_guess[0] = q_init``.
        """
        return self.solve(q_guess, max_iterations=max_iterations, trust_radius=self.trust_radius)

    def _converged(self, cost, cost_new, gdq, dq, q) -> bool:
        c = self.options.convergence
        if c is None:
            return False
        eps = c.abs_tol + c.rel_tol * cost
        if c.cost and abs(cost - cost_new) < eps:
            return True
        if c.gradient and abs(gdq) < eps:
            return True
        if c.step and np.linalg.norm(dq) < c.abs_tol + c.rel_tol * np.linalg.norm(q):
            return True
        return False
