"""Force-law stage of :class:`~contactopt.contact.compliant_batch.CompliantContactBatch`: the
compiled (numba) pass over the collected contacts (:func:`_forces_kernel`, used where
:data:`~contactopt.contact.compliant_batch.NATIVE_FORCES` is set) that evaluates the forces,
``∂F/∂v`` and the closed-form ``∂F/∂q`` with the classification of the local geometry, and the
geometry codes shared with the NumPy reference."""

from __future__ import annotations

import math

import mujoco
import numpy as np
from numba import njit as _njit

from .compliant import hunt_crossley_factor_scalar, softplus_normal_force_scalar

_T_PLANE, _T_SPHERE, _T_CAPSULE, _T_CYLINDER, _T_BOX = (
    int(mujoco.mjtGeom.mjGEOM_PLANE), int(mujoco.mjtGeom.mjGEOM_SPHERE), int(mujoco.mjtGeom.mjGEOM_CAPSULE),
    int(mujoco.mjtGeom.mjGEOM_CYLINDER), int(mujoco.mjtGeom.mjGEOM_BOX))
_NONE, _FLAT, _POINT, _LINE = 0, 1, 2, 3  # local geometry at a witness point (_classify)


# =========================================================================== compiled force evaluation
#
# :meth:`CompliantContactBatch.forces` after the collection loop (the filters, the contact Jacobians, the force
# law, ``∂F/∂v`` and the closed-form ``∂F/∂q`` with the classification of the local geometry) as one
# compiled pass over the raw contacts, configuration by configuration, accumulating each contact's
# terms into its configuration's outputs.  The formulas are those of the NumPy reference
# (:meth:`CompliantContactBatch._collect`, :meth:`CompliantContactBatch._classify`,
# :meth:`CompliantContactBatch._position_derivative` and the rest of :meth:`CompliantContactBatch.forces`), which
# remains the fallback; the results agree to rounding (sums in another order).


@_njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _classify_side(t, size, wx, wy, wz, ox, oy, oz, have_frames, R, cx, cy, cz, out, side):
    """:meth:`CompliantContactBatch._classify` of one side: geom type ``t``, ``size (3,)``, witness point
    ``w``, outward normal ``o``, geom rotation ``R (9,)`` (row-major) and centre ``c`` (read when
    ``have_frames``).  Writes ``out[side] = (kind, ρ, core (3), axis (3))``."""
    kind = _NONE
    rho = 0.0
    if t == _T_PLANE:
        kind = _FLAT
    elif t == _T_SPHERE:
        kind = _POINT
        rho = size[0]
    elif t == _T_CAPSULE:
        rho = size[0]
    ax0 = ax1 = ax2 = 0.0
    px, py, pz = wx - rho * ox, wy - rho * oy, wz - rho * oz  # the core
    if have_frames:
        if t == _T_CAPSULE:
            dx, dy, dz = px - cx, py - cy, pz - cz
            zc = abs(R[2] * dx + R[5] * dy + R[8] * dz)
            kind = _LINE if zc < size[1] * (1 - 1e-9) else _POINT
            ax0, ax1, ax2 = R[2], R[5], R[8]
        elif t == _T_CYLINDER:
            dx, dy, dz = wx - cx, wy - cy, wz - cz
            l0 = R[0] * dx + R[3] * dy + R[6] * dz
            l1 = R[1] * dx + R[4] * dy + R[7] * dz
            l2 = R[2] * dx + R[5] * dy + R[8] * dz
            Rc, hc = size[0], size[1]
            on_side = abs(math.hypot(l0, l1) - Rc) <= 1e-6 * Rc
            on_cap = abs(abs(l2) - hc) <= 1e-6 * hc
            if on_side and not on_cap:
                kind = _LINE
                rho = Rc
            elif on_cap and not on_side:
                kind = _FLAT
            px, py, pz = wx - rho * ox, wy - rho * oy, wz - rho * oz
            ax0, ax1, ax2 = R[2], R[5], R[8]
        elif t == _T_BOX:
            dx, dy, dz = px - cx, py - cy, pz - cz
            nf = 0
            free = -1
            for a in range(3):
                la = R[a] * dx + R[3 + a] * dy + R[6 + a] * dz
                if abs(la) >= size[a] * (1 - 1e-6):
                    nf += 1
                elif free < 0:
                    free = a
            free = max(free, 0)
            kind = _FLAT if nf == 1 else (_LINE if nf == 2 else (_POINT if nf == 3 else _NONE))
            ax0, ax1, ax2 = R[free], R[3 + free], R[6 + free]
    elif t == _T_CAPSULE:
        kind = _NONE
    out[side, 0] = kind
    out[side, 1] = rho
    out[side, 2] = px
    out[side, 3] = py
    out[side, 4] = pz
    out[side, 5] = ax0
    out[side, 6] = ax1
    out[side, 7] = ax2


@_njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _cross_cols(a, b, out, n):
    """``out[:, j] = a[:, j] × b[:, j]`` for the first ``n`` columns of ``(3, ·)`` arrays."""
    for j in range(n):
        out[0, j] = a[1, j] * b[2, j] - a[2, j] * b[1, j]
        out[1, j] = a[2, j] * b[0, j] - a[0, j] * b[2, j]
        out[2, j] = a[0, j] * b[1, j] - a[1, j] * b[0, j]


@_njit(cache=True, nogil=True, error_model="numpy")
def _forces_kernel(top, cfg, dist, geom, fric, excl, pos, frame, cdof, scom, xmat, xpos, qvel,
                   w_max, geom_body, body_weld, body_root, body_mask, dof_moves, frictionless, friction,
                   gtype, gsize, before, stiffness, smoothing, dissipation_velocity, stiction_velocity,
                   force_threshold, want_dv, want_dq, F, dFdv, dFdq, count, dofs, exact):
    """:meth:`CompliantContactBatch.forces` of the raw contacts ``[0, top)`` of :meth:`CompliantContactBatch._collect_raw`.

    ``friction < 0``: MuJoCo's per-pair coefficient (0 for condim 1); ``body_mask`` empty: no body
    filter; ``xmat`` empty: no geom frames (no capsule, cylinder or box in the model).  Writes ``F``,
    ``count``, ``dofs`` and, when asked, ``dFdv`` and ``dFdq``, ``exact`` (zeroed / True on entry).

    Each contact works on its ``na`` active dofs ``act`` (those that move one of its two bodies;
    every other column of its Jacobians and row / column of its derivatives is zero): the local
    arrays below hold columns ``0 … na−1`` for the dofs ``act[0 … na−1]``.
    """
    nv = F.shape[1]
    have_frames = xmat.shape[0] > 0
    masked = body_mask.shape[0] > 0
    vs2 = stiction_velocity ** 2
    thr = 1e2 * force_threshold
    acc = np.empty(top, dtype=np.intp)
    fcs = np.empty(top)
    act = np.empty(nv, dtype=np.intp)
    vl = np.empty(nv)
    bef = np.empty((nv, nv))
    jp = np.empty((2, 3, nv))
    jr = np.empty((2, 3, nv))
    A = np.empty((3, nv))
    J = np.empty((3, nv))
    GJ = np.empty((3, nv))
    Fm = np.empty((3, 3))
    G = np.zeros((3, 3))
    # ∂F/∂q work arrays
    geo = np.empty((2, 8))
    u_b = np.empty((3, nv))
    om_b = np.empty((3, nv))
    t1 = np.empty((3, nv))
    t2 = np.empty((3, nv))
    Av = np.empty((3, nv))
    Dc = np.empty((2, 3, nv))
    Dn = np.empty((3, nv))
    Dp = np.empty((3, nv))
    dJr = np.empty((3, nv))
    inner = np.empty((3, nv))
    C = np.empty((nv, nv))
    Jn = np.empty(nv)
    a = np.empty(nv)
    Gv = np.empty((3, 3))
    Gn = np.empty((3, 3))
    Rt = np.empty((3, 3))
    RP = np.empty((3, 3))
    cpos = np.empty((2, 3))
    i = 0
    while i < top:
        k = cfg[i]
        end = i
        while end < top and cfg[end] == k:
            end += 1
        # filters (as _collect) and the largest force of the configuration
        nacc = 0
        fc_max = -np.inf
        for c in range(i, end):
            if not (dist[c] < w_max) or excl[c] != 0:
                continue
            b1, b2 = geom_body[geom[c, 0]], geom_body[geom[c, 1]]
            if body_weld[b1] == body_weld[b2]:
                continue
            if masked and not (body_mask[b1] or body_mask[b2]):
                continue
            acc[nacc] = c
            fc0, _ = softplus_normal_force_scalar(dist[c], stiffness, smoothing)
            fcs[nacc] = fc0
            fc_max = max(fc_max, fcs[nacc])
            nacc += 1
        i = end
        v = qvel[k]
        for ia in range(nacc):
            c = acc[ia]
            g1, g2 = geom[c, 0], geom[c, 1]
            bod = (geom_body[g1], geom_body[g2])
            phi = dist[c]
            px, py, pz = pos[c, 0], pos[c, 1], pos[c, 2]
            na = 0
            for j in range(nv):
                if dof_moves[bod[0], j] != 0.0 or dof_moves[bod[1], j] != 0.0:
                    act[na] = j
                    vl[na] = v[j]
                    dofs[k, j] = True
                    na += 1
            # Jacobians of both bodies at p (mj_jac): jp = v + ω × (p − c_root), jr = ω
            for s in range(2):
                b = bod[s]
                rt = body_root[b]
                ox, oy, oz = px - scom[k, rt, 0], py - scom[k, rt, 1], pz - scom[k, rt, 2]
                for q in range(na):
                    j = act[q]
                    if dof_moves[b, j] != 0.0:
                        wx, wy, wz = cdof[k, j, 0], cdof[k, j, 1], cdof[k, j, 2]
                        jp[s, 0, q] = cdof[k, j, 3] + wy * oz - wz * oy
                        jp[s, 1, q] = cdof[k, j, 4] + wz * ox - wx * oz
                        jp[s, 2, q] = cdof[k, j, 5] + wx * oy - wy * ox
                        jr[s, 0, q] = wx
                        jr[s, 1, q] = wy
                        jr[s, 2, q] = wz
                    else:
                        for r in range(3):
                            jp[s, r, q] = 0.0
                            jr[s, r, q] = 0.0
            for r in range(3):  # rows t1, t2, n of the contact frame
                rr = (r + 1) % 3
                for l in range(3):
                    Fm[r, l] = frame[c, 3 * rr + l]
            for q in range(na):
                for l in range(3):
                    A[l, q] = jp[1, l, q] - jp[0, l, q]
                for r in range(3):
                    J[r, q] = Fm[r, 0] * A[0, q] + Fm[r, 1] * A[1, q] + Fm[r, 2] * A[2, q]
            if friction < 0:
                mu = 0.0 if frictionless[g1, g2] else fric[c]
            else:
                mu = friction
            vc0 = vc1 = vc2 = 0.0
            for q in range(na):
                vc0 += J[0, q] * vl[q]
                vc1 += J[1, q] * vl[q]
                vc2 += J[2, q] * vl[q]
            fc, dfc = softplus_normal_force_scalar(phi, stiffness, smoothing)
            d, dd = hunt_crossley_factor_scalar(vc2, dissipation_velocity)
            fn = fc * d
            den = math.sqrt(vs2 + (vc0 * vc0 + vc1 * vc1))
            cc = mu / den
            ft0, ft1 = -(cc * fn) * vc0, -(cc * fn) * vc1
            for q in range(na):
                F[k, act[q]] += J[0, q] * ft0 + J[1, q] * ft1 + J[2, q] * fn
            count[k] += 1
            if want_dv:  # Σ Jᵀ (∂γ/∂v_c) J
                dfn_dvn = fc * dd
                den2 = den ** 2
                G[0, 0] = -(cc * fn) * (1.0 - vc0 * vc0 / den2)
                G[0, 1] = -(cc * fn) * (0.0 - vc0 * vc1 / den2)
                G[1, 0] = -(cc * fn) * (0.0 - vc1 * vc0 / den2)
                G[1, 1] = -(cc * fn) * (1.0 - vc1 * vc1 / den2)
                G[0, 2] = (-cc * vc0) * dfn_dvn
                G[1, 2] = (-cc * vc1) * dfn_dvn
                G[2, 2] = dfn_dvn
                for r in range(3):
                    for q in range(na):
                        GJ[r, q] = G[r, 0] * J[0, q] + G[r, 1] * J[1, q] + G[r, 2] * J[2, q]
                for q in range(na):
                    for l in range(na):
                        dFdv[k, act[q], act[l]] += J[0, q] * GJ[0, l] + J[1, q] * GJ[1, l] + J[2, q] * GJ[2, l]
            if not want_dq:
                continue
            # ------------------------------------------------ ∂F/∂q (_position_derivative)
            n0, n1, n2 = frame[c, 0], frame[c, 1], frame[c, 2]
            dv0 = dv1 = dv2 = 0.0
            for q in range(na):
                Jn[q] = n0 * A[0, q] + n1 * A[1, q] + n2 * A[2, q]
                dv0 += A[0, q] * vl[q]
                dv1 += A[1, q] * vl[q]
                dv2 += A[2, q] * vl[q]
            vn = n0 * dv0 + n1 * dv1 + n2 * dv2
            vt0, vt1, vt2 = dv0 - vn * n0, dv1 - vn * n1, dv2 - vn * n2
            sden = math.sqrt(vs2 + (vt0 * vt0 + vt1 * vt1 + vt2 * vt2))
            ms = mu / sden
            r0, r1, r2 = -ms * vt0, -ms * vt1, -ms * vt2
            nr0, nr1, nr2 = n0 + r0, n1 + r1, n2 + r2
            dd_ = dfc * d
            for q in range(na):
                a[q] = A[0, q] * (dd_ * nr0) + A[1, q] * (dd_ * nr1) + A[2, q] * (dd_ * nr2)
            for q in range(na):  # the signed-distance term
                for l in range(na):
                    dFdq[k, act[q], act[l]] += a[q] * Jn[l]
            significant = fcs[ia] > max(thr, 1e-5 * fc_max)
            if not significant:
                continue
            hp = 0.5 * phi
            _classify_side(gtype[g1], gsize[g1], px - hp * n0, py - hp * n1, pz - hp * n2, n0, n1, n2,
                           have_frames, xmat[k, g1] if have_frames else gsize[g1],
                           xpos[k, g1, 0] if have_frames else 0.0, xpos[k, g1, 1] if have_frames else 0.0,
                           xpos[k, g1, 2] if have_frames else 0.0, geo, 0)
            _classify_side(gtype[g2], gsize[g2], px + hp * n0, py + hp * n1, pz + hp * n2, -n0, -n1, -n2,
                           have_frames, xmat[k, g2] if have_frames else gsize[g2],
                           xpos[k, g2, 0] if have_frames else 0.0, xpos[k, g2, 1] if have_frames else 0.0,
                           xpos[k, g2, 2] if have_frames else 0.0, geo, 1)
            k1, k2 = int(geo[0, 0]), int(geo[1, 0])
            rho0, rho1 = geo[0, 1], geo[1, 1]
            L = phi + rho0 + rho1
            flat1 = k1 == _FLAT and k2 == _POINT
            flat2 = k1 == _POINT and k2 == _FLAT
            cores = ((k1 == _POINT and k2 >= _POINT) or (k1 == _LINE and k2 == _POINT)) and L > 1e-9
            if not (flat1 or flat2 or cores):
                exact[k] = False
                continue
            f0, f1, f2 = fn * nr0, fn * nr1, fn * nr2  # force on geom 2 (world)
            nvec = (n0, n1, n2)
            dvv = (dv0, dv1, dv2)
            nrv = (nr0, nr1, nr2)
            vtv = (vt0, vt1, vt2)
            g = fc * dd
            sd2 = sden ** 2
            for r in range(3):
                for l in range(3):
                    e = 1.0 if r == l else 0.0
                    Rt[r, l] = -ms * (e - vtv[r] * vtv[l] / sd2)
            for r in range(3):  # Rt Pn
                for l in range(3):
                    RP[r, l] = Rt[r, l] - (Rt[r, 0] * n0 + Rt[r, 1] * n1 + Rt[r, 2] * n2) * nvec[l]
            for r in range(3):
                for l in range(3):
                    e = 1.0 if r == l else 0.0
                    Gv[r, l] = nrv[r] * (g * nvec[l]) + fn * RP[r, l]
                    Gn[r, l] = (nrv[r] * (g * dvv[l]) + fn * e
                                - fn * (Rt[r, 0] * (n0 * dvv[l]) + Rt[r, 1] * (n1 * dvv[l]) + Rt[r, 2] * (n2 * dvv[l])
                                        + Rt[r, l] * vn))
            # material second-order kinematics: ∂u_j/∂q_k = ω_k × u_j − ω_j × u_k (k before j; a dof
            # before an active one is active: it moves the same body)
            for q in range(na):
                for l in range(na):
                    bef[q, l] = before[act[q], act[l]]
                    C[q, l] = 0.0
                for r in range(3):
                    Av[r, q] = 0.0
            for s in range(2):
                sign = 1.0 if s == 1 else -1.0
                u = jp[s]
                om = jr[s]
                for r in range(3):  # u_b[:, kk] = Σ_j u[:, j] v_j before[j, kk], om_b likewise
                    for kk in range(na):
                        su = 0.0
                        so = 0.0
                        for q in range(na):
                            bv = vl[q] * bef[q, kk]
                            su += u[r, q] * bv
                            so += om[r, q] * bv
                        u_b[r, kk] = su
                        om_b[r, kk] = so
                _cross_cols(om, u_b, t1, na)
                _cross_cols(om_b, u, t2, na)
                for r in range(3):
                    for q in range(na):
                        Av[r, q] += sign * (t1[r, q] - t2[r, q])
                # P[j, kk] = u_j · (f × ω_kk); C += sign before (P − Pᵀ)
                for kk in range(na):
                    t1[0, kk] = f1 * om[2, kk] - f2 * om[1, kk]
                    t1[1, kk] = f2 * om[0, kk] - f0 * om[2, kk]
                    t1[2, kk] = f0 * om[1, kk] - f1 * om[0, kk]
                for q in range(na):
                    for kk in range(na):
                        if bef[q, kk] != 0.0:
                            pjk = u[0, q] * t1[0, kk] + u[1, q] * t1[1, kk] + u[2, q] * t1[2, kk]
                            pkj = u[0, kk] * t1[0, q] + u[1, kk] * t1[1, q] + u[2, kk] * t1[2, q]
                            C[q, kk] += sign * bef[q, kk] * (pjk - pkj)
            # Jacobians of the core points, dn̂ and dp
            for s in range(2):
                cpos[s, 0] = geo[s, 2] - px
                cpos[s, 1] = geo[s, 3] - py
                cpos[s, 2] = geo[s, 4] - pz
                for q in range(na):
                    w0, w1, w2 = jr[s, 0, q], jr[s, 1, q], jr[s, 2, q]
                    Dc[s, 0, q] = jp[s, 0, q] + (w1 * cpos[s, 2] - w2 * cpos[s, 1])
                    Dc[s, 1, q] = jp[s, 1, q] + (w2 * cpos[s, 0] - w0 * cpos[s, 2])
                    Dc[s, 2, q] = jp[s, 2, q] + (w0 * cpos[s, 1] - w1 * cpos[s, 0])
            if flat1 or flat2:  # the normal of the flat side's face; p from the other core
                fs = 0 if flat1 else 1
                os_ = 1 - fs
                sg = -1.0 if flat1 else 1.0
                coef = geo[os_, 1] + 0.5 * phi
                for q in range(na):
                    w0, w1, w2 = jr[fs, 0, q], jr[fs, 1, q], jr[fs, 2, q]
                    Dn[0, q] = w1 * n2 - w2 * n1
                    Dn[1, q] = w2 * n0 - w0 * n2
                    Dn[2, q] = w0 * n1 - w1 * n0
                    for r in range(3):
                        Dp[r, q] = Dc[os_, r, q] + sg * (coef * Dn[r, q]) + sg * (0.5 * nvec[r] * Jn[q])
            else:
                for side in (1, 0):  # a line core slides: its nearest point moves
                    if int(geo[side, 0]) != _LINE:
                        continue
                    sgn = -1.0 if side == 1 else 1.0
                    e0, e1, e2 = geo[side, 5], geo[side, 6], geo[side, 7]
                    x0, x1, x2 = e1 * n2 - e2 * n1, e2 * n0 - e0 * n2, e0 * n1 - e1 * n0  # e × n̂
                    for q in range(na):
                        ds = (e0 * (Dc[1 - side, 0, q] - Dc[side, 0, q]) + e1 * (Dc[1 - side, 1, q] - Dc[side, 1, q])
                              + e2 * (Dc[1 - side, 2, q] - Dc[side, 2, q]))
                        ds += sgn * L * (x0 * jr[side, 0, q] + x1 * jr[side, 1, q] + x2 * jr[side, 2, q])
                        Dc[side, 0, q] += e0 * ds
                        Dc[side, 1, q] += e1 * ds
                        Dc[side, 2, q] += e2 * ds
                hr = 0.5 * (rho0 - rho1)
                for q in range(na):
                    d0 = Dc[1, 0, q] - Dc[0, 0, q]
                    d1 = Dc[1, 1, q] - Dc[0, 1, q]
                    d2 = Dc[1, 2, q] - Dc[0, 2, q]
                    nd = n0 * d0 + n1 * d1 + n2 * d2
                    Dn[0, q] = (d0 - n0 * nd) / L
                    Dn[1, q] = (d1 - n1 * nd) / L
                    Dn[2, q] = (d2 - n2 * nd) / L
                    for r in range(3):
                        Dp[r, q] = 0.5 * (Dc[0, r, q] + Dc[1, r, q]) + hr * Dn[r, q]
            wv0 = wv1 = wv2 = 0.0  # relative angular velocity
            for q in range(na):
                for r in range(3):
                    dJr[r, q] = jr[1, r, q] - jr[0, r, q]
                wv0 += dJr[0, q] * vl[q]
                wv1 += dJr[1, q] * vl[q]
                wv2 += dJr[2, q] * vl[q]
            for q in range(na):
                q0 = Av[0, q] + (wv1 * Dp[2, q] - wv2 * Dp[1, q])
                q1 = Av[1, q] + (wv2 * Dp[0, q] - wv0 * Dp[2, q])
                q2 = Av[2, q] + (wv0 * Dp[1, q] - wv1 * Dp[0, q])
                for r in range(3):
                    inner[r, q] = (Gv[r, 0] * q0 + Gv[r, 1] * q1 + Gv[r, 2] * q2
                                   + Gn[r, 0] * Dn[0, q] + Gn[r, 1] * Dn[1, q] + Gn[r, 2] * Dn[2, q])
                t2[0, q] = f1 * Dp[2, q] - f2 * Dp[1, q]  # f × dp
                t2[1, q] = f2 * Dp[0, q] - f0 * Dp[2, q]
                t2[2, q] = f0 * Dp[1, q] - f1 * Dp[0, q]
            for q in range(na):
                for l in range(na):
                    dFdq[k, act[q], act[l]] += (
                        C[q, l] - (dJr[0, q] * t2[0, l] + dJr[1, q] * t2[1, l] + dJr[2, q] * t2[2, l])
                        + (A[0, q] * inner[0, l] + A[1, q] * inner[1, l] + A[2, q] * inner[2, l]))


def _cross(a, b):
    """Cross product along axis 1 of ``(M, 3, …)`` arrays (broadcasting)."""
    return np.stack([a[:, 1] * b[:, 2] - a[:, 2] * b[:, 1],
                     a[:, 2] * b[:, 0] - a[:, 0] * b[:, 2],
                     a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]], axis=1)
