"""A plain NumPy/SciPy reference solve of goal-directed dynamics (for tests, not for speed).

The compiled solver (:mod:`contactopt.solvers.gdd.solver`, kernels in ``kernels``) solves,
at one state (q, v)::

    a* = argmin_a  F(a) = ½ g(a)ᵀ M⁻¹ g(a) + ℓ(a)
         s.t.      Zᵀ g(a) = 0                   (nz rows: no force on unactuated directions)
                   lo ≤ C g(a) ≤ hi               (nb rows of B⁺ with a finite bound)

with shapes ``a, g, c (nv,)``, ``M (nv, nv)``, ``J (nefc, nv)``, ``Zᵀ (nz, nv)``,
``C (nb, nv)``, and

* ``g(a) = M a + c − Jᵀ f(a)``: MuJoCo's inverse dynamics, ``f(a) (nefc,)`` the soft
  constraint force (:meth:`GDDProblem.constraint_force`), piecewise affine in ``a`` for
  pyramidal cones, so ``g`` is piecewise affine with derivative ``P = M − Jᵀ ∂f/∂a``;
* ``ℓ(a)``: the weighted cost terms (:meth:`Cost.term_models` → :meth:`TermModel.evaluate`),
  piecewise quadratic, Hessian ``H_ℓ`` exact inside a piece.

Hence ``∇F = Pᵀ M⁻¹ g + ∇ℓ`` and, inside a piece (constraint states fixed),
``∇²F = Pᵀ M⁻¹ P + H_ℓ`` exactly: F is piecewise quadratic and the constraints piecewise
affine.  This module solves it in two readable phases:

1. ``scipy.optimize.minimize(method="SLSQP")`` with the exact gradient and constraint
   Jacobians (``Zᵀ P`` and ``± C P``) from the passive acceleration ``data.qacc``;
2. an active-set Newton polish: with the current piece and the set ``A`` of box rows at
   a bound, solve the KKT system of the piece's equality-constrained quadratic::

       [ ∇²F   Gᵀ ] [ d ]   [ −∇F        ]      G = [Zᵀ; C_A] P      (nz + |A|, nv)
       [ G     0  ] [ ν ] = [ −(r(a))    ]      r = [Zᵀ g; C_A g − b_A]

   step ``a ← a + d`` (exact while the piece holds), drop rows whose multiplier has the
   wrong sign, add violated rows, and stop when the step is below ``tol · max(1, ‖a‖)``
   with a stable active set.

Limitation: F is only piecewise smooth (its gradient jumps where a constraint row changes
state) and not convex across pieces; the kink handling above is a plain active-set rule and
may cycle or stop at a worse kink point on some contact-rich states (``ParameterError`` when
it cycles).  Use it as a cross-check, not as ground truth where the two disagree.

The control is then that of the solver: ``w = B⁺ g(a*)`` and, for the controllable
actuators, ``ctrl = clip((w − bias)/gain, ctrl_lo, ctrl_hi)`` (others keep ``data.ctrl``).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
import scipy.linalg
import scipy.optimize

from ...errors import ParameterError
from .costs import AccelerationTerm, Cost
from .problem import ActuationModel, GDDProblem

__all__ = ["ReferenceResult", "solve_reference"]


@dataclass(frozen=True)
class ReferenceResult:
    """Reference solution: ``qacc (nv,)`` a*, ``qfrc (nv,)`` g(a*), ``ctrl (nu,)``, ``objective`` F(a*).

    ``polish_iterations``: Newton steps of phase 2; ``active``: ``(nb,)`` −1/0/+1 for box rows
    at their lower bound / free / at their upper bound.
    """

    qacc: np.ndarray
    qfrc: np.ndarray
    ctrl: np.ndarray
    objective: float
    polish_iterations: int = 0
    active: np.ndarray | None = None


class _Objective:
    """F, ∇F, ∇²F, g and P at an acceleration (one evaluation cached)."""

    def __init__(self, problem: GDDProblem, cost: Cost):
        self.p = problem
        self.models = [tm for _, tm in cost.term_models(problem)]
        self.chol = scipy.linalg.cho_factor(problem.M)
        self._key = None

    def __call__(self, a):
        a = np.asarray(a, dtype=float)
        if self._key is not None and np.array_equal(a, self._key):
            return self._val
        p = self.p
        if p.nefc:
            f, dfda = p.constraint_force(a, jacobian=True)
        else:
            f, dfda = np.zeros(0), np.zeros((0, p.nv))
        g = p.M @ a + p.c - p.J.T @ f
        P = p.M - p.J.T @ dfda                       # ∂g/∂a (nv, nv)
        Rg = scipy.linalg.cho_solve(self.chol, g)    # M⁻¹ g
        val = 0.5 * g @ Rg
        grad = P.T @ Rg
        hess = P.T @ scipy.linalg.cho_solve(self.chol, P)
        for tm in self.models:
            v, gr, h = tm.evaluate(p, a)
            val, grad, hess = val + v, grad + gr, hess + h
        self._key = a.copy()
        self._val = (float(val), grad, 0.5 * (hess + hess.T), g, P)
        return self._val


def solve_reference(model: mujoco.MjModel, data: mujoco.MjData, cost, *, tol: float = 1e-12,
                    max_polish: int = 50, rho: float = 1e4, max_outer: int = 50) -> ReferenceResult:
    """Solve goal-directed dynamics at ``data``'s state with SLSQP + an active-set Newton polish.

    Runs ``mj_fwdPosition`` + ``mj_fwdVelocity`` on ``data`` (as ``GDDSolver.solve`` does with
    ``compute_stages=True``); nothing else in ``data`` is changed.  See the module docstring.

    Args:
      model, data: the MuJoCo model and the state (pyramidal cones give the exact piecewise
        quadratic that phase 2 relies on).
      cost: a :class:`Cost` or a single :class:`AccelerationTerm`.
      tol: relative step size at which the Newton polish stops.
      max_polish: Newton steps allowed in phase 2.

    Returns:
      :class:`ReferenceResult`.

    Raises:
      ParameterError: a bad cost, or the polish did not settle on an active set.
    """
    if isinstance(cost, AccelerationTerm):
        cost = Cost(cost)
    if not isinstance(cost, Cost):
        raise ParameterError(f"cost must be a Cost or an AccelerationTerm, got {type(cost).__name__}")
    mujoco.mj_fwdPosition(model, data)
    mujoco.mj_fwdVelocity(model, data)
    am = ActuationModel(model)
    problem = GDDProblem(model, data, am)
    act = problem.actuation
    Zt, C, lo, hi = act.Zt, act.Cbox, act.lo, act.hi
    F = _Objective(problem, cost)
    a0 = np.array(data.qacc, dtype=float)
    if not np.isfinite(a0).all():
        a0[:] = 0.0

    # -- phase 1: augmented Lagrangian, each inner problem by Newton steps with backtracking.
    # Rows on g: h = Zᵀ g = 0 and t = [C g − hi; lo − C g] ≤ 0 (infinite bounds dropped).
    up, dn = np.flatnonzero(np.isfinite(hi)), np.flatnonzero(np.isfinite(lo))
    T = np.vstack((C[up], -C[dn]))
    tb = np.concatenate((hi[up], -lo[dn]))
    Minv = scipy.linalg.cho_solve(F.chol, np.eye(problem.nv))
    # penalty per row n: rho · nᵀM⁻¹n (the M⁻¹ metric of F on that force direction)
    rz = rho / np.maximum(np.einsum("ij,jk,ik->i", Zt, Minv, Zt), 1e-300)
    rt = rho / np.maximum(np.einsum("ij,jk,ik->i", T, Minv, T), 1e-300)
    lam, mu = np.zeros(Zt.shape[0]), np.zeros(T.shape[0])

    def merit(a):
        val, grad, hess, g, P = F(a)
        h, s = Zt @ g, np.maximum(0.0, mu + rt * (T @ g - tb))
        L = val + lam @ h + 0.5 * (rz * h) @ h + 0.5 * (s @ (s / rt) - mu @ (mu / rt))
        GZ, GT = Zt @ P, T[s > 0] @ P
        dL = grad + GZ.T @ (lam + rz * h) + GT.T @ s[s > 0]
        d2L = hess + GZ.T @ (rz[:, None] * GZ) + GT.T @ (rt[s > 0, None] * GT)
        return L, dL, d2L, h, T @ g - tb

    a, last, stiffened = a0, np.inf, 0
    for _ in range(max_outer):
        for _ in range(200):
            L, dL, d2L, _, _ = merit(a)
            d = -scipy.linalg.solve(d2L, dL, assume_a="pos")
            step, slope = 1.0, dL @ d
            while merit(a + step * d)[0] > L + 1e-4 * step * slope and step > 1e-12:
                step *= 0.5  # (a stall here means a sits on a kink: phase 2 handles it)
            a = a + step * d
            if np.linalg.norm(step * d) <= 1e-13 * max(1.0, np.linalg.norm(a)):
                break
        _, _, _, h, t = merit(a)
        lam, mu = lam + rz * h, np.maximum(0.0, mu + rt * t)
        viol = max(np.abs(h).max(initial=0.0), t.max(initial=0.0))
        if viol <= 1e-10 * max(1.0, np.abs(F(a)[3]).max()) or stiffened > 3:
            break
        if viol > 0.25 * last:  # slow progress: stiffen the penalty (standard AL safeguard)
            rz, rt, stiffened = 10.0 * rz, 10.0 * rt, stiffened + 1
        last = viol

    # -- phase 2: active-set Newton on the KKT system of the current piece.  Besides the box
    # rows at a bound, the set holds "kink" rows K: inequality constraint rows (limits,
    # pyramidal contacts) pinned at J_i a = aref_i, where F's gradient jumps (the optimum
    # may sit on such a breakpoint; on the kink F is one smooth quadratic).
    J, aref = problem.J, problem.aref
    ineq = (problem.efc_type >= int(mujoco.mjtConstraint.mjCNSTR_LIMIT_JOINT)) & (
        problem.efc_type != int(mujoco.mjtConstraint.mjCNSTR_CONTACT_ELLIPTIC))
    jscale = np.abs(J).sum(axis=1) * max(1.0, np.abs(a).max()) + np.abs(aref) + 1.0
    kink = ineq & (np.abs(J @ a - aref) <= 1e-8 * jscale)
    span = np.where(np.isfinite(hi - lo), hi - lo, 1.0)
    active = np.zeros(C.shape[0], dtype=int)
    active[up[mu[:up.size] > 0]] = 1
    active[dn[mu[up.size:] > 0]] = -1
    nz = Zt.shape[0]
    for it in range(1, max_polish + 1):
        _, grad, hess, g, P = F(a)
        rows, kr = np.flatnonzero(active), np.flatnonzero(kink)
        bnd = np.where(active[rows] > 0, hi[rows], lo[rows])
        G = np.vstack((Zt @ P, C[rows] @ P, J[kr]))    # (nz + |A| + |K|, nv)
        r = np.concatenate((Zt @ g, C[rows] @ g - bnd, J[kr] @ a - aref[kr]))
        m = G.shape[0]
        kkt = np.block([[hess, G.T], [G, np.zeros((m, m))]])
        d = np.linalg.lstsq(kkt, -np.concatenate((grad, r)), rcond=None)[0][:a.size]
        # walk to the first breakpoint of a row outside K (the model is exact up to it)
        j0, j1 = J @ a - aref, J @ (a + d) - aref
        cross = np.flatnonzero(ineq & ~kink & (np.sign(j0) * np.sign(j1) < 0))
        if cross.size:
            alpha = j0[cross] / (j0[cross] - j1[cross])
            k = int(np.argmin(alpha))
            a = a + alpha[k] * d
            kink[cross[k]] = True
            continue
        a = a + d
        _, grad, _, g, P = F(a)
        rows, kr = np.flatnonzero(active), np.flatnonzero(kink)
        G = np.vstack((Zt @ P, C[rows] @ P, J[kr]))
        nu = np.linalg.lstsq(G.T, -grad, rcond=None)[0]
        # box multipliers: an upper-bound row needs ν ≥ 0, a lower-bound row ν ≤ 0
        small = 1e-10 * max(1.0, np.abs(nu).max(initial=0.0))
        wrong = rows[active[rows] * nu[nz:nz + rows.size] < -small]
        # kink multipliers: moving to either side must not descend, for each side's gradient
        release = np.zeros(kr.size, dtype=bool)
        for n, i in enumerate(kr):
            for side in (-1.0, 1.0):
                e = side * 1e-7 * jscale[i] * J[i] / (J[i] @ J[i])
                _, gs, hs, _, _ = F(a + e)
                nus = np.linalg.lstsq(G.T, -(gs - hs @ e), rcond=None)[0][nz + rows.size + n]
                release[n] |= side * nus > small  # ∂L along +side·J_iᵀ is −side·ν
        w = C @ g
        viol_hi = (active == 0) & (w > hi + 1e-12 * span)
        viol_lo = (active == 0) & (w < lo - 1e-12 * span)
        changed = wrong.size or viol_hi.any() or viol_lo.any() or release.any()
        active[wrong] = 0
        active[viol_hi], active[viol_lo] = 1, -1
        kink[kr[release]] = False
        if not changed and np.linalg.norm(d) <= tol * max(1.0, np.linalg.norm(a)):
            break
    else:
        raise ParameterError(f"reference polish did not converge in {max_polish} Newton steps")

    val, _, _, g, _ = F(a)
    ctrl = np.array(data.ctrl, dtype=float)
    u = (act.Bpinv @ g - act.bias) / act.gain
    ctrl[am.controllable] = np.clip(u, act.ctrl_lo, act.ctrl_hi)
    return ReferenceResult(a, g, ctrl, val, it, active)
