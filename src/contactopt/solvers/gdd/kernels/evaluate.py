"""Evaluation of the objective and its gradient at an acceleration, box terms, and the
Gauss-Newton Hessian.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .constants import FM, ROW_CONE, STATE_CONE
from .constraints import constraint_update, hs_mul
from .kkt import _mark_kinks
from .linalg import _dot, _gram_lower, _m_solve, _matTvec_add, _matvec, _smatvec, cholesky
from .workspace import _dims, _take, _take2

# ---------------------------------------------------------------- objective


@njit(cache=True, error_model="numpy")
def _box_psi(w, lo, hi, mu_lo, mu_hi, rho):
    """Σ_j ψ(w_j − hi_j, μ⁺_j) + ψ(lo_j − w_j, μ⁻_j), ψ(t, μ) = (max(0, μ + ρt)² − μ²)/(2ρ)."""
    val = 0.0
    for j in range(w.shape[0]):
        if np.isfinite(hi[j]):
            u = mu_hi[j] + rho[j] * (w[j] - hi[j])
            val += (max(0.0, u) ** 2 - mu_hi[j] ** 2) / (2.0 * rho[j])
        if np.isfinite(lo[j]):
            u = mu_lo[j] + rho[j] * (lo[j] - w[j])
            val += (max(0.0, u) ** 2 - mu_lo[j] ** 2) / (2.0 * rho[j])
    return val


@njit(cache=True, error_model="numpy")
def _box_nu(w, lo, hi, mu_lo, mu_hi, rho, nu, act):
    """``nu = dψ/dw``; ``act[j]`` = 1 (upper term on), −1 (lower term on), 0."""
    for j in range(w.shape[0]):
        nu[j] = 0.0
        act[j] = 0
        if np.isfinite(hi[j]):
            u = mu_hi[j] + rho[j] * (w[j] - hi[j])
            if u > 0.0:
                nu[j] += u
                act[j] = 1
        if np.isfinite(lo[j]):
            u = mu_lo[j] + rho[j] * (lo[j] - w[j])
            if u > 0.0:
                nu[j] -= u
                act[j] = -1


@njit(cache=True, fastmath=FM, error_model="numpy")
def _cost_jacobian(pb, wk):
    """``K2 = Ka2 − Kf2 H[s] J``: Jacobian of the force-dependent cost residual."""
    m2 = pb.Ka2.shape[0]
    nv = pb.Ka2.shape[1]
    nefc = pb.J.shape[0]
    for r in range(m2):
        for i in range(nefc):
            wk.tmp_efc[i] = pb.Kf2[r, i]
        hs_mul(wk.tmp_efc, pb.kind, pb.cdim, wk.state, wk.hdiag, wk.hcone, wk.tmp_efc2)
        for k in range(nv):
            wk.K2[r, k] = pb.Ka2[r, k]
        for i in range(nefc):
            s = wk.tmp_efc2[i]
            if s != 0.0:
                for k in range(nv):
                    wk.K2[r, k] -= s * pb.J[i, k]


@njit(cache=True, fastmath=FM, error_model="numpy")
def _evaluate(pb, wk, a, lam, mu_lo, mu_hi):
    """Objective, cost and gradient at ``a``; fills the work arrays. Returns ``(L, ℓ)``."""
    nv = a.shape[0]
    nefc = pb.J.shape[0]
    _matvec(pb.J, a, wk.jar)
    for i in range(nefc):
        wk.jar[i] -= pb.aref[i]
    constraint_update(wk.jar, pb.D, pb.R, pb.floss, pb.kind, pb.cdim, pb.cmu, pb.cfric,
                      wk.f, wk.state, wk.hdiag, wk.hcone)
    _mark_kinks(pb, wk)
    # g = M a + c − Jᵀ f ;  y = M⁻¹ g
    _matvec(pb.M, a, wk.g)
    for k in range(nv):
        wk.g[k] += pb.c[k]
    _matTvec_add(pb.J, wk.f, wk.g, -1.0)
    _m_solve(pb, wk.g, wk.y)
    _matvec(pb.Q, a, wk.Qa)  # (kept for the gradient)
    return _evaluation_tail(pb, wk, a, lam, mu_lo, mu_hi)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _evaluation_tail(pb, wk, a, lam, mu_lo, mu_hi):
    """The end of :func:`_evaluate` and :func:`_evaluate_step`, from ``g``, ``y = M⁻¹g``, ``Q a``
    and the forces at ``a``: ``h = Ceq g``, ``w = Cbox g``, the objective, the cost
    ``ℓ = ½ aᵀQa + qᵀa + ½‖Ka2 a + Kf2 f + e2‖²`` and the gradient.  Returns ``(L, ℓ)``."""
    nv = a.shape[0]
    nefc = pb.J.shape[0]
    m2 = pb.Ka2.shape[0]
    _smatvec(pb.Ceq, pb.ce_idx, pb.ce_nnz, wk.g, wk.h)
    _smatvec(pb.Cbox, pb.cb_idx, pb.cb_nnz, wk.g, wk.w)
    phi = 0.5 * _dot(wk.g, wk.y) + _constraint_terms(pb, wk, lam, mu_lo, mu_hi)
    ell = 0.5 * _dot(a, wk.Qa) + _dot(pb.q, a)
    for r in range(m2):
        s = pb.e2[r]
        for k in range(nv):
            s += pb.Ka2[r, k] * a[k]
        for i in range(nefc):
            s += pb.Kf2[r, i] * wk.f[i]
        wk.r2[r] = s
        ell += 0.5 * s * s
    phi += ell
    # ∇_g L = y + Ceqᵀ(λ + ρ h) + Cboxᵀ ν
    _lagrangian_gradient(pb, wk, a, lam)
    return phi, ell


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _evaluate_step(pb, wk, a, alpha, Jd, g1, y1, Qd, lam, mu_lo, mu_hi):
    """:func:`_evaluate` at ``a`` = the previous point + ``α d``, when the constraint rows kept
    their states on the open segment (the line search crossed no breakpoint, no row pinned):
    there ``f`` is affine in ``α``, so ``jar``, ``g = M a + c − Jᵀ f``, ``y = M⁻¹ g`` and ``Q a``
    move by ``α`` times their slopes ``J d``, ``g1 = P d``, ``y1 = M⁻¹ g1`` and ``Q d`` (from
    :func:`_linesearch_sweep`) — no matrix product and no solve with ``M``.  The states and
    forces are recomputed from the new ``jar`` and everything else as in :func:`_evaluate`.
    Returns ``(L, ℓ)``."""
    nv = a.shape[0]
    nefc = pb.J.shape[0]
    for i in range(nefc):
        wk.jar[i] += alpha * Jd[i]
    constraint_update(wk.jar, pb.D, pb.R, pb.floss, pb.kind, pb.cdim, pb.cmu, pb.cfric,
                      wk.f, wk.state, wk.hdiag, wk.hcone)
    _mark_kinks(pb, wk)
    for k in range(nv):
        wk.g[k] += alpha * g1[k]
        wk.y[k] += alpha * y1[k]
        wk.Qa[k] += alpha * Qd[k]
    return _evaluation_tail(pb, wk, a, lam, mu_lo, mu_hi)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _reevaluate_multipliers(pb, wk, a, lam, mu_lo, mu_hi, ell):
    """Objective and gradient after the multipliers changed (a, g, f and ℓ unchanged)."""
    phi = 0.5 * _dot(wk.g, wk.y) + ell + _constraint_terms(pb, wk, lam, mu_lo, mu_hi)
    _lagrangian_gradient(pb, wk, a, lam)
    return phi


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _constraint_terms(pb, wk, lam, mu_lo, mu_hi):
    """Augmented-Lagrangian terms of the constraints at the current ``h = Ceq g``, ``w = Cbox g``:
    ``Σ_e λ_e h_e + ½ ρ_e h_e²`` plus the box penalty ψ; updates the box multipliers ``ν``."""
    _box_nu(wk.w, pb.lo, pb.hi, mu_lo, mu_hi, pb.rho_b, wk.nu, wk.bact)
    total = 0.0
    for e in range(pb.Ceq.shape[0]):
        total += lam[e] * wk.h[e] + 0.5 * pb.rho_e[e] * wk.h[e] * wk.h[e]
    return total + _box_psi(wk.w, pb.lo, pb.hi, mu_lo, mu_hi, pb.rho_b)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _lagrangian_gradient(pb, wk, a, lam):
    """``∇_g L`` (:func:`_gradient_in_g`), then the gradient in ``a`` (:func:`_eval_gradient`)."""
    _gradient_in_g(pb, wk, lam)
    _eval_gradient(pb, wk, a)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _reevaluate_multipliers_piece(pb, wk, a, lam, mu_lo, mu_hi, ell):
    """:func:`_reevaluate_multipliers` when ``wk.P`` is ``P = ∂g/∂a`` at ``a`` (built by
    :func:`_build_hessian` at this ``a``: with elliptic cones it depends on ``a``, not only on
    the states).  With ``a`` fixed only ``∇_g L`` changes, and
    ``∇L = P ∇_g L + …`` moves by ``P Δ(∇_g L)``; the change is nonzero on the columns of the
    constraint rows only — no product with ``M`` and ``J``."""
    nv = a.shape[0]
    phi = 0.5 * _dot(wk.g, wk.y) + ell + _constraint_terms(pb, wk, lam, mu_lo, mu_hi)
    old = wk.tmp_nv
    for k in range(nv):
        old[k] = wk.gradg[k]
    _gradient_in_g(pb, wk, lam)
    P = wk.P
    for k in range(nv):
        dk = wk.gradg[k] - old[k]
        if dk != 0.0:
            for r in range(nv):
                wk.grad[r] += P[k, r] * dk  # (P symmetric: its row k is its column k)
    return phi


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _gradient_in_g(pb, wk, lam):
    """``∇_g L = y + Ceqᵀ(λ + ρ h) + Cboxᵀ ν`` into ``wk.gradg`` (sparse rows)."""
    nv = wk.gradg.shape[0]
    for k in range(nv):
        wk.gradg[k] = wk.y[k]
    for e in range(pb.Ceq.shape[0]):
        s = lam[e] + pb.rho_e[e] * wk.h[e]
        for p in range(pb.ce_nnz[e]):
            k = pb.ce_idx[e, p]
            wk.gradg[k] += pb.Ceq[e, k] * s
    for j in range(pb.Cbox.shape[0]):
        s = wk.nu[j]
        if s != 0.0:
            for p in range(pb.cb_nnz[j]):
                k = pb.cb_idx[j, p]
                wk.gradg[k] += pb.Cbox[j, k] * s


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _eval_gradient(pb, wk, a):
    """``∇L = P ∇_g L + Q a + q + K2ᵀ r2`` with ``P z = M z + Jᵀ H (J z)`` for the current states
    (``wk.Qa``: ``Q a``, from :func:`_evaluate`)."""
    nv = a.shape[0]
    m2 = pb.Ka2.shape[0]
    _matvec(pb.M, wk.gradg, wk.grad)
    _matvec(pb.J, wk.gradg, wk.tmp_efc)
    hs_mul(wk.tmp_efc, pb.kind, pb.cdim, wk.state, wk.hdiag, wk.hcone, wk.tmp_efc2)
    _matTvec_add(pb.J, wk.tmp_efc2, wk.grad, 1.0)
    for k in range(nv):
        wk.grad[k] += wk.Qa[k] + pb.q[k]
    if m2 > 0:
        _cost_jacobian(pb, wk)
        _matTvec_add(wk.K2, wk.r2, wk.grad, 1.0)


@njit(cache=True, error_model="numpy")
def _probe_states(pb, wk, a, d, Jd):
    """Take the constraint states (and H[s]) just ahead along ``d`` and redo the gradient.

    At a kink the states at ``a`` describe only one side; the Newton direction
    built from them may be blocked.  The states at ``a + ε d`` describe the side
    the direction enters (used with elliptic cones, whose zone boundaries are not pinned).
    """
    nefc = pb.J.shape[0]
    an = math.sqrt(_dot(a, a))
    dn = math.sqrt(_dot(d, d))
    if dn == 0.0:
        return
    eps = 1e-7 * (1.0 + an) / dn
    jp, o = _take(wk.scr, 0, nefc)
    fp, o = _take(wk.scr, o, nefc)
    for i in range(nefc):
        jp[i] = wk.jar[i] + eps * Jd[i]
    constraint_update(jp, pb.D, pb.R, pb.floss, pb.kind, pb.cdim, pb.cmu, pb.cfric,
                      fp, wk.state, wk.hdiag, wk.hcone)
    _eval_gradient(pb, wk, a)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _scaled_row_times(ZT, col, sr, C, idx, nnz, r, P):
    """``ZT[:, col] = sr · C_r P``, the row ``r`` of ``C`` (nonzeros ``idx[r, :nnz[r]]``) times
    the symmetric ``P``."""
    nv = ZT.shape[0]
    for k in range(nv):
        ZT[k, col] = 0.0
    for p in range(nnz[r]):
        t = idx[r, p]
        cv = sr * C[r, t]
        for k in range(nv):
            ZT[k, col] += cv * P[t, k]


@njit(cache=True, fastmath=FM, error_model="numpy")
def _build_hessian(pb, wk):
    """Gauss-Newton Hessian ``Pᵀ S P + Q + K2ᵀK2`` (eq. 18 with the AL terms), factored into LH.

    ``S = M⁻¹ + Ceqᵀ diag(ρ_e) Ceq + Cboxᵀ diag(ρ_b · on) Cbox``; ``Pᵀ M⁻¹ P = XᵀX``
    with ``X = D^(−½) L⁻ᵀ P`` (``M = Lᵀ D L``, :func:`ldl_factor`: row axpys over the
    factor's nonzeros, no explicit inverse).  Returns False if
    the factorization fails even after a small relative diagonal shift.
    """
    M = pb.M
    J = pb.J
    nv, nefc, nz, nb, m2 = _dims(pb)
    P = wk.P
    Hm = wk.Hm
    # P = M + Jᵀ H J.  The rows with a diagonal H (all but elliptic cones) as the Gram matrix
    # of the rows √h_i J_i: stored transposed (JT, nv × rows, in the scratch that the later
    # steps take in turn), the lower triangle by _gram_lower, then mirrored.
    JT = _take2(wk.scr, 0, nv, nefc)[0]
    na = 0
    i = 0
    while i < nefc:
        if pb.kind[i] == ROW_CONE and wk.state[i] == STATE_CONE:
            i += pb.cdim[i]
            continue
        hi_ = wk.hdiag[i]
        if hi_ > 0.0:
            sh = math.sqrt(hi_)
            for k in range(nv):
                JT[k, na] = sh * J[i, k]
            na += 1
        i += 1
    _gram_lower(M, JT, na, P)
    for r in range(nv):
        for k in range(r):
            P[k, r] = P[r, k]
    # elliptic cones in their cone state: dense blocks over the rows' nonzero columns
    i = 0
    while i < nefc:
        if pb.kind[i] == ROW_CONE and wk.state[i] == STATE_CONE:
            dim = pb.cdim[i]
            nnz = pb.jnnz[i]
            for r in range(dim):
                for cc in range(dim):
                    hrc = wk.hcone[i, r, cc]
                    if hrc != 0.0:
                        for p in range(nnz):
                            kp = pb.jnz[i, p]
                            jp = J[i + r, kp] * hrc
                            for pp in range(nnz):
                                kq = pb.jnz[i, pp]
                                P[kp, kq] += jp * J[i + cc, kq]
            i += dim
            continue
        i += 1
    # Hm = Q + ZᵀZ with the rows of Z: X = D^(−½) L⁻ᵀ P (nv rows; P M⁻¹ P = XᵀX since P is
    # symmetric), √ρ_e Ceq_e P, √ρ_j Cbox_j P (box terms on) and the rows of K2.  Z is stored
    # transposed (ZT, nv × rows); Hm_rk = Q_rk + ZT_r · ZT_k (contiguous dot products of
    # length "rows": _gram_lower).  Only the lower triangle of Hm is formed (all the
    # Cholesky factor reads).
    ZT = wk.Z
    X = wk.LH  # scratch until the factorization below
    for t in range(nv):
        for k in range(nv):
            X[t, k] = P[t, k]
    rn = pb.Lrn
    ra = pb.Lra
    ci = pb.Lci
    lq = pb.Lq
    for t in range(nv - 1, -1, -1):  # Lᵀ X = P: row t scatters into the rows of its columns
        adr = ra[t]
        for p in range(rn[t] - 1):
            j = ci[adr + p]
            lt = lq[adr + p]
            for k in range(nv):
                X[j, k] -= lt * X[t, k]
    for t in range(nv):
        sd = math.sqrt(pb.Ldi[t])
        for k in range(nv):
            ZT[k, t] = sd * X[t, k]
    ncol = nv
    for e in range(nz):
        _scaled_row_times(ZT, ncol, math.sqrt(pb.rho_e[e]), pb.Ceq, pb.ce_idx, pb.ce_nnz, e, P)
        ncol += 1
    for j in range(nb):
        if wk.bact[j] != 0:
            _scaled_row_times(ZT, ncol, math.sqrt(pb.rho_b[j]), pb.Cbox, pb.cb_idx, pb.cb_nnz, j, P)
            ncol += 1
    for q_ in range(m2):
        for k in range(nv):
            ZT[k, ncol] = wk.K2[q_, k]
        ncol += 1
    _gram_lower(pb.Q, ZT, ncol, Hm)
    if cholesky(Hm, wk.LH):
        return True
    scale = 0.0
    for r in range(nv):
        scale = max(scale, abs(Hm[r, r]))
    for attempt in range(3):
        shift = scale * 1e-12 * (100.0 ** attempt)
        for r in range(nv):
            Hm[r, r] += shift
        if cholesky(Hm, wk.LH):
            return True
    return False
