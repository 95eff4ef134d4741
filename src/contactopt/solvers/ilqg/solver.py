"""Iterative LQG (iLQG) trajectory optimization with the improvements of Tassa, Erez & Todorov (2012).

Problem: given ``x_0`` and dynamics ``x_{i+1} = f(x_i, u_i)`` (a
:class:`~contactopt.dynamics.Dynamics`), minimize over ``U = (u_0 … u_{T-1})``
subject to ``lower ≤ u_i ≤ upper``::

    J(U) = Σ_{i<T} ℓ(x_i, u_i) + ℓ_f(x_T)

(a :class:`~contactopt.costs.TrajectoryCostLike`; a
:class:`~contactopt.costs.TrajectoryCost` puts the time step into ``ℓ``).
States are compared in the tangent space (``x ⊕ dx``, ``x1 ⊖ x0``), so quaternion
joints are handled exactly.

One iteration (seed paper, Sec. II-E):

1. **Derivatives** ``A_i = f_x``, ``B_i = f_u`` (threaded finite differences for
   MuJoCo) and the cost's ``ℓ_x, ℓ_u, ℓ_xx, ℓ_uu, ℓ_ux`` (Gauss-Newton).
2. **Backward pass** for ``i = T−1 … 0`` with ``V_x, V_xx`` from ``ℓ_f``::

       Q_x  = ℓ_x + Aᵀ V'_x            Q_u  = ℓ_u + Bᵀ V'_x
       Q_xx = ℓ_xx + Aᵀ V'_xx A        Q_uu = ℓ_uu + Bᵀ V'_xx B      Q_ux = ℓ_ux + Bᵀ V'_xx A
       state regularization (eq. 10):   Q̃_uu = Q_uu + μ BᵀB,   Q̃_ux = Q_ux + μ BᵀA
       control regularization (eq. 9):  Q̃_uu = Q_uu + μ I,     Q̃_ux = Q_ux
       k = argmin_{lower−u_i ≤ δu ≤ upper−u_i} ½ δuᵀ Q̃_uu δu + δuᵀ Q_u   (box QP; −Q̃_uu⁻¹Q_u if unbounded)
       K_free = −(Q̃_uu)_ff⁻¹ (Q̃_ux)_f,   K_clamped = 0
       improved value update (eq. 11):
           V_x  = Q_x + Kᵀ Q_uu k + Kᵀ Q_u + Q_uxᵀ k
           V_xx = Q_xx + Kᵀ Q_uu K + Kᵀ Q_ux + Q_uxᵀ K
       standard value update (eq. 7):  V_x = Q_x + Q_uxᵀ k,  V_xx = Q_xx + Q_uxᵀ K

   If ``Q̃_uu`` (or its free block) is not positive definite, μ is increased and the
   pass restarts.
3. **Forward pass / line search** (eq. 12–13) for ``α = 1, …``::

       û_i = clip(u_i + α k_i + K_i (x̂_i ⊖ x_i)),   x̂_{i+1} = f(x̂_i, û_i)
       ΔJ(α) = α Σ k_iᵀQ_u,i + ½ α² Σ k_iᵀ Q_uu,i k_i          (expected change, < 0)
       accept if  z = (J − Ĵ) / (−ΔJ(α)) > c₁

The regularization follows the quadratic schedule of Sec. II-F (``μ_min = 1e-6``,
``Δ₀ = 2``): increase ``Δ ← max(Δ₀, ΔΔ₀), μ ← max(μ_min, μΔ)``; decrease
``Δ ← min(1/Δ₀, Δ/Δ₀), μ ← μΔ if μΔ > μ_min else 0``.  μ increases on a
non-positive-definite ``Q̃_uu`` or a failed line search (derivatives are then
reused) and decreases after every accepted step.

The textbook variant (control regularization + standard value update) is
``ILQGSettings.textbook()``.

The backward pass runs as one compiled (numba) kernel,
:mod:`contactopt.solvers.ilqg.kernels`, which evaluates the same expressions with the
same BLAS/LAPACK routines as the Python reference (``_backward_pass_reference`` with
:func:`solve_box_qp`), so both give the same plan to roundoff (bit for bit on the
machines tested).  The first call in a fresh environment compiles it (numba caches
the result next to the module).

The cost derivatives of the initial trajectory are evaluated right after its rollout
and give its total cost (for costs whose ``total_is_evaluate_sum`` holds, e.g.
:class:`~contactopt.costs.TrajectoryCost`: the same number as ``total``, one cost pass
fewer); dynamics with ``derivatives_async`` (``MujocoDynamics``) compute the first
iteration's finite differences on their worker threads meanwhile.

For model-predictive control, :meth:`ILQG.solve_from_warm_start` shifts the previous
plan in time, rolls it out from the new state under the previous feedback gains,
and continues with the previous μ.

Example (acrobot, 1 s to a bent equilibrium)::

    import numpy as np
    from contactopt import load_model, pack_state
    from contactopt.costs import Control, CostTerm, Qpos, Quadratic, Qvel, StageCost, TrajectoryCost
    from contactopt.dynamics import MujocoDynamics
    from contactopt.solvers import ILQG

    model = load_model("acrobot", timestep=0.02)
    target = [0.2, -0.839]
    running = StageCost(model, [CostTerm(Control(model), Quadratic(), 0.1),
                                CostTerm(Qpos(model, target), Quadratic(), 1.0)])
    terminal = StageCost(model, [CostTerm(Qpos(model, target), Quadratic(), 50.0),
                                 CostTerm(Qvel(model), Quadratic(), 5.0)])
    solver = ILQG(MujocoDynamics(model), TrajectoryCost(running, terminal))
    plan = solver.solve(pack_state(model, [0.0, 0.0]), np.zeros((50, 1)))
    print(plan.status, plan.cost, plan.timing())
    # next control step: re-plan from the measured state, one step later
    plan = solver.solve_from_warm_start(plan.X[1], plan, shift=1, max_iterations=1)
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass, replace

import numpy as np

from ...costs import CostDerivatives, TrajectoryCostLike
from ...dynamics import Dynamics, check_control_limits
from ...errors import NonFiniteError, ParameterError, as_array
from . import kernels as _kernels
from .box_qp import BoxQPResult, BoxQPStatus, _chol_solve, _cholesky, solve_box_qp
from .result import ILQGIterationLog, ILQGResult, ILQGStatus
from .settings import (
    ILQGSettings,
    Regularization,
    ValueUpdate,
    decrease_regularization,
    increase_regularization,
)

__all__ = [
    "Regularization",
    "ValueUpdate",
    "ILQGStatus",
    "ILQGSettings",
    "ILQGIterationLog",
    "ILQGResult",
    "ILQG",
    "BoxQPStatus",
    "BoxQPResult",
    "solve_box_qp",
    "shift_plan",
    "increase_regularization",
    "decrease_regularization",
]


# =========================================================================== backward pass


@dataclass
class _BackwardResult:
    ok: bool
    failed_at: int
    k: np.ndarray | None = None
    K: np.ndarray | None = None
    dV1: float = 0.0    # Σ kᵀQ_u
    dV2: float = 0.0    # Σ kᵀQ_uu k


class _Linearization:
    """Derivatives of one nominal trajectory, packed for the backward pass.

    With ``z = (x, u)`` and ``F_i = [A_i B_i] (n, n+m)``: ``lz (T, n+m)`` stacks
    ``(ℓ_x, ℓ_u)``, ``lzz (T, n+m, n+m)`` the stage Hessian ``[[ℓ_xx, ℓ_uxᵀ], [ℓ_ux, ℓ_uu]]``,
    and ``FtF (T, n+m, n+m) = F_iᵀF_i`` (whose lower blocks are ``BᵀA``, ``BᵀB``, the
    state-regularization terms of eq. 10).  Then ``Q_z = ℓ_z + Fᵀ V'_x`` and
    ``Q_zz = ℓ_zz + Fᵀ V'_xx F`` need two matrix products per step.
    """

    def __init__(self, A, B, cd: CostDerivatives, need_FtF: bool):
        self.fresh = None   # (T,) bool: rows differentiated now (the rest from a derivative hint)
        T, n, m = B.shape
        self.T, self.n, self.m = T, n, m
        F = np.empty((T, n, n + m))
        F[:, :, :n] = A
        F[:, :, n:] = B
        self.F = F
        self.Ft = np.ascontiguousarray(np.swapaxes(F, 1, 2))
        lz = np.empty((T, n + m))
        lz[:, :n] = cd.lx[:T]
        lz[:, n:] = cd.lu
        lzz = np.empty((T, n + m, n + m))
        lzz[:, :n, :n] = cd.lxx[:T]
        lzz[:, n:, :n] = cd.lux
        lzz[:, :n, n:] = np.swapaxes(cd.lux, 1, 2)
        lzz[:, n:, n:] = cd.luu
        self.lz, self.lzz = lz, lzz
        self.Vx_T = cd.lx[T].copy()
        self.Vxx_T = cd.lxx[T].copy()
        self.FtF = self.Ft @ F if need_FtF else None


def _backward_pass(lin: _Linearization, mu: float, settings: ILQGSettings,
                   du_lower, du_upper, bounded: bool, k_warm, *, compiled: bool = True) -> _BackwardResult:
    """Riccati-like sweep of iLQG (eq. 5, 9/10, 11/7) with box-constrained feedforward steps.

    ``compiled`` (default) runs the numba kernel
    :func:`~contactopt.solvers.ilqg.kernels.backward_pass_kernel`; ``compiled=False`` the
    Python reference :func:`_backward_pass_reference` (same algorithm, same results to
    roundoff; the tests compare the two).
    """
    if not compiled:
        return _backward_pass_reference(lin, mu, settings, du_lower, du_upper, bounded, k_warm)
    T, m = lin.T, lin.m
    FtF = lin.FtF if lin.FtF is not None else lin.lzz
    f64 = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731 - one kernel signature
    ok, failed_at, k, K, dV1, dV2 = _kernels.backward_pass_kernel(
        f64(lin.F), f64(lin.lz), f64(lin.lzz), f64(FtF), f64(lin.Vx_T), f64(lin.Vxx_T), float(mu),
        settings.regularization is Regularization.STATE,
        settings.value_update is ValueUpdate.IMPROVED,
        np.ascontiguousarray(du_lower, dtype=float).reshape(T, m),
        np.ascontiguousarray(du_upper, dtype=float).reshape(T, m), bool(bounded),
        np.ascontiguousarray(k_warm, dtype=float).reshape(T, m), int(settings.box_qp_max_iterations))
    if not ok:
        return _BackwardResult(False, int(failed_at))
    return _BackwardResult(True, -1, k, K, float(dV1), float(dV2))


def _backward_pass_reference(lin: _Linearization, mu: float, settings: ILQGSettings,
                             du_lower, du_upper, bounded: bool, k_warm) -> _BackwardResult:
    """Python reference of :func:`_backward_pass` (one box QP per saturated step via :func:`solve_box_qp`).

    Args:
      lin: the packed derivatives (:class:`_Linearization`).
      mu: regularization μ ≥ 0.
      du_lower, du_upper: ``(T, m)`` bounds on ``δu`` (``limits − U``).
      bounded: whether any bound is finite (else the unconstrained Cholesky path).
      k_warm: ``(T, m)`` warm start of the box QPs (previous ``k``).

    Returns:
      :class:`_BackwardResult` (``ok`` false with the failing step if ``Q̃_uu`` is not PD).
    """
    T, n, m = lin.T, lin.n, lin.m
    state_reg = settings.regularization is Regularization.STATE
    improved = settings.value_update is ValueUpdate.IMPROVED
    k = np.zeros((T, m))
    K = np.zeros((T, m, n))
    Vx = lin.Vx_T
    Vxx = lin.Vxx_T
    dV1 = 0.0
    dV2 = 0.0
    mu_eye = mu * np.eye(m)
    F, Ft, lz, lzz, FtF = lin.F, lin.Ft, lin.lz, lin.lzz, lin.FtF
    rhs = np.empty((m, n + 1))
    for i in range(T - 1, -1, -1):
        Qz = lz[i] + Ft[i] @ Vx
        Qzz = lzz[i] + Ft[i] @ (Vxx @ F[i])
        Qx, Qu = Qz[:n], Qz[n:]
        Qxx, Qux, Quu = Qzz[:n, :n], Qzz[n:, :n], Qzz[n:, n:]
        if mu == 0.0:
            Quu_r, Qux_r = Quu, Qux
        elif state_reg:
            Quu_r = Quu + mu * FtF[i, n:, n:]
            Qux_r = Qux + mu * FtF[i, n:, :n]
        else:
            Quu_r = Quu + mu_eye
            Qux_r = Qux
        Quu_r = 0.5 * (Quu_r + Quu_r.T)
        # unconstrained step first; it is the box-QP solution whenever it is feasible
        L = _cholesky(Quu_r)
        if L is None:
            return _BackwardResult(False, i)
        rhs[:, 0] = Qu
        rhs[:, 1:] = Qux_r
        sol = _chol_solve(L, rhs)
        ki = -sol[:, 0]
        Ki = -sol[:, 1:]
        if bounded and (np.any(ki < du_lower[i]) or np.any(ki > du_upper[i])):
            qp = solve_box_qp(Quu_r, Qu, du_lower[i], du_upper[i], k_warm[i],
                              max_iterations=settings.box_qp_max_iterations)
            if qp.status is BoxQPStatus.NOT_POSITIVE_DEFINITE:  # pragma: no cover - Quu_r is PD here
                return _BackwardResult(False, i)
            ki = qp.x
            Ki = np.zeros((m, n))
            if qp.chol is not None:
                Ki[qp.free] = -_chol_solve(qp.chol, Qux_r[qp.free])
        if improved:
            QuuK = Quu @ Ki
            W = Ki.T @ Qux
            Vx = Qx + Ki.T @ (Quu @ ki + Qu) + Qux.T @ ki
            Vxx = Qxx + Ki.T @ QuuK + W + W.T
        else:
            Vx = Qx + Qux.T @ ki
            Vxx = Qxx + Qux.T @ Ki
        Vxx = 0.5 * (Vxx + Vxx.T)
        dV1 += float(ki @ Qu)
        dV2 += float(ki @ (Quu @ ki))
        k[i] = ki
        K[i] = Ki
    if not (np.isfinite(dV1) and np.isfinite(dV2) and np.isfinite(Vxx).all()):
        return _BackwardResult(False, 0)
    return _BackwardResult(True, -1, k, K, dV1, dV2)


# =========================================================================== plan shifting


def shift_plan(dynamics: Dynamics, X, U, K, shift: float):
    """Shift a plan forward in time by ``shift`` steps (may be fractional) for a warm start.

    New step ``i`` takes the old plan at ``i + shift``: controls and gains are linearly
    interpolated, states interpolated in the tangent space (``X_a ⊕ w (X_b ⊖ X_a)``);
    beyond the end the last control, gain and state are held.  The horizon is kept.

    Args:
      dynamics: supplies ``state_difference`` / ``state_integrate``.
      X: ``(T+1, nx)``; U: ``(T, nu)``; K: ``(T, nu, ndx)`` (or None).
      shift: ``≥ 0`` steps (e.g. elapsed time / planner time step).

    Returns:
      ``(X_ref (T+1, nx), U (T, nu), K (T, nu, ndx) or None)``.
    """
    s = float(shift)
    if not math.isfinite(s) or s < 0:
        raise ParameterError(f"shift must be a finite number of steps >= 0, got {shift!r}")
    U = np.asarray(U, dtype=float)
    X = np.asarray(X, dtype=float)
    T = U.shape[0]

    def interp_rows(Y, count):
        last = Y.shape[0] - 1
        t = np.minimum(np.arange(count) + s, last)
        a = np.floor(t).astype(int)
        b = np.minimum(a + 1, last)
        w = (t - a).reshape((-1,) + (1,) * (Y.ndim - 1))
        return a, b, w, (1 - w) * Y[a] + w * Y[b]

    _, _, _, U_new = interp_rows(U, T)
    K_new = None if K is None else interp_rows(np.asarray(K, dtype=float), T)[3]
    a, b, w, _ = interp_rows(X, T + 1)
    if np.all(w == 0):
        X_new = X[a].copy()
    else:
        dX = dynamics.state_difference(X[a], X[b])
        X_new = dynamics.state_integrate(X[a], w.reshape(-1, 1) * dX)
    return X_new, U_new, K_new


# =========================================================================== solver


class ILQG:
    """iLQG trajectory optimizer (see the module docstring for the algorithm).

    Args:
      dynamics: a :class:`~contactopt.dynamics.Dynamics` (e.g. ``MujocoDynamics``).
      cost: a :class:`~contactopt.costs.TrajectoryCostLike` over the same state.
      settings: :class:`ILQGSettings` (defaults if None).
      control_lower, control_upper: ``(nu,)`` control limits (±inf = unbounded), intersected
        with the dynamics' own limits (a MuJoCo model's ``ctrlrange``, which MuJoCo
        enforces anyway); default: the dynamics' limits.

    Raises:
      ParameterError: sizes or time steps of dynamics and cost disagree, ``lower > upper``.
    """

    def __init__(self, dynamics: Dynamics, cost: TrajectoryCostLike,
                 settings: ILQGSettings | None = None, *, control_lower=None, control_upper=None):
        for attr in ("nx", "ndx", "nu", "rollout", "derivatives", "state_difference", "state_integrate"):
            if not hasattr(dynamics, attr):
                raise ParameterError(f"dynamics lacks {attr!r} (see contactopt.dynamics.Dynamics)")
        for attr in ("total", "evaluate"):
            if not hasattr(cost, attr):
                raise ParameterError(f"cost lacks {attr!r} (see contactopt.costs.TrajectoryCostLike)")
        for attr in ("ndx", "nu"):
            dc, cc = getattr(dynamics, attr), getattr(cost, attr, getattr(dynamics, attr))
            if dc != cc:
                raise ParameterError(f"dynamics {attr}={dc} but cost {attr}={cc}")
        h_dyn, h_cost = getattr(dynamics, "timestep", None), getattr(cost, "timestep", None)
        if h_dyn is not None and h_cost is not None and not math.isclose(h_dyn, h_cost, rel_tol=1e-9):
            raise ParameterError(
                f"cost time step {h_cost} s differs from the dynamics time step {h_dyn} s; build the "
                "TrajectoryCost on the planner model or pass timestep=dynamics.timestep")
        self.dynamics = dynamics
        self.cost = cost
        self.settings = ILQGSettings() if settings is None else settings
        if not isinstance(self.settings, ILQGSettings):
            raise ParameterError(f"settings must be ILQGSettings, got {type(self.settings).__name__}")
        dyn_lo, dyn_hi = check_control_limits(dynamics.nu, getattr(dynamics, "control_lower", None),
                                              getattr(dynamics, "control_upper", None))
        lo, hi = check_control_limits(dynamics.nu, control_lower, control_upper)
        # the dynamics clamp to their own limits anyway (MuJoCo's ctrlrange): intersect
        lo, hi = np.maximum(lo, dyn_lo), np.minimum(hi, dyn_hi)
        if np.any(lo > hi):
            i = int(np.argmax(lo > hi))
            raise ParameterError(f"control limits of control {i} do not overlap the dynamics' range "
                                 f"[{dyn_lo[i]}, {dyn_hi[i]}]")
        self.control_lower, self.control_upper = lo, hi
        self.nx, self.ndx, self.nu = dynamics.nx, dynamics.ndx, dynamics.nu
        #: whether the dynamics differentiate a subset of steps (``derivatives(..., rows=)``), which
        #: ``derivative_hint`` needs
        self.accepts_derivative_hint = _takes_rows(dynamics)

    # ------------------------------------------------------------------ μ schedule

    def _increase(self, mu, delta):
        return increase_regularization(mu, delta, self.settings)

    def _decrease(self, mu, delta):
        return decrease_regularization(mu, delta, self.settings)

    # ------------------------------------------------------------------ public API

    def solve(self, x0, U_init, *, X_ref=None, K=None, mu: float | None = None,
              delta: float | None = None, max_iterations: int | None = None,
              derivative_hint=None) -> ILQGResult:
        """Optimize the controls of a trajectory starting at ``x0``.

        Args:
          x0: ``(nx,)`` initial state.
          U_init: ``(T, nu)`` initial controls (``T ≥ 1``); clamped to the limits.
          X_ref, K: optional feedback for the *initial* rollout,
            ``u_i = U_init[i] + K[i] (x_i ⊖ X_ref[i])`` (``(T+1, nx)``, ``(T, nu, ndx)``).
          mu, delta: initial regularization state (default ``settings.mu_init``, 1).
          max_iterations: override of ``settings.max_iterations`` for this call.
          derivative_hint: optional ``(A (T, ndx, ndx), B (T, ndx, nu), rows)``: the first
            linearization differentiates only the steps ``rows`` and takes the other rows of
            ``A``, ``B`` from the hint (e.g. a previous MPC plan's Jacobians at the same times:
            :class:`~contactopt.mpc.ILQGPlanner`'s ``derivative_refresh``); later iterations
            differentiate every step.  Ignored by dynamics whose ``derivatives`` take no ``rows``.

        Returns:
          :class:`ILQGResult`.

        Raises:
          ShapeError / NonFiniteError / ParameterError: bad ``x0``, ``U_init``, gains.
          NonFiniteError: the cost is NaN on a finite trajectory (a broken cost term).
        """
        t_start = time.perf_counter()
        s = self.settings
        if max_iterations is not None and max_iterations != s.max_iterations:
            s = replace(s, max_iterations=max_iterations)
        x0 = as_array("x0", x0, (self.nx,))
        U0 = as_array("U_init", U_init, (None, self.nu))
        T = U0.shape[0]
        if T < 1:
            raise ParameterError("horizon must be at least one step (U_init has 0 rows)")
        if K is not None:
            K = as_array("K", K, (T, self.nu, self.ndx))
            if X_ref is None:
                raise ParameterError("X_ref is required with feedback gains K")
            X_ref = as_array("X_ref", X_ref, (T + 1, self.nx))
        mu = s.mu_init if mu is None else float(mu)
        delta = 1.0 if delta is None else float(delta)
        if not (math.isfinite(mu) and mu >= 0):
            raise ParameterError(f"mu must be finite and >= 0, got {mu!r}")
        if not (math.isfinite(delta) and delta > 0):
            raise ParameterError(f"delta must be finite and > 0, got {delta!r}")
        lo, hi = self.control_lower, self.control_upper
        bounded = bool(np.isfinite(lo).any() or np.isfinite(hi).any())
        U0 = np.clip(U0, lo, hi)
        dyn, cost = self.dynamics, self.cost
        zeros_K = np.zeros((T, self.nu, self.ndx))
        zeros_k = np.zeros((T, self.nu))

        roll = dyn.rollout(x0, U0, X_ref=X_ref, K=K, lower=lo, upper=hi)
        if roll.diverged:
            return ILQGResult(roll.X, U0, zeros_K, zeros_k, math.inf, ILQGStatus.DIVERGED, 0, (), mu, delta,
                              math.inf, time.perf_counter() - t_start, x0)
        X, U = roll.X, roll.U
        # The first iteration needs the cost derivatives of this trajectory anyway; where the cost
        # guarantees that their stage values sum to exactly total(X, U), they are evaluated now and
        # give J (one cost pass fewer per solve, the same numbers).
        # Dynamics that can differentiate in the background (MujocoDynamics.derivatives_async)
        # start on that meanwhile.
        hint_rows, hint_A, hint_B = None, None, None
        if derivative_hint is not None and self.accepts_derivative_hint:
            hint_A, hint_B, hint_rows = derivative_hint
            hint_A = as_array("derivative_hint A", hint_A, (T, self.ndx, self.ndx))
            hint_B = as_array("derivative_hint B", hint_B, (T, self.ndx, self.nu))
            hint_rows = np.unique(np.asarray(hint_rows, dtype=np.intp))
            if hint_rows.size and (hint_rows[0] < 0 or hint_rows[-1] >= T):
                raise ParameterError(f"derivative_hint rows must lie in [0, {T})")
        fd_kwargs = {} if hint_rows is None else {"rows": hint_rows}
        cd_first, t_cd_first, fd_first = None, 0.0, None
        if getattr(cost, "total_is_evaluate_sum", False):
            t0 = time.perf_counter()
            start_fd = getattr(dyn, "derivatives_async", None)
            if start_fd is not None:
                fd_first = start_fd(X, U, **fd_kwargs)
            try:
                cd_first = cost.evaluate(X, U)
                J = self._checked_total(float(cd_first.l.sum()))
            except BaseException:
                if fd_first is not None:
                    fd_first()
                raise
            t_cd_first = time.perf_counter() - t0
        else:
            J = self._total(X, U)
        J_init = J
        if not math.isfinite(J):
            if fd_first is not None:
                fd_first()
            return ILQGResult(X, U, zeros_K, zeros_k, J, ILQGStatus.DIVERGED, 0, (), mu, delta, J,
                              time.perf_counter() - t_start, x0)

        logs: list[ILQGIterationLog] = []
        k_last, K_last = zeros_k, zeros_K
        status = ILQGStatus.MAX_ITERATIONS
        need_derivatives = True
        lin = None
        for it in range(s.max_iterations):
            if s.time_limit is not None and time.perf_counter() - t_start > s.time_limit:
                status = ILQGStatus.TIME_LIMIT
                break
            # ---- 1. derivatives
            t0 = time.perf_counter()
            t_dyn = 0.0
            if need_derivatives:
                if cd_first is not None:     # evaluated (and the dynamics started) before the loop
                    t0 -= t_cd_first
                    A, B = fd_first() if fd_first is not None else dyn.derivatives(X, U, **fd_kwargs)
                    t_dyn = time.perf_counter() - t0
                    cd, cd_first, fd_first = cd_first, None, None
                else:
                    A, B = dyn.derivatives(X, U, **fd_kwargs)
                    t_dyn = time.perf_counter() - t0
                    cd = cost.evaluate(X, U)
                fresh = np.ones(T, dtype=bool)
                if hint_rows is not None:    # the first linearization: the other rows from the hint
                    fresh[:] = False
                    fresh[hint_rows] = True
                    A[~fresh] = hint_A[~fresh]
                    B[~fresh] = hint_B[~fresh]
                    hint_rows, fd_kwargs = None, {}
                if not (np.isfinite(A).all() and np.isfinite(B).all()):
                    status = ILQGStatus.DIVERGED
                    break
                if not _finite_derivatives(cd):
                    status = ILQGStatus.DIVERGED
                    break
                lin = _Linearization(A, B, cd, s.regularization is Regularization.STATE)
                lin.fresh = fresh
                need_derivatives = False
            t_der = time.perf_counter() - t0
            # ---- 2. backward pass with μ restarts
            t0 = time.perf_counter()
            du_lo = lo - U
            du_hi = hi - U
            restarts = 0
            while True:
                bp = _backward_pass(lin, mu, s, du_lo, du_hi, bounded, k_last)
                if bp.ok:
                    break
                restarts += 1
                mu, delta = self._increase(mu, delta)
                if mu > s.mu_max:
                    break
            t_bwd = time.perf_counter() - t0
            if not bp.ok:
                logs.append(ILQGIterationLog(it, J, J, 0.0, 0.0, mu, False, math.nan, restarts, 0,
                                         t_der, t_dyn, t_bwd, 0.0))
                status = ILQGStatus.REGULARIZATION_FAILED
                break
            k_last, K_last = bp.k, bp.K
            gnorm = float(np.mean(np.max(np.abs(bp.k) / (np.abs(U) + 1.0), axis=1)))
            expected_full = -(bp.dV1 + 0.5 * bp.dV2)
            if (gnorm < s.tol_grad or expected_full <= s.tol_cost * abs(J)) and mu <= s.mu_converged:
                logs.append(ILQGIterationLog(it, J, J, expected_full, 0.0, mu, False, gnorm, restarts, 0,
                                         t_der, t_dyn, t_bwd, 0.0))
                mu, delta = self._decrease(mu, delta)
                status = ILQGStatus.CONVERGED
                break
            # ---- 3. line search
            t0 = time.perf_counter()
            accepted = False
            trials = 0
            alpha = 0.0
            J_new = J
            expected = expected_full
            for a in s.line_search_steps:
                trials += 1
                expected_a = -(a * bp.dV1 + 0.5 * a * a * bp.dV2)
                trial = dyn.rollout(x0, U + a * bp.k, X_ref=X, K=bp.K, lower=lo, upper=hi)
                if trial.diverged:
                    continue
                Jt = self._total(trial.X, trial.U)
                if not math.isfinite(Jt):
                    continue
                if expected_a > 0:
                    z = (J - Jt) / expected_a
                else:
                    z = 1.0 if Jt < J else -1.0
                if z > s.c1:
                    accepted, alpha, J_new, expected = True, a, Jt, expected_a
                    X_new, U_new = trial.X, trial.U
                    break
            t_ls = time.perf_counter() - t0
            mu_used = mu
            if accepted:
                improvement = J - J_new
                X, U, J = X_new, U_new, J_new
                need_derivatives = True
                mu, delta = self._decrease(mu, delta)
                logs.append(ILQGIterationLog(it, J + improvement, J, expected, alpha, mu_used, True, gnorm,
                                         restarts, trials, t_der, t_dyn, t_bwd, t_ls))
                if alpha == s.line_search_steps[0] and improvement < s.tol_cost * abs(J + improvement):
                    status = ILQGStatus.CONVERGED
                    break
            else:
                mu, delta = self._increase(mu, delta)
                logs.append(ILQGIterationLog(it, J, J, expected_full, 0.0, mu_used, False, gnorm,
                                         restarts, trials, t_der, t_dyn, t_bwd, t_ls))
                if mu > s.mu_max:
                    status = ILQGStatus.LINE_SEARCH_FAILED
                    break
        if fd_first is not None:            # started but not used (time limit at the first iteration)
            fd_first()
        n = self.ndx
        lin_A, lin_B, lin_fresh = ((None, None, None) if lin is None
                                   else (lin.F[:, :, :n], lin.F[:, :, n:], lin.fresh))
        return ILQGResult(X, U, K_last, k_last, J, status, len(logs), tuple(logs), mu, delta, J_init,
                          time.perf_counter() - t_start, x0, lin_A, lin_B, lin_fresh)

    def solve_from_warm_start(self, x0, previous: ILQGResult, *, shift: float = 1.0,
                              feedback: bool = True, max_iterations: int | None = None,
                              derivative_hint=None) -> ILQGResult:
        """Re-plan from a new state, warm-started by a previous plan (receding horizon).

        The previous plan is shifted by ``shift`` steps (:func:`shift_plan`), rolled out
        from ``x0`` — under its feedback gains when ``feedback`` (``u_i = U_i + K_i (x_i ⊖
        X_i)``), open loop otherwise — and optimized starting from the previous μ and Δ (from
        ``settings.mu_init`` and Δ = 1 again when the previous solve gave up with μ beyond
        ``mu_max``).

        Args:
          x0: ``(nx,)`` current state.
          previous: an :class:`ILQGResult` of this solver (same horizon and sizes).
          shift: elapsed time since ``previous`` was planned, in planner steps (≥ 0).
          feedback: use the previous gains in the initial rollout.
          max_iterations: override of ``settings.max_iterations`` (e.g. 1 per MPC step).
          derivative_hint: see :meth:`solve` (rows already in the new plan's time frame).

        Returns:
          :class:`ILQGResult`.
        """
        if not isinstance(previous, ILQGResult):
            raise ParameterError(f"previous must be an ILQGResult, got {type(previous).__name__}")
        if not previous.ok:
            raise ParameterError("previous plan DIVERGED; start a fresh solve instead of warm-starting")
        X_ref, U, K = shift_plan(self.dynamics, previous.X, previous.U, previous.K if feedback else None,
                                 shift)
        mu, delta = previous.mu, previous.delta
        if not (math.isfinite(mu) and mu <= self.settings.mu_max and math.isfinite(delta) and delta > 0):
            # the previous solve gave up (μ beyond μ_max): its schedule would only grow further
            # (Δ doubles at every increase, so μ overflowed to inf after a streak of failed MPC
            # updates and every later warm start was refused); start the schedule again
            mu, delta = self.settings.mu_init, 1.0
        return self.solve(x0, U, X_ref=X_ref if feedback else None, K=K, mu=mu,
                          delta=delta, max_iterations=max_iterations,
                          derivative_hint=derivative_hint)

    # ------------------------------------------------------------------ helpers

    def _total(self, X, U) -> float:
        return self._checked_total(float(self.cost.total(X, U)))

    @staticmethod
    def _checked_total(J: float) -> float:
        if math.isnan(J):
            raise NonFiniteError("cost is NaN on a finite trajectory; check the cost terms")
        return J


def _takes_rows(dynamics) -> bool:
    """Whether ``dynamics.derivatives`` accepts ``rows=`` (differentiate a subset of steps)."""
    try:
        return "rows" in inspect.signature(dynamics.derivatives).parameters
    except (TypeError, ValueError):
        return False


def _finite_derivatives(cd: CostDerivatives) -> bool:
    return all(np.isfinite(a).all() for a in (cd.lx, cd.lu, cd.lxx, cd.luu, cd.lux))
