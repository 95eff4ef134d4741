"""Line searches: the exact piecewise-quadratic sweep and the 1-D Newton/bisection search.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .constants import FM, ROW_FRICTION, ROW_ONESIDED
from .constants import STATE_LINEARNEG, STATE_LINEARPOS, STATE_QUADRATIC, STATE_SATISFIED
from .constraints import constraint_update, hs_mul
from .evaluate import _box_nu, _box_psi
from .linalg import _dot, _m_solve, _matTvec_add, _matvec, _smatvec, _srow_dot
from .workspace import _dims, _fill, _take, _take2

# ---------------------------------------------------------------- exact line search (pyramidal)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _piece_slopes(pb, d, Jd, rowstate, g1, y1, h1, w1, r1, dfd):
    """Slopes along the line in the current piece: ``g1 = P d``, ``y1 = M⁻¹g1``, ``h1, w1, r1``."""
    nv = d.shape[0]
    nefc = Jd.shape[0]
    m2 = pb.Ka2.shape[0]
    for i in range(nefc):
        dfd[i] = -pb.D[i] * Jd[i] if rowstate[i] == STATE_QUADRATIC else 0.0
    _matvec(pb.M, d, g1)
    _matTvec_add(pb.J, dfd, g1, -1.0)
    _m_solve(pb, g1, y1)
    _smatvec(pb.Ceq, pb.ce_idx, pb.ce_nnz, g1, h1)
    _smatvec(pb.Cbox, pb.cb_idx, pb.cb_nnz, g1, w1)
    for r in range(m2):
        s = 0.0
        for k in range(nv):
            s += pb.Ka2[r, k] * d[k]
        for i in range(nefc):
            s += pb.Kf2[r, i] * dfd[i]
        r1[r] = s


@njit(cache=True, fastmath=FM, error_model="numpy")
def _linesearch_sweep(pb, wk, a, d, Jd, lam, mu_lo, mu_hi, ls):
    """Exact minimization of the objective along ``a + α d`` when ``s`` is piecewise quadratic.

    Walks the breakpoints in increasing α — constraint rows changing state and
    box-penalty terms switching on or off — keeping the 1-D quadratic of the
    current piece (derivative and curvature) up to date, and stops at the first
    local minimizer along the ray: the minimizer of a piece that lies inside it,
    or a kink where the right derivative becomes non-negative.

    Returns ``(α, breakpoints crossed)``; ``α`` is exactly 1 when the Newton step
    is the minimizer of the first piece.  With no breakpoint crossed, ``ls`` keeps the
    slopes of that piece (``g1 = P d``, ``y1 = M⁻¹g1``) and ``Q d`` (its ``tmp_nv``) for
    :func:`_evaluate_step`.
    """
    (rowstate, g1, y1, yk, hk, h1, wk_, w1, rk, r1, dfd, tmp_nv,
     ev_alpha, ev_row, ev_type, bhi, blo, order) = ls
    nv, nefc, nz, nb, m2 = _dims(pb)
    lo = pb.lo
    hi = pb.hi
    rho_b = pb.rho_b
    # row states at α = 0⁺
    for i in range(nefc):
        x = wk.jar[i]
        s = Jd[i]
        k = pb.kind[i]
        st = STATE_QUADRATIC
        if k == ROW_ONESIDED:
            st = STATE_QUADRATIC if (x < 0.0 or (x == 0.0 and s < 0.0)) else STATE_SATISFIED
        elif k == ROW_FRICTION:
            rf = pb.R[i] * pb.floss[i]
            if x < -rf or (x == -rf and s <= 0.0):
                st = STATE_LINEARNEG
            elif x > rf or (x == rf and s >= 0.0):
                st = STATE_LINEARPOS
        rowstate[i] = st
    _piece_slopes(pb, d, Jd, rowstate, g1, y1, h1, w1, r1, dfd)
    for k in range(nv):
        yk[k] = wk.y[k]
    for e in range(nz):
        hk[e] = wk.h[e]
    for j in range(nb):
        wk_[j] = wk.w[j]
    for r in range(m2):
        rk[r] = wk.r2[r]
    _matvec(pb.Q, d, tmp_nv)  # (kept: Q d, for _evaluate_step)
    dQd = _dot(d, tmp_nv)
    ga0 = _dot(wk.Qa, d) + _dot(pb.q, d)
    for j in range(nb):
        bhi[j] = 0
        blo[j] = 0
        if np.isfinite(hi[j]):
            u = mu_hi[j] + rho_b[j] * (wk_[j] - hi[j])
            bhi[j] = 1 if (u > 0.0 or (u == 0.0 and w1[j] > 0.0)) else 0
        if np.isfinite(lo[j]):
            u = mu_lo[j] + rho_b[j] * (lo[j] - wk_[j])
            blo[j] = 1 if (u > 0.0 or (u == 0.0 and w1[j] < 0.0)) else 0
    # constraint-row breakpoints (α > 0)
    nev = 0
    for i in range(nefc):
        s = Jd[i]
        if s == 0.0:
            continue
        k = pb.kind[i]
        if k == ROW_ONESIDED:
            al = -wk.jar[i] / s
            if al > 0.0:
                ev_alpha[nev] = al
                ev_row[nev] = i
                ev_type[nev] = 0
                nev += 1
        elif k == ROW_FRICTION:
            rf = pb.R[i] * pb.floss[i]
            al = (-rf - wk.jar[i]) / s
            if al > 0.0:
                ev_alpha[nev] = al
                ev_row[nev] = i
                ev_type[nev] = -1
                nev += 1
            al = (rf - wk.jar[i]) / s
            if al > 0.0:
                ev_alpha[nev] = al
                ev_row[nev] = i
                ev_type[nev] = 1
                nev += 1
    # breakpoints in increasing α (insertion sort: few events, no allocation)
    for p in range(nev):
        al = ev_alpha[p]
        q_ = p
        while q_ > 0 and ev_alpha[order[q_ - 1]] > al:
            order[q_] = order[q_ - 1]
            q_ -= 1
        order[q_] = p
    alpha = 0.0
    crossed = 0
    pos = 0
    for _guard in range(4 * (nev + 2 * nb) + 10):
        dphi = _dot(g1, yk) + ga0 + alpha * dQd
        ddphi = _dot(g1, y1) + dQd
        for e in range(nz):
            dphi += (lam[e] + pb.rho_e[e] * hk[e]) * h1[e]
            ddphi += pb.rho_e[e] * h1[e] * h1[e]
        for j in range(nb):
            if bhi[j] != 0:
                dphi += (mu_hi[j] + rho_b[j] * (wk_[j] - hi[j])) * w1[j]
                ddphi += rho_b[j] * w1[j] * w1[j]
            if blo[j] != 0:
                dphi -= (mu_lo[j] + rho_b[j] * (lo[j] - wk_[j])) * w1[j]
                ddphi += rho_b[j] * w1[j] * w1[j]
        for r in range(m2):
            dphi += r1[r] * rk[r]
            ddphi += r1[r] * r1[r]
        if dphi >= 0.0:
            return alpha, crossed
        tstar = -dphi / ddphi if ddphi > 0.0 else np.inf
        t_row = np.inf
        if pos < nev:
            t_row = max(ev_alpha[order[pos]] - alpha, 0.0)
        t_box = np.inf
        jbox = -1
        for j in range(nb):
            if w1[j] == 0.0:
                continue
            if np.isfinite(hi[j]):
                if (bhi[j] != 0 and w1[j] < 0.0) or (bhi[j] == 0 and w1[j] > 0.0):
                    u = mu_hi[j] + rho_b[j] * (wk_[j] - hi[j])
                    t = max(-u / (rho_b[j] * w1[j]), 0.0)
                    if t < t_box:
                        t_box = t
                        jbox = j
            if np.isfinite(lo[j]):
                if (blo[j] != 0 and w1[j] > 0.0) or (blo[j] == 0 and w1[j] < 0.0):
                    u = mu_lo[j] + rho_b[j] * (lo[j] - wk_[j])
                    t = max(u / (rho_b[j] * w1[j]), 0.0)
                    if t < t_box:
                        t_box = t
                        jbox = nb + j
        t_ev = min(t_row, t_box)
        if tstar <= t_ev or not np.isfinite(t_ev):
            if crossed == 0 and abs(tstar - 1.0) <= 1e-6:
                return 1.0, crossed  # the Newton step is the minimizer of the piece (to roundoff)
            return alpha + tstar, crossed
        # advance to the event
        for k in range(nv):
            yk[k] += t_ev * y1[k]
        for e in range(nz):
            hk[e] += t_ev * h1[e]
        for j in range(nb):
            wk_[j] += t_ev * w1[j]
        for r in range(m2):
            rk[r] += t_ev * r1[r]
        alpha += t_ev
        crossed += 1
        if t_box < t_row:
            if jbox < nb:
                bhi[jbox] = 1 - bhi[jbox]
            else:
                blo[jbox - nb] = 1 - blo[jbox - nb]
            continue
        changed = False
        while pos < nev and ev_alpha[order[pos]] <= alpha:
            ev = order[pos]
            pos += 1
            i = ev_row[ev]
            s = Jd[i]
            if pb.kind[i] == ROW_ONESIDED:
                new = STATE_QUADRATIC if s < 0.0 else STATE_SATISFIED
            elif ev_type[ev] > 0:
                new = STATE_LINEARPOS if s > 0.0 else STATE_QUADRATIC
            else:
                new = STATE_LINEARNEG if s < 0.0 else STATE_QUADRATIC
            if new != rowstate[i]:
                rowstate[i] = new
                changed = True
        if changed:
            _piece_slopes(pb, d, Jd, rowstate, g1, y1, h1, w1, r1, dfd)
    return alpha, crossed


# ---------------------------------------------------------------- 1-D fallback line search


@njit(cache=True, fastmath=FM, error_model="numpy")
def _phi_line(pb, alpha, a, d, Jd, Md, lam, mu_lo, mu_hi, lw):
    """φ(α) and φ'(α) along ``a + α d`` by direct evaluation (any cone type)."""
    (at, jt, ft, st, hd, hc, gt, yt, ht, wt, nut, bact, g1t, te, te2, tn, rt) = lw
    nv, nefc, nz, nb, m2 = _dims(pb)
    for k in range(nv):
        at[k] = a[k] + alpha * d[k]
    _matvec(pb.J, at, jt)
    for i in range(nefc):
        jt[i] -= pb.aref[i]
    constraint_update(jt, pb.D, pb.R, pb.floss, pb.kind, pb.cdim, pb.cmu, pb.cfric, ft, st, hd, hc)
    _matvec(pb.M, at, gt)
    for k in range(nv):
        gt[k] += pb.c[k]
    _matTvec_add(pb.J, ft, gt, -1.0)
    _m_solve(pb, gt, yt)
    _smatvec(pb.Ceq, pb.ce_idx, pb.ce_nnz, gt, ht)
    _smatvec(pb.Cbox, pb.cb_idx, pb.cb_nnz, gt, wt)
    _box_nu(wt, pb.lo, pb.hi, mu_lo, mu_hi, pb.rho_b, nut, bact)
    # g1 = P(α) d
    hs_mul(Jd, pb.kind, pb.cdim, st, hd, hc, te2)
    for k in range(nv):
        g1t[k] = Md[k]
    _matTvec_add(pb.J, te2, g1t, 1.0)
    phi = 0.5 * _dot(gt, yt)
    dphi = _dot(g1t, yt)
    for e in range(nz):
        phi += lam[e] * ht[e] + 0.5 * pb.rho_e[e] * ht[e] * ht[e]
        dphi += (lam[e] + pb.rho_e[e] * ht[e]) * _srow_dot(pb.Ceq, pb.ce_idx, pb.ce_nnz, e, g1t)
    phi += _box_psi(wt, pb.lo, pb.hi, mu_lo, mu_hi, pb.rho_b)
    for j in range(nb):
        if nut[j] != 0.0:
            dphi += nut[j] * _srow_dot(pb.Cbox, pb.cb_idx, pb.cb_nnz, j, g1t)
    _matvec(pb.Q, at, tn)
    phi += 0.5 * _dot(at, tn) + _dot(pb.q, at)
    dphi += _dot(tn, d) + _dot(pb.q, d)
    for r in range(m2):
        s = pb.e2[r]
        sd = 0.0
        for k in range(nv):
            s += pb.Ka2[r, k] * at[k]
            sd += pb.Ka2[r, k] * d[k]
        for i in range(nefc):
            s += pb.Kf2[r, i] * ft[i]
            sd -= pb.Kf2[r, i] * te2[i]
        phi += 0.5 * s * s
        dphi += s * sd
    return phi, dphi


@njit(cache=True, error_model="numpy")
def _linesearch_1d(pb, a, d, Jd, dphi0, lam, mu_lo, mu_hi, scr, scri):
    """Safeguarded 1-D search for the first zero of φ'(α) (used with elliptic cones).

    Brackets the first sign change of φ' by doubling from α = 1 (the Newton
    step), then secant steps safeguarded by bisection.  φ' may jump at
    breakpoints; a bracket collapsing onto a jump is a kink minimum.
    Returns ``(α, evaluations)``.  ``scr``, ``scri``: float / int scratch (:func:`_ws_sizes`).
    """
    nv, nefc, nz, nb, m2 = _dims(pb)
    # the temporaries of one length together (as counted by _scratch_size)
    sv, o = _take2(scr, 0, 6, nv)
    at, gt, yt, g1t, tn, Md = sv[0], sv[1], sv[2], sv[3], sv[4], sv[5]
    se, o = _take2(scr, o, 5, nefc)
    jt, ft, hd, te, te2 = se[0], se[1], se[2], se[3], se[4]
    sb, o = _take2(scr, o, 2, nb)
    wt, nut = sb[0], sb[1]
    ht, o = _take(scr, o, nz)
    rt, o = _take(scr, o, m2)
    hc1, o = _take(scr, o, nefc * 36)
    _fill(hc1, 0.0)
    st, oi = _take(scri, 0, nefc)
    bact, oi = _take(scri, oi, nb)
    lw = (at, jt, ft, st, hd, hc1.reshape((nefc, 6, 6)), gt, yt, ht, wt, nut, bact, g1t, te, te2,
          tn, rt)
    _matvec(pb.M, d, Md)
    lo_a = 0.0
    dlo = dphi0
    hi_a = 1.0
    evals = 1
    _, dhi = _phi_line(pb, hi_a, a, d, Jd, Md, lam, mu_lo, mu_hi, lw)
    while dhi < 0.0 and evals < 60:
        lo_a = hi_a
        dlo = dhi
        hi_a *= 2.0
        _, dhi = _phi_line(pb, hi_a, a, d, Jd, Md, lam, mu_lo, mu_hi, lw)
        evals += 1
    if dhi <= 0.0:
        return hi_a, evals
    best = hi_a
    for it in range(100):
        width = hi_a - lo_a
        t = lo_a - dlo * width / (dhi - dlo) if dhi != dlo else 0.5 * (lo_a + hi_a)
        if not (t > lo_a + 0.01 * width and t < hi_a - 0.01 * width) or it % 3 == 2:
            t = 0.5 * (lo_a + hi_a)
        _, dt = _phi_line(pb, t, a, d, Jd, Md, lam, mu_lo, mu_hi, lw)
        evals += 1
        best = t
        if dt < 0.0:
            lo_a = t
            dlo = dt
        else:
            hi_a = t
            dhi = dt
        if abs(dt) <= 1e-15 * abs(dphi0) or (hi_a - lo_a) <= 1e-15 * hi_a:
            break
    return best, evals
