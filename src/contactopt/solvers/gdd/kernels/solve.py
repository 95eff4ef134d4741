"""The goal-directed solve :func:`gdd_solve` (GDD eq. 8) and its set-up helpers.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .constants import (
    _CNSTR_CONTACT_ELLIPTIC,
    FM,
    IPAR_EXACT_LS,
    IPAR_KD,
    IPAR_KM,
    IPAR_M1,
    IPAR_M2,
    IPAR_MAX_DUAL,
    IPAR_MAX_ITER,
    IPAR_NB,
    IPAR_NC,
    IPAR_NEWTON_DUAL,
    IPAR_NZ,
    IPAR_PATTERN,
    IPAR_SAFEGUARD,
    IPAR_SCALE_INTERVAL,
    IPAR_SCALES,
    IPAR_SINCE_SCALES,
    LOG_ALPHA,
    LOG_EVENTS,
    LOG_FACTORED,
    LOG_GRAD,
    LOG_NACTIVE,
    LOG_OBJECTIVE,
    LOG_OUTER,
    LOG_STEP,
    PAR_PENALTY,
    PAR_TOL_FEAS,
    PAR_TOL_GRAD,
    ROW_CONE,
    ST_CLAMPED,
    ST_COST,
    ST_DUAL,
    ST_EVENTS,
    ST_FACT,
    ST_FEAS_BOX,
    ST_FEAS_EQ,
    ST_GRAD,
    ST_ITER,
    ST_LS_EVALS,
    ST_NSTAT,
    ST_OBJECTIVE,
    ST_SAFEGUARD,
    ST_STATUS,
    ST_WS_FLOAT,
    ST_WS_INT,
    STATE_CONE,
    STATE_SATISFIED,
    STATUS_CONVERGED,
    STATUS_MAX_DUAL_UPDATES,
    STATUS_MAX_ITERATIONS,
    STATUS_NUMERICAL_ERROR,
    STATUS_STALLED,
    STATUS_WORKSPACE,
)
from .constraints import row_kinds
from .evaluate import (
    _build_hessian,
    _evaluate,
    _evaluate_step,
    _probe_states,
    _reevaluate_multipliers,
    _reevaluate_multipliers_piece,
)
from .kkt import _dual_newton, _dual_residual, _face_step, _feasibility, _pinned, _release
from .linalg import _dot, _m_solve, _matvec, _sparse_rows, chol_solve, ldl_dense
from .line_search import _linesearch_1d, _linesearch_sweep
from .workspace import (
    Prob,
    Work,
    _actuation_blocks,
    _all_finite,
    _cost_blocks,
    _fill,
    _scratch_size,
    _take,
    _take2,
    _ws_sizes,
)

#: safeguard limits, multiples of the solve's acceleration scale (free acceleration, constraint
#: reference accelerations and cost targets): an initial guess above GUESS_LIMIT is replaced by
#: the free acceleration; a step above STEP_LIMIT or a result above RESULT_LIMIT restarts the solve
GUESS_LIMIT = 1e4
STEP_LIMIT = 1e6
RESULT_LIMIT = 1e6


# ---------------------------------------------------------------- the solver


@njit(cache=True, fastmath=FM, error_model="numpy")
def _assemble_cost(M, mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, Q, q, tmp, Mt):
    """Fold the a-only cost terms into ``½aᵀQa + qᵀa + c0``; returns c0.

    mass terms ``(w_k/2)(a − t_k)ᵀM(a − t_k)``, diagonal terms
    ``(w_k/2)Σ_i m_ki (a_i − t_ki)²`` and residual rows ``(w_r/2)(Ka1_r a + e1_r)²``.
    ``tmp``, ``Mt``: ``(nv,)`` scratch.
    """
    nv = M.shape[0]
    c0 = 0.0
    sig = 0.0
    for k in range(nv):
        q[k] = 0.0
        tmp[k] = 0.0
    for t in range(mass_w.shape[0]):
        wt = mass_w[t]
        if wt == 0.0:
            continue
        sig += wt
        for k in range(nv):
            tmp[k] += wt * mass_t[t, k]
        _matvec(M, mass_t[t], Mt)
        c0 += 0.5 * wt * _dot(mass_t[t], Mt)
    _matvec(M, tmp, Mt)
    for r in range(nv):
        q[r] = -Mt[r]
        for k in range(nv):
            Q[r, k] = sig * M[r, k]
    for t in range(diag_w.shape[0]):
        wt = diag_w[t]
        if wt == 0.0:
            continue
        for k in range(nv):
            wm = wt * diag_m[t, k]
            Q[k, k] += wm
            q[k] -= wm * diag_t[t, k]
            c0 += 0.5 * wm * diag_t[t, k] * diag_t[t, k]
    for r in range(Ka1.shape[0]):
        wr = wa[r]
        if wr == 0.0:
            continue
        er = e1[r]
        c0 += 0.5 * wr * er * er
        for i in range(nv):
            ki = wr * Ka1[r, i]
            if ki != 0.0:
                q[i] += ki * er
                for k in range(nv):
                    Q[i, k] += ki * Ka1[r, k]
    return c0


@njit(cache=True, fastmath=FM, error_model="numpy")
def _scales(pb, Bdir, rho, col, rho_e, rho_b, sc_e, sc_b):
    """Penalties ``ρ_k = ρ · n_kᵀ M⁻¹ n_k`` and violation scales ``‖M⁻¹ n_k‖`` (``col (nv,)``:
    scratch)."""
    nv = col.shape[0]
    Ceq = pb.Ceq
    for e in range(Ceq.shape[0] + Bdir.shape[0]):
        src = Ceq[e] if e < Ceq.shape[0] else Bdir[e - Ceq.shape[0]]
        for k in range(nv):
            col[k] = src[k]
        _m_solve(pb, col, col)
        r = rho * max(_dot(src, col), 1e-300)
        s = math.sqrt(_dot(col, col))
        if e < Ceq.shape[0]:
            rho_e[e] = r
            sc_e[e] = s
        else:
            rho_b[e - Ceq.shape[0]] = r
            sc_b[e - Ceq.shape[0]] = s


@njit(cache=True, inline="always", error_model="numpy")
def _same_pattern(wk, fact_state, fact_bact, have_factor):
    """True when the Hessian factor was built for the current constraint and box pattern."""
    if not have_factor:
        return False
    for i in range(wk.state.shape[0]):
        if wk.state[i] != fact_state[i] or wk.state[i] == STATE_CONE:
            return False
    for j in range(wk.bact.shape[0]):
        if wk.bact[j] != fact_bact[j]:
            return False
    return True


@njit(cache=True, inline="always", error_model="numpy")
def _save_pattern(wk, fact_state, fact_bact):
    for i in range(wk.state.shape[0]):
        fact_state[i] = wk.state[i]
    for j in range(wk.bact.shape[0]):
        fact_bact[j] = wk.bact[j]



@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _accel_scale(pb, c, q, a_free, tmp, alo):
    """The safeguard's acceleration scale ``max(1 + ‖M⁻¹(−c)‖ + ‖M⁻¹q‖, alo)``; leaves the free
    acceleration ``M⁻¹(−c)`` in ``a_free`` (``tmp``: scratch)."""
    for k in range(a_free.shape[0]):
        a_free[k] = -c[k]
        tmp[k] = q[k]
    _m_solve(pb, a_free, a_free)
    _m_solve(pb, tmp, tmp)
    return max(1.0 + math.sqrt(_dot(a_free, a_free)) + math.sqrt(_dot(tmp, tmp)), alo)


@njit(cache=True, error_model="numpy")
def _cold_start(a, a_free, lam, mu_lo, mu_hi):
    """Restart from the free acceleration ``a = M⁻¹(−c)`` with zero multipliers (safeguard)."""
    for k in range(a.shape[0]):
        a[k] = a_free[k]
    _fill(lam, 0.0)
    _fill(mu_lo, 0.0)
    _fill(mu_hi, 0.0)


@njit(cache=True, error_model="numpy")
def gdd_solve(M, Mrownnz, Mrowadr, Mcolind, qld, qldinv,
              c, J, aref, D, R, floss, efc_type, efc_id, con_dim, con_mu, con_fric, con_adr,
              actbuf, scales, costbuf, Kf2,
              a, lam, mu_lo, mu_hi, params, iparams,
              out_g, out_f, out_state, out_w, out_ctrl, stats, log, wsf, wsi):
    """Goal-directed dynamics at one state (GDD eq. 8) by an augmented Lagrangian.

    Minimizes over accelerations ``a (nv,)``::

        L(a) = ½ g(a)ᵀ M⁻¹ g(a) + ℓ(a)
               + Σ_e [λ_e h_e + ½ ρ_e h_e²]                      h = Ceq g   (= 0)
               + Σ_j ψ(w_j − hi_j, μ⁺_j) + ψ(lo_j − w_j, μ⁻_j)   w = Cbox g  (lo ≤ w ≤ hi)
        ℓ(a) = ½ aᵀ Q a + qᵀ a + c0 + ½ ‖Ka2 a + Kf2 f(a) + e2‖²   (row-weighted)

    with Gauss-Newton steps (Hessian ``Pᵀ S P + Q + K2ᵀK2``, exact inside each
    piece of the piecewise-quadratic objective, refactored only when the piece
    changes), an exact line search, and multiplier updates (second order, or
    ``λ += ρ h``, ``μ± = max(0, μ± + ρ t±)``) until the violation, in acceleration
    units ``‖M⁻¹ n_k‖·|t_k|``, is below tolerance.  Finally
    ``w = Bpinv g``, ``ctrl = clip((w − bias)/gain, ctrl_lo, ctrl_hi)``.

    Args:
      M (nv, nv), c (nv,): inertia and non-control force.
      Mrownnz, Mrowadr, Mcolind (nv,), (nv,), (nnz,) int, qld (nnz,), qldinv (nv,): the factor
        ``M = Lᵀ D L`` in MuJoCo's layout (``model.M_rownnz/M_rowadr/M_colind``,
        ``data.qLD``, ``data.qLDiagInv``: :func:`ldl_factor`), or empty ``qld``: then ``M``
        is factored here (dense triangle, :func:`ldl_dense`).
      J (nefc, nv), aref, D, R, floss (nefc,), efc_type, efc_id (nefc,): constraint rows.
      con_dim, con_mu, con_fric (ncon, 5), con_adr (ncon,): contact data (elliptic cones only).
      actbuf: the actuation, packed (``ActuationArrays.packed``; sizes ``iparams[IPAR_NZ,
        IPAR_NB, IPAR_NC]``): row-major Ceq (nz, nv), the rows whose product with g must
        vanish; Cbox (nb, nv), bounded actuator forces ``w = Cbox g``; Bdir (nb, nv), the
        generalized-force direction of each box row; Bpinv (nc, nv); then lo, hi (nb,)
        (±inf: no bound) and the control map gain, bias, ctrl_lo, ctrl_hi (nc,).
      scales (4, max(nz, nb)): rows ρ_e, ρ_b, sc_e, sc_b; computed here when
        ``iparams[IPAR_SCALES]`` is 1 or ``iparams[IPAR_SINCE_SCALES]`` reached
        ``iparams[IPAR_SCALE_INTERVAL]`` (both reset then; else the count goes up by one),
        otherwise used as given.
      costbuf: the cost, packed (``CostArrays.buffer``; sizes ``iparams[IPAR_KM, IPAR_KD,
        IPAR_M1, IPAR_M2]``): mass_w (km,), mass_t (km, nv); diag_w (kd,), diag_m, diag_t
        (kd, nv); Ka1 (m1, nv), e1, wa (m1,); Ka2 (m2, nv), e2, wf (m2,).
      Kf2 (m2, nefc): force part of the cost rows.
      a (nv,): initial guess in, solution out.  lam (nz,), mu_lo, mu_hi (nb,): multipliers in/out.
      params (PAR_NPAR,): penalty ρ, gradient tolerance (relative to max(1, ‖c‖, ‖g(a₀)‖)),
        feasibility tolerance (m/s²); iparams (IPAR_NIPAR,).
      out_g (nv,), out_f, out_state (nefc,), out_w, out_ctrl (nc,), stats (ST_NSTAT,),
      log (max_iter, LOG_NCOL): outputs.
      wsf (float64), wsi (int64): workspace, at least :func:`_ws_sizes` long (else nothing is
        done: status ``STATUS_WORKSPACE`` with the lengths in ``stats[ST_WS_*]``).  ``wsi``
        keeps the sparsity of Ceq/Cbox between calls (recomputed when
        ``iparams[IPAR_PATTERN]`` is 1: on a new workspace or new actuation arrays).
    """
    nv = M.shape[0]
    nefc = J.shape[0]
    nz = iparams[IPAR_NZ]
    nb = iparams[IPAR_NB]
    nc = iparams[IPAR_NC]
    Ceq, Cbox, Bdir, Bpinv, lo, hi, gain, bias, ctrl_lo, ctrl_hi = _actuation_blocks(
        actbuf, nz, nb, nc, nv)
    km = iparams[IPAR_KM]
    kd = iparams[IPAR_KD]
    m1 = iparams[IPAR_M1]
    m2 = iparams[IPAR_M2]
    mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, o = _cost_blocks(costbuf, km, kd, m1, nv)
    Ka2, o = _take2(costbuf, o, m2, nv)
    e2, o = _take(costbuf, o, m2)
    wf, o = _take(costbuf, o, m2)
    rho = params[PAR_PENALTY]
    tol_grad0 = params[PAR_TOL_GRAD] * max(1.0, math.sqrt(_dot(c, c)))
    tol_grad = tol_grad0
    tol_feas = params[PAR_TOL_FEAS]
    max_iter = iparams[IPAR_MAX_ITER]
    max_dual = iparams[IPAR_MAX_DUAL]
    exact_ls = iparams[IPAR_EXACT_LS]
    newton_dual = iparams[IPAR_NEWTON_DUAL]
    for k in range(ST_NSTAT):
        stats[k] = 0.0

    # ---- per-state setup: every array is a view of the caller's workspace (no allocation)
    ncone = 0
    for i in range(nefc):
        if efc_type[i] == _CNSTR_CONTACT_ELLIPTIC:
            ncone = nefc
    nf, ni = _ws_sizes(nv, nefc, nz, nb, m2, ncone)
    if wsf.shape[0] < nf or wsi.shape[0] < ni:
        stats[ST_WS_FLOAT] = nf
        stats[ST_WS_INT] = ni
        stats[ST_STATUS] = STATUS_WORKSPACE
        return
    # int part; the Ceq/Cbox sparsity patterns come first (kept between calls), then the arrays
    # of one length together (as counted by _ws_sizes)
    oi = 0
    ce_idx, oi = _take2(wsi, oi, nz, nv)
    ce_nnz, oi = _take(wsi, oi, nz)
    cb_idx, oi = _take2(wsi, oi, nb, nv)
    cb_nnz, oi = _take(wsi, oi, nb)
    jnz, oi = _take2(wsi, oi, nefc, nv)
    ie, oi = _take2(wsi, oi, 10, nefc)
    kind, cdim, jnnz, w_state, w_kink = ie[0], ie[1], ie[2], ie[3], ie[4]
    w_release, l_rowstate, fact_state, w_kidx, prev_kink = ie[5], ie[6], ie[7], ie[8], ie[9]
    ib, oi = _take2(wsi, oi, 4, nb)
    w_bact, l_bhi, l_blo, fact_bact = ib[0], ib[1], ib[2], ib[3]
    iev, oi = _take2(wsi, oi, 3, 2 * nefc + 1)
    l_evrow, l_evtype, l_order = iev[0], iev[1], iev[2]
    m_rn, oi = _take(wsi, oi, nv)
    m_ra, oi = _take(wsi, oi, nv)
    m_ci, oi = _take(wsi, oi, nv * (nv + 1) // 2)
    w_nk, oi = _take(wsi, oi, 1)
    w_scri, oi = _take(wsi, oi, nefc + nb)
    # float part, likewise
    of = 0
    fv, of = _take2(wsf, of, 15, nv)
    m_di, q, w_g, w_y, w_gradg = fv[0], fv[1], fv[2], fv[3], fv[4]
    w_grad, w_tmpnv, w_Qa, l_g1, l_y1 = fv[5], fv[6], fv[7], fv[8], fv[9]
    l_yk, l_tmpnv, dvec, c_tmp, c_Mt = fv[10], fv[11], fv[12], fv[13], fv[14]
    fe, of = _take2(wsf, of, 9, nefc)
    cmu, w_jar, w_f, w_hdiag, w_tmpefc, w_tmpefc2 = fe[0], fe[1], fe[2], fe[3], fe[4], fe[5]
    l_dfd, Jd, w_nuk = fe[6], fe[7], fe[8]
    cfric, of = _take2(wsf, of, nefc, 5)
    fz, of = _take2(wsf, of, 3, nz)
    w_h, l_hk, l_h1 = fz[0], fz[1], fz[2]
    fb, of = _take2(wsf, of, 4, nb)
    w_w, w_nu, l_wk, l_w1 = fb[0], fb[1], fb[2], fb[3]
    fr, of = _take2(wsf, of, 4, m2)
    e2s, w_r2, l_rk, l_r1 = fr[0], fr[1], fr[2], fr[3]
    Q, of = _take2(wsf, of, nv, nv)
    w_P, of = _take2(wsf, of, nv, nv)
    w_Hm, of = _take2(wsf, of, nv, nv)
    w_LH, of = _take2(wsf, of, nv, nv)
    Ka2s, of = _take2(wsf, of, m2, nv)
    w_K2, of = _take2(wsf, of, m2, nv)
    Kf2s, of = _take2(wsf, of, m2, nefc)
    w_Z, of = _take2(wsf, of, nv, nv + nz + nb + m2)
    w_hcone, of = _take2(wsf, of, ncone, 36)
    m_q, of = _take(wsf, of, nv * (nv + 1) // 2)
    l_evalpha, of = _take(wsf, of, 2 * nefc + 1)
    w_scr, of = _take(wsf, of, _scratch_size(nv, nefc, nz, nb, m2))
    if of != nf or oi != ni:  # pragma: no cover - _ws_sizes out of sync with the carving
        stats[ST_STATUS] = STATUS_NUMERICAL_ERROR
        return
    w_hcone3 = w_hcone.reshape((ncone, 6, 6))
    for i in range(nefc):
        w_state[i] = 0
        w_kink[i] = 0
        w_release[i] = 0
        w_hdiag[i] = 0.0
        fact_state[i] = -1
        prev_kink[i] = 0
    for j in range(nb):
        w_bact[j] = 0
        fact_bact[j] = 0
    w_nk[0] = 0
    for i in range(ncone * 36):
        w_hcone[i // 36, i % 36] = 0.0
    for r in range(m2):
        for k in range(nv):
            w_K2[r, k] = 0.0

    row_kinds(efc_type, efc_id, con_dim, con_mu, con_fric, con_adr, kind, cdim, cmu, cfric)
    if ncone > 0:
        exact_ls = 0
    if qld.shape[0] > 0:  # MuJoCo's factor of M (qLD, after mj_fwdPosition)
        Lrn, Lra, Lci, Lq, Ldi = Mrownnz, Mrowadr, Mcolind, qld, qldinv
    else:
        Lrn, Lra, Lci, Lq, Ldi = m_rn, m_ra, m_ci, m_q, m_di
        if not ldl_dense(M, Lrn, Lra, Lci, Lq, Ldi):
            stats[ST_STATUS] = STATUS_NUMERICAL_ERROR
            return
    rho_e = scales[0, :nz]
    rho_b = scales[1, :nb]
    sc_e = scales[2, :nz]
    sc_b = scales[3, :nb]
    if iparams[IPAR_PATTERN] == 1:
        _sparse_rows(Ceq, ce_idx, ce_nnz)
        _sparse_rows(Cbox, cb_idx, cb_nnz)
        iparams[IPAR_PATTERN] = 0
    # nonzero columns of each row of J (shared by the rows of an elliptic contact)
    i = 0
    while i < nefc:
        if kind[i] != ROW_CONE:  # one row: branch-free compaction
            cnt = 0
            for k in range(nv):
                jnz[i, cnt] = k
                cnt += J[i, k] != 0.0
            jnnz[i] = cnt
            i += 1
            continue
        rows = cdim[i]
        cnt = 0
        for k in range(nv):
            nzk = False
            for r in range(rows):
                if J[i + r, k] != 0.0:
                    nzk = True
            if nzk:
                jnz[i, cnt] = k
                cnt += 1
        for r in range(rows):
            jnnz[i + r] = cnt
            for p in range(cnt):
                jnz[i + r, p] = jnz[i, p]
        i += rows
    # cost
    c0 = _assemble_cost(M, mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, Q, q, c_tmp, c_Mt)
    for r in range(m2):
        sw = math.sqrt(wf[r])
        for k in range(nv):
            Ka2s[r, k] = sw * Ka2[r, k]
        for i in range(nefc):
            Kf2s[r, i] = sw * Kf2[r, i]
        e2s[r] = sw * e2[r]
    pb = Prob(M, Lrn, Lra, Lci, Lq, Ldi, c, J, aref, D, R, floss, kind, cdim, cmu, cfric, jnz, jnnz,
              Ceq, ce_idx, ce_nnz, Cbox, cb_idx, cb_nnz, lo, hi, rho_e, rho_b, sc_e, sc_b,
              Q, q, Ka2s, Kf2s, e2s)
    wk = Work(w_jar, w_f, w_state, w_hdiag, w_hcone3, w_g, w_y, w_h, w_w, w_nu, w_bact, w_r2,
              w_gradg, w_grad, w_tmpnv, w_tmpefc, w_tmpefc2, w_K2, w_P, w_Hm, w_LH,
              w_kink, w_release, w_nk, w_Z, w_kidx, w_nuk, w_scr, w_scri, w_Qa)
    ls = (l_rowstate, l_g1, l_y1, l_yk, l_hk, l_h1, l_wk, l_w1, l_rk, l_r1, l_dfd, l_tmpnv,
          l_evalpha, l_evrow, l_evtype, l_bhi, l_blo, l_order)
    have_factor = False
    if iparams[IPAR_SCALES] == 1 or iparams[IPAR_SINCE_SCALES] >= iparams[IPAR_SCALE_INTERVAL]:
        _scales(pb, Bdir, rho, w_tmpnv, scales[0], scales[1], scales[2], scales[3])
        iparams[IPAR_SCALES] = 0
        iparams[IPAR_SINCE_SCALES] = 0
    else:
        iparams[IPAR_SINCE_SCALES] += 1

    # ---- safeguard (IPAR_SAFEGUARD): a scale of reasonable accelerations, ``ascale`` = the
    # largest of 1 + ‖M⁻¹(−c)‖ + ‖M⁻¹q‖ (the free acceleration and the cost's pull), 1 + |aref_i|
    # (constraint reference accelerations) and 1 + |e2_r| (cost targets).  The last two alone
    # are a lower bound ``alo``: a test that passes with it passes with ``ascale``, so the two
    # solves with M are only made when a test does not pass with the bound (or to start cold).
    a_free = c_Mt
    alo = 1.0
    for i in range(nefc):
        alo = max(alo, 1.0 + abs(aref[i]))
    for r in range(m2):
        alo = max(alo, 1.0 + abs(e2s[r]))
    ascale = -1.0  # not computed yet
    safeguard = iparams[IPAR_SAFEGUARD] == 1
    nsafe = 0
    cold = False  # the current attempt started from the free acceleration
    if safeguard:
        an = math.sqrt(_dot(a, a))
        if not an <= GUESS_LIMIT * alo:
            ascale = _accel_scale(pb, c, q, a_free, c_tmp, alo)
            if not an <= GUESS_LIMIT * ascale:  # non-finite or absurd initial guess: start cold
                nsafe += 1
                cold = True
                _cold_start(a, a_free, lam, mu_lo, mu_hi)
    gnorm = 0.0
    for attempt in range(2):
        if attempt == 1:
            # the first attempt failed (non-finite or huge step, a numerical failure, or no
            # convergence from a non-neutral guess): restart from the free acceleration with
            # fresh multipliers, no KKT first step
            nsafe += 1
            cold = True
            if ascale < 0.0:
                ascale = _accel_scale(pb, c, q, a_free, c_tmp, alo)
            _cold_start(a, a_free, lam, mu_lo, mu_hi)
            for i in range(nefc):
                w_kink[i] = 0
                w_release[i] = 0
                fact_state[i] = -1
                prev_kink[i] = 0
            have_factor = False
            newton_dual_first = False
        else:
            newton_dual_first = newton_dual == 1
        # counts of this attempt
        iters = 0
        duals = 0
        nfact = 0
        events_total = 0
        ls_evals = 0
        status = STATUS_CONVERGED
        phi, ell = _evaluate(pb, wk, a, lam, mu_lo, mu_hi)
        if not (math.isfinite(phi) and _all_finite(wk.grad)):
            status = STATUS_NUMERICAL_ERROR
            if safeguard and attempt == 0:
                continue
            break

        gnorm = math.sqrt(_dot(wk.grad, wk.grad))
        tol_grad = max(tol_grad0, params[PAR_TOL_GRAD] * math.sqrt(_dot(wk.g, wk.g)))
        stall_rounds = 0
        kkt_first = newton_dual_first
        done = False
        while not done:
            # ---- inner Gauss-Newton iterations on the augmented Lagrangian
            stalled = False
            exact = False  # the last step landed on the exact minimizer of its piece / face
            releases = 0
            just_released = False
            kink_gnorm = 0.0
            probed = False
            while True:
                same = _same_pattern(wk, fact_state, fact_bact, have_factor)
                for i in range(nefc):
                    if wk.kink[i] != prev_kink[i]:
                        exact = False
                        break
                factored = 0
                if not same:
                    if not _build_hessian(pb, wk):
                        status = STATUS_NUMERICAL_ERROR
                        done = True
                        break
                    nfact += 1
                    factored = 1
                    have_factor = True
                    _save_pattern(wk, fact_state, fact_bact)
                nk = wk.nk[0]
                if nk == 0:
                    gnorm = math.sqrt(_dot(wk.grad, wk.grad))
                    if gnorm <= tol_grad or (same and exact):
                        break
                    if kkt_first:
                        # first step of the solve: update the multipliers together with it (KKT
                        # step of the current piece) when the constraints are violated
                        kkt_first = False
                        fe, fb = _feasibility(pb, wk)
                        if (fe > tol_feas or fb > tol_feas) and duals < max_dual and \
                                _dual_newton(pb, wk, _pinned(wk), lam, mu_lo, mu_hi, True):
                            duals += 1
                            if factored == 1:  # wk.P was just built at this a
                                phi = _reevaluate_multipliers_piece(pb, wk, a, lam, mu_lo, mu_hi,
                                                                    ell)
                            else:
                                phi = _reevaluate_multipliers(pb, wk, a, lam, mu_lo, mu_hi, ell)
                            continue
                    for k in range(nv):
                        dvec[k] = -wk.grad[k]
                    chol_solve(wk.LH, dvec, dvec)
                    if math.sqrt(_dot(dvec, dvec)) <= 1e-14 * (1.0 + math.sqrt(_dot(a, a))):
                        break  # roundoff floor
                else:
                    kidx = _pinned(wk)
                    nu = wk.nuk[:nk]
                    gnorm = _face_step(pb, wk, kidx, dvec, nu)
                    tiny = math.sqrt(_dot(dvec, dvec)) <= 1e-14 * (1.0 + math.sqrt(_dot(a, a)))
                    if gnorm <= tol_grad or (same and exact) or tiny:
                        if releases > nefc or \
                                not _release(pb, wk, kidx, nu, max(tol_grad, 10.0 * gnorm)):
                            break  # no side of any pinned row descends: a kink local minimum
                        releases += 1
                        kink_gnorm = gnorm
                        just_released = True
                        exact = False
                        phi, ell = _evaluate(pb, wk, a, lam, mu_lo, mu_hi)
                        continue
                if iters >= max_iter:
                    status = STATUS_MAX_ITERATIONS
                    done = True
                    break
                dphi0 = _dot(wk.grad, dvec)
                if not dphi0 < 0.0:
                    stalled = True
                    break
                _matvec(J, dvec, Jd)
                for i in range(nefc):
                    prev_kink[i] = wk.kink[i]
                    if wk.kink[i] != 0:
                        Jd[i] = 0.0
                nev = 0
                if exact_ls == 1:
                    alpha, nev = _linesearch_sweep(pb, wk, a, dvec, Jd, lam, mu_lo, mu_hi, ls)
                    events_total += nev
                    ls_evals += 1
                else:
                    alpha, ne_ = _linesearch_1d(pb, a, dvec, Jd, dphi0, lam, mu_lo, mu_hi, wk.scr,
                                                wk.scri)
                    ls_evals += ne_
                    if alpha * math.sqrt(_dot(dvec, dvec)) <= 1e-12 * (1.0 + math.sqrt(_dot(a, a))) \
                            and not probed:
                        # blocked by a kink (e.g. an elliptic zone boundary): rebuild the Newton
                        # step with the states the direction moves into, once
                        probed = True
                        _probe_states(pb, wk, a, dvec, Jd)
                        continue
                steplen = alpha * math.sqrt(_dot(dvec, dvec))
                if safeguard and not steplen <= STEP_LIMIT * alo:
                    if ascale < 0.0:
                        ascale = _accel_scale(pb, c, q, a_free, c_tmp, alo)
                    if not steplen <= STEP_LIMIT * ascale:
                        status = STATUS_NUMERICAL_ERROR  # a non-finite or absurd step: restart
                        done = True
                        break
                iters += 1
                phi_old = phi
                if alpha > 0.0:
                    for k in range(nv):
                        a[k] += alpha * dvec[k]
                    if exact_ls == 1 and nev == 0 and nk == 0:
                        phi, ell = _evaluate_step(pb, wk, a, alpha, Jd, l_g1, l_y1, l_tmpnv,
                                                  lam, mu_lo, mu_hi)
                    else:
                        phi, ell = _evaluate(pb, wk, a, lam, mu_lo, mu_hi)
                row = iters - 1
                if row < log.shape[0]:
                    nact = 0
                    for i in range(nefc):
                        if wk.state[i] != STATE_SATISFIED:
                            nact += 1
                    log[row, LOG_OBJECTIVE] = phi + c0
                    log[row, LOG_GRAD] = math.sqrt(_dot(wk.grad, wk.grad))
                    log[row, LOG_STEP] = alpha * math.sqrt(_dot(dvec, dvec))
                    log[row, LOG_ALPHA] = alpha
                    log[row, LOG_EVENTS] = nev
                    log[row, LOG_NACTIVE] = nact
                    log[row, LOG_FACTORED] = factored
                    log[row, LOG_OUTER] = duals
                if not alpha > 0.0:
                    if just_released:
                        gnorm = kink_gnorm  # the released side does not descend either: kink minimum
                    else:
                        stalled = True
                    break
                just_released = False
                probed = False
                if not (math.isfinite(phi) and _all_finite(wk.grad)):
                    status = STATUS_NUMERICAL_ERROR
                    done = True
                    break
                exact = exact_ls == 1 and alpha == 1.0 and nev == 0
                if (not exact) and phi >= phi_old and \
                        alpha * math.sqrt(_dot(dvec, dvec)) <= 1e-13 * (1.0 + math.sqrt(_dot(a, a))):
                    stalled = True
                    break
            if done:
                break
            # done when the rows hold and no multiplier is left on a slack row
            fe, fb = _dual_residual(pb, wk, mu_lo, mu_hi)
            if fe <= tol_feas and fb <= tol_feas:
                if stalled and gnorm > tol_grad:
                    status = STATUS_STALLED
                break
            if stalled:
                stall_rounds += 1
                if stall_rounds >= 2:
                    status = STATUS_STALLED  # multiplier updates cannot help a stuck inner solve
                    break
            if duals >= max_dual:
                status = STATUS_MAX_DUAL_UPDATES
                break
            # ---- multiplier update
            updated = False
            if newton_dual == 1:
                if not _same_pattern(wk, fact_state, fact_bact, have_factor):
                    if not _build_hessian(pb, wk):
                        status = STATUS_NUMERICAL_ERROR
                        break
                    nfact += 1
                    have_factor = True
                    _save_pattern(wk, fact_state, fact_bact)
                updated = _dual_newton(pb, wk, _pinned(wk), lam, mu_lo, mu_hi, False)
            if not updated:
                for e in range(nz):
                    lam[e] += rho_e[e] * wk.h[e]
                for j in range(nb):
                    if np.isfinite(hi[j]):
                        mu_hi[j] = max(0.0, mu_hi[j] + rho_b[j] * (wk.w[j] - hi[j]))
                    if np.isfinite(lo[j]):
                        mu_lo[j] = max(0.0, mu_lo[j] + rho_b[j] * (lo[j] - wk.w[j]))
            duals += 1
            phi = _reevaluate_multipliers(pb, wk, a, lam, mu_lo, mu_hi, ell)

        if status != STATUS_NUMERICAL_ERROR:
            an = math.sqrt(_dot(a, a))
            if safeguard and not an <= RESULT_LIMIT * alo:
                if ascale < 0.0:
                    ascale = _accel_scale(pb, c, q, a_free, c_tmp, alo)
                if not an <= RESULT_LIMIT * ascale:
                    status = STATUS_NUMERICAL_ERROR
        if not safeguard or status == STATUS_CONVERGED:
            break
        if status != STATUS_NUMERICAL_ERROR and cold:
            break  # a genuine non-convergence from the neutral start: report it

    fe, fb = _feasibility(pb, wk)
    for k in range(nv):
        out_g[k] = wk.g[k]
    for i in range(nefc):
        out_f[i] = wk.f[i]
        out_state[i] = wk.state[i]
    # controls
    clamped = 0
    _matvec(Bpinv, wk.g, out_w)
    for j in range(out_w.shape[0]):
        u = (out_w[j] - bias[j]) / gain[j]
        uc = min(max(u, ctrl_lo[j]), ctrl_hi[j])
        if abs(uc - u) > 1e-12 * (1.0 + abs(u)):
            clamped += 1
        out_ctrl[j] = uc
    stats[ST_STATUS] = status
    stats[ST_ITER] = iters
    stats[ST_DUAL] = duals
    stats[ST_FACT] = nfact
    stats[ST_GRAD] = gnorm
    stats[ST_FEAS_EQ] = fe
    stats[ST_FEAS_BOX] = fb
    stats[ST_OBJECTIVE] = phi + c0
    stats[ST_COST] = ell + c0
    stats[ST_EVENTS] = events_total
    stats[ST_LS_EVALS] = ls_evals
    stats[ST_CLAMPED] = clamped
    stats[ST_SAFEGUARD] = nsafe
