"""The KKT step on the face of the active box constraints: kinks, face step, release, and
the multiplier (dual) Newton update.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .constants import (
    FM,
    ROW_FRICTION,
    ROW_ONESIDED,
    STATE_LINEARNEG,
    STATE_LINEARPOS,
    STATE_QUADRATIC,
    STATE_SATISFIED,
)
from .linalg import (
    _bwd_solve,
    _dot,
    _fwd_solve,
    _gram_lower,
    _lower_solve_rhs_rows,
    _lower_solve_rows,
    chol_solve,
    cholesky,
)
from .workspace import _fill, _take, _take2

KINK_TOL = 1e-10


@njit(cache=True, inline="always", error_model="numpy")
def _mark_kinks(pb, wk):
    """Find rows sitting on a breakpoint of ``s`` and give them a definite state.

    A one-sided row at ``jar = 0`` or a friction-loss row at ``jar = ±R·floss``
    (within ``KINK_TOL`` relative) is a *kink*: the objective is not
    differentiable there.  The row is snapped onto the breakpoint and, unless it
    was released to a side (``wk.release``), *pinned* (``wk.kink = σ_b``) in its
    zero-Hessian ("base") state: satisfied, or the linear friction state; ``σ_b``
    is the sign of ``jar − θ`` on that side.  Released rows take the state of
    their side; a release is forgotten once the row leaves the breakpoint.
    """
    nk = 0
    for i in range(pb.J.shape[0]):
        wk.kink[i] = 0
        k = pb.kind[i]
        if k == ROW_ONESIDED:
            theta = 0.0
            sb = 1
        elif k == ROW_FRICTION:
            rf = pb.R[i] * pb.floss[i]
            if wk.jar[i] >= 0.0:
                theta = rf
                sb = 1
            else:
                theta = -rf
                sb = -1
        else:
            continue
        x = wk.jar[i]
        tol = KINK_TOL * (1.0 + abs(pb.aref[i]) + abs(x + pb.aref[i]))
        if abs(x - theta) > tol:
            wk.release[i] = 0
            continue
        wk.jar[i] = theta
        side = wk.release[i]
        if side == 0 or side == sb:
            # base state (zero Hessian)
            wk.hdiag[i] = 0.0
            if k == ROW_ONESIDED:
                wk.state[i] = STATE_SATISFIED
                wk.f[i] = 0.0
            elif sb > 0:
                wk.state[i] = STATE_LINEARPOS
                wk.f[i] = -pb.floss[i]
            else:
                wk.state[i] = STATE_LINEARNEG
                wk.f[i] = pb.floss[i]
            if side == 0:
                wk.kink[i] = sb
                nk += 1
        else:
            wk.hdiag[i] = pb.D[i]
            wk.state[i] = STATE_QUADRATIC
            wk.f[i] = -pb.D[i] * theta
    wk.nk[0] = nk


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _pinned(wk):
    """Indices of the pinned (kink) rows: a view of ``wk.kidx``."""
    nk = wk.nk[0]
    idx = wk.kidx[:nk]
    c = 0
    for i in range(wk.kink.shape[0]):
        if wk.kink[i] != 0:
            idx[c] = i
            c += 1
    return idx


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _pinned_system(pb, wk, kidx, X, S):
    """``X = L⁻¹ J_Kᵀ`` ``(nv, nk)`` for the pinned rows ``K = kidx`` (``L``: the Hessian's factor
    ``wk.LH``) and ``S += XᵀX = J_K H⁻¹ J_Kᵀ`` ``(nk, nk)``; ``X`` is zero on entry."""
    nv = X.shape[0]
    nk = kidx.shape[0]
    for c in range(nk):
        for k in range(nv):
            X[k, c] = pb.J[kidx[c], k]
    _lower_solve_rows(wk.LH, X)
    for t in range(nv):
        for r in range(nk):
            xr = X[t, r]
            for c in range(nk):
                S[r, c] += xr * X[t, c]


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _shift_diagonal(S):
    """``S += (10⁻¹² max_r S_rr + 10⁻³⁰⁰) I``, the regularization of a Gram matrix of possibly
    dependent rows before its factorization; returns ``max_r S_rr``."""
    tr = 0.0
    for r in range(S.shape[0]):
        tr = max(tr, S[r, r])
    for r in range(S.shape[0]):
        S[r, r] += 1e-12 * tr + 1e-300
    return tr


@njit(cache=True, fastmath=FM, error_model="numpy")
def _face_step(pb, wk, kidx, d, nu):
    """Newton step restricted to the face ``J_K d = 0`` of the pinned rows K.

    ``d = −H⁻¹(∇L + J_Kᵀν)`` with ``(J_K H⁻¹ J_Kᵀ) ν = −J_K H⁻¹ ∇L`` (slightly
    regularized: the rows of one pyramid are linearly dependent).  Returns the
    norm of the face gradient ``∇L + J_Kᵀν``.
    """
    nv = d.shape[0]
    nk = kidx.shape[0]
    X, o = _take2(wk.scr, 0, nv, nk)
    y, o = _take(wk.scr, o, nv)
    S, o = _take2(wk.scr, o, nk, nk)
    rhs, o = _take(wk.scr, o, nk)
    LS, o = _take2(wk.scr, o, nk, nk)
    G, o = _take2(wk.scr, o, nk, nk)
    r_, o = _take(wk.scr, o, nk)
    LG, o = _take2(wk.scr, o, nk, nk)
    _fill(wk.scr[:o], 0.0)
    _pinned_system(pb, wk, kidx, X, S)
    _fwd_solve(wk.LH, wk.grad, y)
    for t in range(nv):
        yt = y[t]
        for r in range(nk):
            rhs[r] -= X[t, r] * yt
    tr = _shift_diagonal(S)
    if not cholesky(S, LS):
        for r in range(nk):
            S[r, r] += 1e-8 * tr
        cholesky(S, LS)
    chol_solve(LS, rhs, nu)
    for k in range(nv):
        s = y[k]
        for c in range(nk):
            s += X[k, c] * nu[c]
        d[k] = -s
    _bwd_solve(wk.LH, d)
    # remove the residual component off the face exactly: d ← d − J_Kᵀ(J_K J_Kᵀ)⁻¹ J_K d
    for a_ in range(nk):
        ia = kidx[a_]
        s = 0.0
        for k in range(nv):
            s += pb.J[ia, k] * d[k]
        r_[a_] = s
        for b_ in range(nk):
            ib = kidx[b_]
            s = 0.0
            for k in range(nv):
                s += pb.J[ia, k] * pb.J[ib, k]
            G[a_, b_] = s
    _shift_diagonal(G)
    if cholesky(G, LG):
        chol_solve(LG, r_, r_)
        for a_ in range(nk):
            ia = kidx[a_]
            for k in range(nv):
                d[k] -= pb.J[ia, k] * r_[a_]
    fg2 = 0.0
    for k in range(nv):
        s = wk.grad[k]
        for c in range(nk):
            s += pb.J[kidx[c], k] * nu[c]
        fg2 += s * s
    return math.sqrt(fg2)


@njit(cache=True, fastmath=FM, error_model="numpy")
def _release(pb, wk, kidx, nu, tol):
    """Release the pinned row whose leaving the face decreases L fastest.

    With ν from :func:`_face_step` at a face minimizer, moving row i off its
    breakpoint by ``t`` changes L at rate ``−ν_i t`` on the base side and
    ``(δ_i − ν_i) t`` on the other, ``δ_i = D_i (J_i ∇_g L − Kf2_iᵀ r2)``.
    Returns True if a row was released (``wk.release`` set), False if no side
    of any pinned row is a descent direction (a kink local minimum).
    """
    best = tol
    bi = -1
    bside = 0
    for c in range(kidx.shape[0]):
        i = kidx[c]
        sb = wk.kink[i]
        jn = 0.0
        jg = 0.0
        for k in range(pb.J.shape[1]):
            jn += pb.J[i, k] * pb.J[i, k]
            jg += pb.J[i, k] * wk.gradg[k]
        kr = 0.0
        for r in range(pb.Ka2.shape[0]):
            kr += pb.Kf2[r, i] * wk.r2[r]
        delta = pb.D[i] * (jg - kr)
        jn = math.sqrt(jn)
        rate_b = sb * nu[c] * jn
        rate_d = -sb * (nu[c] - delta) * jn
        if rate_b > best:
            best = rate_b
            bi = i
            bside = sb
        if rate_d > best:
            best = rate_d
            bi = i
            bside = -sb
    if bi < 0:
        return False
    wk.release[bi] = bside
    return True


# ---------------------------------------------------------------- multiplier update


@njit(cache=True, fastmath=FM, error_model="numpy")
def _dual_newton(pb, wk, kidx, lam, mu_lo, mu_hi, with_grad):
    """Second-order augmented-Lagrangian multiplier update.

    In the current piece the inner minimizer ``a(ν)`` and the constraint values
    ``t(ν)`` are affine in the multipliers ν of the equality rows and of the box
    rows whose penalty is on; ``dt/dν = −C H⁻¹ Cᵀ`` with rows ``C_k = n_k P``.
    The update ``ν += (C H⁻¹ Cᵀ)⁻¹ t`` makes the next inner solve land on
    ``t = 0`` when the piece does not change (box multipliers are clipped at 0).
    With pinned kink rows K the inner solve is restricted to ``J_K d = 0`` and
    ``H⁻¹`` is replaced by ``H⁻¹ − H⁻¹J_Kᵀ(J_K H⁻¹ J_Kᵀ)⁻¹J_K H⁻¹``.
    With ``with_grad`` (no pinned rows only) ``a`` need not be an inner minimizer:
    the Newton step from ``a`` with the new multipliers is ``δ = −H⁻¹(∇L + CᵀΔν)``
    and ``t + Cδ = 0`` gives ``Δν = (C H⁻¹ Cᵀ)⁻¹ (t − C H⁻¹ ∇L)`` (a KKT step of the
    current piece, so that the first Gauss-Newton step already lands on the constraints).
    Returns False if ``C H⁻¹ Cᵀ`` is singular (the caller then uses ``ν += ρ t``).
    """
    nv = pb.M.shape[0]
    nz = pb.Ceq.shape[0]
    nb = pb.Cbox.shape[0]
    nA = nz
    for j in range(nb):
        if wk.bact[j] != 0:
            nA += 1
    if nA == 0:
        return True
    nk = kidx.shape[0]
    CT, o = _take2(wk.scr, 0, nA, nv)  # rows: C_k = n_k P
    tv, o = _take(wk.scr, o, nA)
    S, o = _take2(wk.scr, o, nA, nA)
    LS, o = _take2(wk.scr, o, nA, nA)
    XK, o = _take2(wk.scr, o, nv, nk)
    SK, o = _take2(wk.scr, o, nk, nk)
    B, o = _take2(wk.scr, o, nk, nA)
    LK, o = _take2(wk.scr, o, nk, nk)
    col_, o = _take(wk.scr, o, nk)
    _fill(wk.scr[:o], 0.0)
    col = 0
    for e in range(nz + nb):
        if e < nz:
            row = e
            cnt = pb.ce_nnz[e]
            sign = 1.0
            tv[col] = wk.h[e]
        else:
            row = e - nz
            if wk.bact[row] == 0:
                continue
            cnt = pb.cb_nnz[row]
            if wk.bact[row] > 0:
                sign = 1.0
                tv[col] = wk.w[row] - pb.hi[row]
            else:
                sign = -1.0
                tv[col] = pb.lo[row] - wk.w[row]
        for p in range(cnt):
            if e < nz:
                t = pb.ce_idx[row, p]
                cv = sign * pb.Ceq[row, t]
            else:
                t = pb.cb_idx[row, p]
                cv = sign * pb.Cbox[row, t]
            for k in range(nv):
                CT[col, k] += cv * wk.P[t, k]  # (P symmetric)
        col += 1
    _lower_solve_rhs_rows(wk.LH, CT)  # rows of L⁻¹ Cᵀ
    if with_grad:
        # t − C H⁻¹ ∇L = t − (L⁻¹Cᵀ)ᵀ (L⁻¹∇L)
        z = wk.tmp_nv
        _fwd_solve(wk.LH, wk.grad, z)
        for r in range(nA):
            tv[r] -= _dot(CT[r], z)
    _gram_lower(S, CT, nv, S)  # S = C H⁻¹ Cᵀ (lower triangle; S is zero on entry)
    if nk > 0:
        _pinned_system(pb, wk, kidx, XK, SK)
        for t in range(nv):
            for r in range(nk):
                xr = XK[t, r]
                for k in range(nA):
                    B[r, k] += xr * CT[k, t]
        _shift_diagonal(SK)
        if not cholesky(SK, LK):
            return False
        for k in range(nA):
            for r in range(nk):
                col_[r] = B[r, k]
            chol_solve(LK, col_, col_)
            for r in range(k, nA):
                s_ = 0.0
                for q_ in range(nk):
                    s_ += B[q_, r] * col_[q_]
                S[r, k] -= s_
    if not cholesky(S, LS):
        return False
    chol_solve(LS, tv, tv)
    col = 0
    for e in range(nz):
        lam[e] += tv[col]
        col += 1
    for j in range(nb):
        if wk.bact[j] > 0:
            mu_hi[j] = max(0.0, mu_hi[j] + tv[col])
            col += 1
        elif wk.bact[j] < 0:
            mu_lo[j] = max(0.0, mu_lo[j] + tv[col])
            col += 1
    return True


@njit(cache=True, inline="always", error_model="numpy")
def _equality_violation(pb, wk):
    """``max_e |h_e| · sc_e``: the largest scaled violation of the equality rows."""
    fe = 0.0
    for e in range(pb.Ceq.shape[0]):
        fe = max(fe, abs(wk.h[e]) * pb.sc_e[e])
    return fe


@njit(cache=True, inline="always", error_model="numpy")
def _feasibility(pb, wk):
    fe = _equality_violation(pb, wk)
    fb = 0.0
    for j in range(pb.Cbox.shape[0]):
        if np.isfinite(pb.hi[j]):
            fb = max(fb, max(0.0, wk.w[j] - pb.hi[j]) * pb.sc_b[j])
        if np.isfinite(pb.lo[j]):
            fb = max(fb, max(0.0, pb.lo[j] - wk.w[j]) * pb.sc_b[j])
    return fe, fb


@njit(cache=True, inline="always", error_model="numpy")
def _dual_residual(pb, wk, mu_lo, mu_hi):
    """``(fe, fb)``: how far the rows are from what the multipliers claim, scaled like
    :func:`_feasibility`.  ``fe`` is the equality rows' violation ``|h|``.  A box row with value
    ``c = w − hi`` (or ``lo − w``), multiplier ``μ`` and penalty ``ρ`` acts on the inner problem
    when ``μ + ρc > 0``: it then must hold with equality, and ``fb`` counts ``|c|`` — the
    violation of a violated row, and the slack of a satisfied row that a multiplier still
    pushes (complementarity: a multiplier left over from an earlier state, e.g. a warm start
    from a solve where the actuator was at its force limit, biases the inner minimizer while
    every row is satisfied).  A row with ``μ + ρc ≤ 0`` exerts nothing and counts 0."""
    fe = _equality_violation(pb, wk)
    fb = 0.0
    for j in range(pb.Cbox.shape[0]):
        rho = pb.rho_b[j]
        if np.isfinite(pb.hi[j]):
            c = wk.w[j] - pb.hi[j]
            if mu_hi[j] + rho * c > 0.0:
                fb = max(fb, abs(c) * pb.sc_b[j])
        if np.isfinite(pb.lo[j]):
            c = pb.lo[j] - wk.w[j]
            if mu_lo[j] + rho * c > 0.0:
                fb = max(fb, abs(c) * pb.sc_b[j])
    return fe, fb
