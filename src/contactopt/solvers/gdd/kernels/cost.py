"""Cost terms: the built-in terms' residuals (springs, centre of mass) and
``fill_problem``, which builds ``M``, ``c`` and the packed cost from MuJoCo's arrays
(``SI_*``, ``TC_*``, ``TERM_*``, ``DO_*`` layouts).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ....native import raw_f64
from .constants import FM
from .workspace import _cost_blocks


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _cross_add(l0, l1, l2, w0, w1, w2, r0, r1, r2):
    """``l + w × r`` (a velocity or acceleration moved to the offset ``r``)."""
    return l0 + w1 * r2 - w2 * r1, l1 + w2 * r0 - w0 * r2, l2 + w0 * r1 - w1 * r0


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _point_acc(aa0, aa1, aa2, al0, al1, al2, w0, w1, w2, vl0, vl1, vl2, r0, r1, r2):
    """Classical acceleration ``a_lin + α × r + ω × (v_lin + ω × r)`` of the point at offset
    ``r`` of a body with the spatial acceleration ``(α, a_lin)`` and velocity ``(ω, v_lin)``."""
    v0, v1, v2 = _cross_add(vl0, vl1, vl2, w0, w1, w2, r0, r1, r2)
    t0, t1, t2 = _cross_add(al0, al1, al2, aa0, aa1, aa2, r0, r1, r2)
    return _cross_add(t0, t1, t2, w0, w1, w2, v0, v1, v2)


@njit(cache=True, fastmath=FM, error_model="numpy")
def com_bias(cdof_dot, qvel, ancestors, bodies, roots, mass, cvel, xipos, subtree_com, out):
    """Centre-of-mass acceleration at ``a = 0`` (``J̇_c v``, m/s²) from MuJoCo's com-based data.

    Body b's spatial acceleration at ``a = 0`` is ``Σ_j ancestors[k, j] cdof_dot_j v_j``
    (``(angular, linear)``, reference point ``subtree_com[root]``); the classical
    acceleration of its centre of mass is ``α × r + a_lin + ω × (v_lin + ω × r)``,
    ``r = xipos_b − subtree_com[root]``.  ``out (3,)`` gets the mass-weighted mean.
    """
    nbod = bodies.shape[0]
    nv = qvel.shape[0]
    total = 0.0
    for c in range(3):
        out[c] = 0.0
    acc6 = np.empty(6)
    for k in range(nbod):
        for c in range(6):
            acc6[c] = 0.0
        for j in range(nv):
            w = ancestors[k, j] * qvel[j]
            if w != 0.0:
                for c in range(6):
                    acc6[c] += cdof_dot[j, c] * w
        b = bodies[k]
        rt = roots[k]
        a0, a1, a2 = _point_acc(acc6[0], acc6[1], acc6[2], acc6[3], acc6[4], acc6[5],
                                cvel[b, 0], cvel[b, 1], cvel[b, 2], cvel[b, 3], cvel[b, 4], cvel[b, 5],
                                xipos[b, 0] - subtree_com[rt, 0], xipos[b, 1] - subtree_com[rt, 1],
                                xipos[b, 2] - subtree_com[rt, 2])
        mb = mass[k]
        out[0] += mb * a0
        out[1] += mb * a1
        out[2] += mb * a2
        total += mb
    for c in range(3):
        out[c] /= total


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _capped(l0, l1, l2, cap):
    """``l`` scaled to the norm ``cap`` when ``cap > 0`` and ``‖l‖ > cap`` (else ``l``)."""
    if cap > 0.0:
        n = math.sqrt(l0 * l0 + l1 * l1 + l2 * l2)
        if n > cap:
            sc = cap / n
            return l0 * sc, l1 * sc, l2 * sc
    return l0, l1, l2


@njit(cache=True, fastmath=FM, error_model="numpy")
def spring_residual(jac, jacdot, qvel, pos, goal, k, b, cap, use_jacdot, out):
    """Residual ``e = J̇ v − a*`` of a 3-row frame term (end effector, centre of mass) with a
    :class:`~contactopt.solvers.gdd.costs.SpringDamper` position target.

    ``a* = k (goal − pos) − b (jac v)`` (m/s²), scaled to norm ``cap`` when ``cap > 0``
    and ``‖a*‖ > cap``.

    Args:
      jac: ``(3, nv)`` frame Jacobian J; jacdot: ``(3, nv)`` its time derivative J̇
        (read only when ``gains[3] != 0``); qvel: ``(nv,)`` v;
      pos, goal: ``(3,)`` frame and goal positions, m;
      k [1/s²], b [1/s], cap [m/s²] or 0 (no cap): the spring-damper gains;
      use_jacdot: nonzero to compute the bias ``J̇ v`` here.
      out: ``(3,)``; on input the bias acceleration ``J̇ v`` when ``use_jacdot == 0``
        (e.g. from :func:`com_bias`), on output the residual e.
    """
    nv = qvel.shape[0]
    lin0 = 0.0
    lin1 = 0.0
    lin2 = 0.0
    for r in range(3):
        vel = 0.0
        for j in range(nv):
            vel += jac[r, j] * qvel[j]
        x = k * (goal[r] - pos[r]) - b * vel
        if r == 0:
            lin0 = x
        elif r == 1:
            lin1 = x
        else:
            lin2 = x
    lin0, lin1, lin2 = _capped(lin0, lin1, lin2, cap)
    for r in range(3):
        bias = out[r]
        if use_jacdot != 0.0:
            bias = 0.0
            for j in range(nv):
                bias += jacdot[r, j] * qvel[j]
        out[r] = bias - (lin0 if r == 0 else (lin1 if r == 1 else lin2))


@njit(cache=True, fastmath=FM, error_model="numpy")
def com_spring_residual(cdof_dot, qvel, ancestors, bodies, roots, mass, cvel, xipos, subtree_com,
                        body, jac, goal, k, b, cap, out):
    """Residual ``e = J̇_c v − a*`` of a centre-of-mass term with a spring-damper target:
    :func:`com_bias` followed by :func:`spring_residual` at ``subtree_com[body]`` (one call)."""
    com_bias(cdof_dot, qvel, ancestors, bodies, roots, mass, cvel, xipos, subtree_com, out)
    spring_residual(jac, jac, qvel, subtree_com[body], goal, k, b, cap, 0.0, out)


# ---------------------------------------------------------------- built-in terms from MuJoCo's arrays

# header of the static int array ``si`` (model structure and cost plan)
SI_NBODY = 0
SI_NJNT = 1
SI_NTERM = 2
SI_PARENT = 3  # offsets of: body_parentid
SI_ROOT = 4  # body_rootid
SI_DOFADR = 5  # body_dofadr
SI_DOFNUM = 6  # body_dofnum
SI_DOFPARENT = 7  # dof_parentid
SI_MROWNNZ = 8  # M_rownnz
SI_MROWADR = 9  # M_rowadr
SI_MCOLIND = 10  # M_colind
SI_JTYPE = 11  # jnt_type
SI_JQPOS = 12  # jnt_qposadr
SI_JDOF = 13  # jnt_dofadr
SI_TERMS = 14  # the term table (nterm, TERM_NCOL)
SI_XFRC = 15  # 1: check xfrc_applied
SI_NHEAD = 16

# columns of the term table
TC_CODE = 0
TC_SLOT = 1  # index among the mass terms / diagonal terms / residual rows (first row)
TC_BODY = 2
TC_SITE = 3  # site id, or -1 (body frame origin)
TC_LIST = 4  # offset in si of the subtree body list (centre of mass)
TC_COUNT = 5  # its length
TC_PW = 6  # parameter-table index of the term's weight array [w_eff, ...]
TC_PT = 7  # parameter-table index of the target array
TC_PX = 8  # parameter-table index of a third array (masses of the subtree list / kd gains)
TERM_NCOL = 9

# term codes
TERM_FRAME = 1  # end effector: 3 rows at a site / body origin with a spring target
TERM_COM = 2  # centre of mass of a subtree: 3 rows with a spring target
TERM_DAMPING = 3  # mass metric, target −βv  (weight array: [w, β])
TERM_MASS_FIXED = 4  # mass metric, fixed target (nv,)
TERM_MASS_PD = 5  # mass metric, PD target kp⊙(qref ⊖ q) − kd⊙v
TERM_DIAG_FIXED = 6  # diagonal metric (mask), fixed target
TERM_DIAG_PD = 7  # diagonal metric (mask), PD target

# spring target array layout: goal (3), k, b, cap (0: none), axis mask (3), offset a0 (3)
SPRING_LEN = 12

# offsets of MuJoCo's fixed-size arrays in the data span (``doff``)
DO_M = 0
DO_QPOS = 1
DO_QVEL = 2
DO_BIAS = 3
DO_PASSIVE = 4
DO_APPLIED = 5
DO_XFRC = 6
DO_CDOF = 7
DO_CDOFDOT = 8
DO_CVEL = 9
DO_SUBCOM = 10
DO_XIPOS = 11
DO_XPOS = 12
DO_SITEXPOS = 13
DO_QLD = 14  # MuJoCo's factor of M (M_rownnz/M_rowadr/M_colind layout) and 1/D
DO_QLDINV = 15
DO_N = 16

_CHAIN_NONE = -1


@njit(cache=True, fastmath=FM, error_model="numpy")
def _chain_body(si, b):
    """First body from ``b`` toward the root that has dofs (0: welded to the world)."""
    par = si[SI_PARENT]
    num = si[SI_DOFNUM]
    while b > 0 and si[num + b] == 0:
        b = si[par + b]
    return b


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _chain_start(si, span, doff, b, p0, p1, p2):
    """Start of a walk over the dofs that move the point ``p`` of body ``b`` (``i = si[dp + i]``
    with ``dp = si[SI_DOFPARENT]``, while ``i ≥ 0``): the last dof of the first body from ``b``
    toward the root that has dofs (−1: welded to the world) and ``p − subtree_com[root]``, the
    point relative to its tree's centre of mass (``cdof``'s reference point)."""
    bc = _chain_body(si, b)
    if bc == 0:
        return -1, 0.0, 0.0, 0.0
    oc = doff[DO_SUBCOM] + 3 * si[si[SI_ROOT] + bc]
    i = si[si[SI_DOFADR] + bc] + si[si[SI_DOFNUM] + bc] - 1
    return i, p0 - span[oc], p1 - span[oc + 1], p2 - span[oc + 2]


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _cdof_point(span, o, x0, x1, x2):
    """Translational velocity at the offset ``x`` of the unit motion ``cdof`` at ``span[o:o+6]``
    (``(angular, linear)``): ``lin + ang × x``."""
    return _cross_add(span[o + 3], span[o + 4], span[o + 5], span[o], span[o + 1], span[o + 2],
                      x0, x1, x2)


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_point_jac(si, span, doff, b, p0, p1, p2, scale, Jr, r0):
    """``Jr[r0:r0+3] += scale · J_p(point, body b)`` (mj_jac's translational part from cdof)."""
    i, x0, x1, x2 = _chain_start(si, span, doff, b, p0, p1, p2)
    dp = si[SI_DOFPARENT]
    cd = doff[DO_CDOF]
    while i >= 0:
        j0, j1, j2 = _cdof_point(span, cd + 6 * i, x0, x1, x2)
        Jr[r0, i] += scale * j0
        Jr[r0 + 1, i] += scale * j1
        Jr[r0 + 2, i] += scale * j2
        i = si[dp + i]


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_point_bias(si, span, doff, b, p0, p1, p2, scale, out, o0):
    """``out[o0:o0+3] += scale · J̇_p v`` at a point of body b (acceleration at a = 0), from
    cdof_dot and cvel: ``a_lin + α × r + ω × (v_lin + ω × r)`` with ``r`` from the subtree com."""
    i, r0, r1, r2 = _chain_start(si, span, doff, b, p0, p1, p2)
    if i < 0:
        return
    acc0 = 0.0
    acc1 = 0.0
    acc2 = 0.0
    acc3 = 0.0
    acc4 = 0.0
    acc5 = 0.0
    dp = si[SI_DOFPARENT]
    cd = doff[DO_CDOFDOT]
    qv = doff[DO_QVEL]
    while i >= 0:
        vi = span[qv + i]
        o = cd + 6 * i
        acc0 += span[o] * vi
        acc1 += span[o + 1] * vi
        acc2 += span[o + 2] * vi
        acc3 += span[o + 3] * vi
        acc4 += span[o + 4] * vi
        acc5 += span[o + 5] * vi
        i = si[dp + i]
    ov = doff[DO_CVEL] + 6 * b
    a0, a1, a2 = _point_acc(acc0, acc1, acc2, acc3, acc4, acc5, span[ov], span[ov + 1],
                            span[ov + 2], span[ov + 3], span[ov + 4], span[ov + 5], r0, r1, r2)
    out[o0] += scale * a0
    out[o0 + 1] += scale * a1
    out[o0 + 2] += scale * a2


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_com_jac(si, span, doff, comb, lo, dofw, Jr, r0):
    """``Jr[r0:r0+3] += J_c``: the Jacobian of a subtree's centre of mass, one pass over the dofs.

    Dof i moves the part of the subtree below its body rigidly, so (``mj_jacSubtreeCom``)
    ``J_c[:, i] = w_i (cdof_lin,i + cdof_ang,i × (x_i − c_root))`` with ``x_i`` the centre of
    mass of that part and ``w_i`` its share of the subtree's mass.  ``comb[lo + i]``: the body
    whose ``subtree_com`` is ``x_i`` (the dof's own body inside the subtree, the subtree's root
    for the dofs above it, −1 for dofs that do not move it); ``dofw[i] = w_i``.
    """
    nv = Jr.shape[1]
    cd = doff[DO_CDOF]
    osc = doff[DO_SUBCOM]
    rt = si[SI_ROOT]
    for i in range(nv):
        b = comb[lo + i]
        if b < 0:
            continue
        w = dofw[i]
        ox = osc + 3 * b
        oc = osc + 3 * si[rt + b]
        j0, j1, j2 = _cdof_point(span, cd + 6 * i, span[ox] - span[oc], span[ox + 1] - span[oc + 1],
                                 span[ox + 2] - span[oc + 2])
        Jr[r0, i] += w * j0
        Jr[r0 + 1, i] += w * j1
        Jr[r0 + 2, i] += w * j2


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_com_bias(si, span, doff, bodies, lo, cnt, frac, out, o0, cacc):
    """``out[o0:o0+3] += J̇_c v = Σ_k frac_k J̇(x_b) v`` over the bodies ``b = bodies[lo + k]``.

    One pass down the tree gives every body's spatial acceleration at ``a = 0`` (com frame,
    ``cacc_b = cacc_parent + Σ_{dofs i of b} cdof_dot_i v_i``, the recursion of
    ``mj_rnePostConstraint`` without ``qacc`` and gravity); body b's centre of mass then has
    the classical acceleration ``a_lin + α × r + ω × (v_lin + ω × r)``, ``r = x_b − c_root``.
    ``cacc (≥ 6 nbody,)``: scratch.  ``frac``: the bodies' shares of the subtree's mass.
    """
    nbody = si[SI_NBODY]
    par = si[SI_PARENT]
    da = si[SI_DOFADR]
    dn = si[SI_DOFNUM]
    cd = doff[DO_CDOFDOT]
    qv = doff[DO_QVEL]
    for c in range(6):
        cacc[c] = 0.0
    for b in range(1, nbody):
        p = si[par + b]
        for c in range(6):
            cacc[6 * b + c] = cacc[6 * p + c]
        adr = si[da + b]
        for i in range(adr, adr + si[dn + b]):
            vi = span[qv + i]
            o = cd + 6 * i
            for c in range(6):
                cacc[6 * b + c] += span[o + c] * vi
    osc = doff[DO_SUBCOM]
    oxi = doff[DO_XIPOS]
    ocv = doff[DO_CVEL]
    rt = si[SI_ROOT]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    for k in range(cnt):
        b = bodies[lo + k]
        oc = osc + 3 * si[rt + b]
        ox = oxi + 3 * b
        ov = ocv + 6 * b
        a = 6 * b
        a0, a1, a2 = _point_acc(cacc[a], cacc[a + 1], cacc[a + 2], cacc[a + 3], cacc[a + 4],
                                cacc[a + 5], span[ov], span[ov + 1], span[ov + 2], span[ov + 3],
                                span[ov + 4], span[ov + 5], span[ox] - span[oc],
                                span[ox + 1] - span[oc + 1], span[ox + 2] - span[oc + 2])
        f = frac[k]
        s0 += f * a0
        s1 += f * a1
        s2 += f * a2
    out[o0] += s0
    out[o0 + 1] += s1
    out[o0 + 2] += s2


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_body_ft(si, span, doff, b, f, fo, c):
    """``c −= J_p(xipos_b)ᵀ force + J_r(b)ᵀ torque`` for ``f[fo:fo+6] = (force, torque)`` (mj_applyFT)."""
    ox = doff[DO_XIPOS] + 3 * b
    i, x0, x1, x2 = _chain_start(si, span, doff, b, span[ox], span[ox + 1], span[ox + 2])
    dp = si[SI_DOFPARENT]
    cd = doff[DO_CDOF]
    while i >= 0:
        o = cd + 6 * i
        jp0, jp1, jp2 = _cdof_point(span, o, x0, x1, x2)
        c[i] -= (jp0 * f[fo] + jp1 * f[fo + 1] + jp2 * f[fo + 2]
                 + span[o] * f[fo + 3] + span[o + 1] * f[fo + 4] + span[o + 2] * f[fo + 5])
        i = si[dp + i]


@njit(cache=True, fastmath=FM, error_model="numpy")
def sub_quat(qa0, qa1, qa2, qa3, qb0, qb1, qb2, qb3, out, o):
    """``out[o:o+3]``: rotation vector ``res`` with ``qb · quat(res) = qa`` (mju_subQuat)."""
    # qdif = conj(qb) * qa
    w = qb0 * qa0 + qb1 * qa1 + qb2 * qa2 + qb3 * qa3
    x = qb0 * qa1 - qb1 * qa0 - qb2 * qa3 + qb3 * qa2
    y = qb0 * qa2 + qb1 * qa3 - qb2 * qa0 - qb3 * qa1
    z = qb0 * qa3 - qb1 * qa2 + qb2 * qa1 - qb3 * qa0
    s = math.sqrt(x * x + y * y + z * z)
    if s < 1e-15:
        out[o] = 0.0
        out[o + 1] = 0.0
        out[o + 2] = 0.0
        return
    speed = 2.0 * math.atan2(s, w)
    if speed > math.pi:
        speed -= 2.0 * math.pi
    out[o] = x / s * speed
    out[o + 1] = y / s * speed
    out[o + 2] = z / s * speed


@njit(cache=True, fastmath=FM, error_model="numpy")
def differentiate_pos(si, qpos, qo, qref, out):
    """``out (nv,) = qref ⊖ qpos`` (mj_differentiatePos with dt = 1); ``qpos[qo:]`` is read."""
    for j in range(si[SI_NJNT]):
        t = si[si[SI_JTYPE] + j]
        pa = si[si[SI_JQPOS] + j]
        va = si[si[SI_JDOF] + j]
        if t == 0:  # free
            for k in range(3):
                out[va + k] = qref[pa + k] - qpos[qo + pa + k]
            pa += 3
            va += 3
        if t <= 1:  # free (rotation) or ball
            sub_quat(qref[pa], qref[pa + 1], qref[pa + 2], qref[pa + 3],
                     qpos[qo + pa], qpos[qo + pa + 1], qpos[qo + pa + 2], qpos[qo + pa + 3], out, va)
        else:
            out[va] = qref[pa] - qpos[qo + pa]


@njit(cache=True, fastmath=FM, error_model="numpy")
def _spring_rows(tp, vel0, vel1, vel2, p0, p1, p2, e, r0):
    """``e[r0:r0+3] −= a*`` for a spring target array ``tp`` (layout: SPRING_LEN) at position p."""
    k = tp[3]
    b = tp[4]
    cap = tp[5]
    l0 = k * tp[6] * (tp[0] - p0) - b * vel0
    l1 = k * tp[7] * (tp[1] - p1) - b * vel1
    l2 = k * tp[8] * (tp[2] - p2) - b * vel2
    l0, l1, l2 = _capped(l0, l1, l2, cap)
    e[r0] -= l0 + tp[9]
    e[r0 + 1] -= l1 + tp[10]
    e[r0 + 2] -= l2 + tp[11]


@njit(cache=True, inline="always", error_model="numpy")
def _param(ptab, k):
    """Term parameter array ``k``: ``ptab (n, 2)`` holds the address and length of each (the
    terms' own float64 arrays, kept alive by the caller)."""
    return raw_f64(ptab[k, 0], ptab[k, 1])


@njit(cache=True, fastmath=FM, error_model="numpy")
def fill_problem(si, span, doff, ptab, M, c, costbuf, dims, dq):
    """Dense inertia ``M``, force ``c`` and the packed cost (``CostArrays.buffer`` layout, sizes
    ``dims = (km, kd, m1, m2)``) of the built-in terms, from MuJoCo's arrays in ``span``.

    ``c = qfrc_bias − qfrc_passive − qfrc_applied − Σ_b J_bᵀ xfrc_b``; the frame terms use
    Jacobians from ``cdof`` (as ``mj_jac``), the bias ``J̇v`` from ``cdof_dot``/``cvel`` and the
    subtree centre of mass Jacobian ``Σ m_b J(xipos_b) / m`` (as ``mj_jacSubtreeCom``, per dof
    from ``subtree_com``: :func:`_add_com_jac`).
    ``dq (nv + 6 nbody,)``: scratch.  Only the entries of ``M`` in MuJoCo's sparsity pattern are written:
    the others must be zero on entry (the solver's buffer is made with zeros and only ever
    written here).
    """
    nv = M.shape[0]
    # inertia (lower-triangular CSR rows of d.M)
    om = doff[DO_M]
    rn = si[SI_MROWNNZ]
    ra = si[SI_MROWADR]
    ci = si[SI_MCOLIND]
    for i in range(nv):
        adr = si[ra + i]
        for p in range(si[rn + i]):
            j = si[ci + adr + p]
            v = span[om + adr + p]
            M[i, j] = v
            M[j, i] = v
    ob = doff[DO_BIAS]
    op = doff[DO_PASSIVE]
    oa = doff[DO_APPLIED]
    for i in range(nv):
        c[i] = span[ob + i] - span[op + i] - span[oa + i]
    if si[SI_XFRC] != 0:
        ox = doff[DO_XFRC]
        for b in range(1, si[SI_NBODY]):
            nz = False
            for k in range(6):
                if span[ox + 6 * b + k] != 0.0:
                    nz = True
            if nz:
                _add_body_ft(si, span, doff, b, span, ox + 6 * b, c)
    km = dims[0]
    kd = dims[1]
    m1 = dims[2]
    mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, _ = _cost_blocks(costbuf, km, kd, m1, nv)
    qv = doff[DO_QVEL]
    to = si[SI_TERMS]
    for t in range(si[SI_NTERM]):
        row = to + TERM_NCOL * t
        code = si[row + TC_CODE]
        slot = si[row + TC_SLOT]
        pw = _param(ptab, si[row + TC_PW])
        w = pw[0]
        if code == TERM_FRAME or code == TERM_COM:
            for r in range(3):
                wa[slot + r] = w
            if w == 0.0:
                continue
            for r in range(3):
                e1[slot + r] = 0.0
                for k in range(nv):
                    Ka1[slot + r, k] = 0.0
            if code == TERM_FRAME:
                b = si[row + TC_BODY]
                s = si[row + TC_SITE]
                if s >= 0:
                    opx = doff[DO_SITEXPOS] + 3 * s
                else:
                    opx = doff[DO_XPOS] + 3 * b
                p0 = span[opx]
                p1 = span[opx + 1]
                p2 = span[opx + 2]
                _add_point_jac(si, span, doff, b, p0, p1, p2, 1.0, Ka1, slot)
                _add_point_bias(si, span, doff, b, p0, p1, p2, 1.0, e1, slot)
            else:
                # TC_LIST: comb (nv) | bodies (count); TC_PX: dof weights (nv) | mass shares
                lo_ = si[row + TC_LIST]
                px = _param(ptab, si[row + TC_PX])
                _add_com_jac(si, span, doff, si, lo_, px, Ka1, slot)
                _add_com_bias(si, span, doff, si, lo_ + nv, si[row + TC_COUNT], px[nv:], e1, slot,
                              dq[nv:])
                osc = doff[DO_SUBCOM] + 3 * si[row + TC_BODY]
                p0 = span[osc]
                p1 = span[osc + 1]
                p2 = span[osc + 2]
            vel0 = 0.0
            vel1 = 0.0
            vel2 = 0.0
            for k in range(nv):
                vk = span[qv + k]
                vel0 += Ka1[slot, k] * vk
                vel1 += Ka1[slot + 1, k] * vk
                vel2 += Ka1[slot + 2, k] * vk
            _spring_rows(_param(ptab, si[row + TC_PT]), vel0, vel1, vel2, p0, p1, p2, e1, slot)
        elif code == TERM_DAMPING:
            mass_w[slot] = w
            beta = pw[1]
            for k in range(nv):
                mass_t[slot, k] = -beta * span[qv + k]
        elif code == TERM_MASS_FIXED or code == TERM_DIAG_FIXED:
            tgt = _param(ptab, si[row + TC_PT])
            if code == TERM_MASS_FIXED:
                mass_w[slot] = w
                for k in range(nv):
                    mass_t[slot, k] = tgt[k]
            else:
                diag_w[slot] = w
                for k in range(nv):
                    diag_t[slot, k] = tgt[k]
                    diag_m[slot, k] = tgt[nv + k]
        else:  # PD targets: parameter PT = [kp (nv), kd (nv), qref (nq)], PX = mask (diag)
            tp = _param(ptab, si[row + TC_PT])
            if w != 0.0:
                differentiate_pos(si, span, doff[DO_QPOS], tp[2 * nv:], dq)
            else:
                for k in range(nv):
                    dq[k] = 0.0
            if code == TERM_MASS_PD:
                mass_w[slot] = w
                for k in range(nv):
                    mass_t[slot, k] = tp[k] * dq[k] - tp[nv + k] * span[qv + k]
            else:
                diag_w[slot] = w
                mask = _param(ptab, si[row + TC_PX])
                for k in range(nv):
                    diag_t[slot, k] = tp[k] * dq[k] - tp[nv + k] * span[qv + k]
                    diag_m[slot, k] = mask[k]
