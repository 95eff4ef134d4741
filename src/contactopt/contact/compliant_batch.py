"""Batched evaluation of the compliant contact model over many configurations (IDTO's hot path).

:meth:`CompliantContactModel.forces` answers one state at a time through
:func:`~contactopt.contact.geometry.contact_space` (general, validated, ~0.1–0.3 ms of
Python per call).  An IDTO iteration needs the contact force at every time step (and, for
finite-difference derivatives, at ``nv`` perturbed configurations per step), so
:class:`CompliantContactBatch` splits the work in two:

1. a lean per-configuration loop of MuJoCo C calls on a private model copy
   (``mj_kinematics``, ``mj_collision``, ``mj_comPos`` with every margin raised to
   ``φ_max``), which copies out the raw contact data (signed distance, geoms, friction,
   point, frame) and the configuration's ``cdof`` and ``subtree_com``;
2. one evaluation, for all contacts of all configurations, of the contact Jacobians
   ``F (Jp(b2, p) − Jp(b1, p))`` (MuJoCo's ``mj_jac`` formula; the same rows as
   :func:`contact_space` builds), of the force law and of the derivatives below: a compiled
   pass over the contacts (:data:`NATIVE_FORCES`, :func:`_forces_kernel`), or the vectorized
   NumPy reference it reproduces to rounding.

The pairs, sign conventions, filters (``φ < φ_max``, MuJoCo's exclusions, the body filter of
the :class:`CompliantContactModel`, ``μ = 0`` for condim-1 contacts) and the force law are those of
:meth:`CompliantContactModel.forces`; the generalized forces agree to rounding.

Derivatives per configuration (``(nv, nv)`` each):

* ``∂F/∂v`` exact: ``Σ_i J_iᵀ (∂γ_i/∂v_c) J_i``;
* ``∂F/∂q`` in closed form (:meth:`CompliantContactBatch._position_derivative`).  With the world
  force ``f_i = f_n (n̂ + r)`` of pair ``i`` and ``A_i = Jp(b2, p) − Jp(b1, p)``,
  ``F = Σ_i A_iᵀ f_i`` and::

      dF_i = (dA_i)ᵀ f_i + A_iᵀ (f_φ dφ + f_Δv d(A_i v) + f_n̂ dn̂)

  - ``dφ = n̂ᵀ A_i dq`` (the normal row of the contact Jacobian);
  - the change of the Jacobians at a fixed point, from MuJoCo's motion axes ``S_j = (ω_j, v_j)``
    (``cdof``): ``∂u_j/∂q_k = ω_k × u_j − ω_j × u_k`` for the point velocities ``u_j`` and every
    dof ``k`` that turns axis ``j`` (ancestors; the same ball / free-rotation joint);
  - the motion of the contact point ``p`` and of the normal ``n̂``, from the local geometry at
    the witness points (:meth:`CompliantContactBatch._classify`): a *flat* side (plane, box face) turns
    its normal with its body; a *point* core (sphere centre, capsule end, box corner) or a
    *line* core (capsule segment, box edge, cylinder axis, along which the nearest point slides)
    carries the witness point at its radius along ``n̂``.

  Exact (to rounding) for flat–point, point–point and point–line pairs: spheres, capsules,
  planes, boxes and cylinders in the configurations IDTO uses (Kurtz et al., remark 3: spheres
  and half-spaces).  For other pairs (two flat faces, line against line or flat, a cylinder's
  rim, ellipsoids, meshes) only the signed-distance term ``A_iᵀ f_φ n̂ᵀA_i`` is kept and
  :attr:`BatchForces.exact` is False for the configuration, unless that pair's force is
  negligible (below 100× the query threshold or 10⁻⁵ × the configuration's largest contact
  force: its other terms, which scale with the force, are then below finite-difference accuracy);
  :class:`~contactopt.solvers.idto.problem.IDTOProblem` then uses forward differences for that step.
"""

from __future__ import annotations

import copy
import ctypes
import math
import threading

import mujoco
import numpy as np
from numba import njit as _njit

from .. import native
from ..errors import ParameterError, as_array
from .compliant import (
    CompliantContactModel,
    hunt_crossley_factor,
    hunt_crossley_factor_scalar,
    regularized_friction,
    softplus_normal_force,
    softplus_normal_force_scalar,
)
from .geometry import SYNCED_FIELDS

__all__ = ["CompliantContactBatch", "BatchForces"]

# =========================================================================== native collection loop
#
# The per-configuration loop of :meth:`CompliantContactBatch._collect` (``mj_kinematics``,
# ``mj_collision``, ``mj_comPos`` and the copies of the contact data) runs as a numba kernel without the GIL that
# calls the very MuJoCo C functions the bindings call (the mechanism of
# :mod:`contactopt.native`: the ``libmujoco`` of the bindings, on the ``MjModel`` /
# ``MjData`` pointers of the Python objects), so its outputs are bit for bit those of the Python
# loop, which remains the reference and the fallback.  The kernel reads ``mjData.ncon`` and the
# ``mjData.contact`` pointer from the ``mjData`` struct and the contact fields from the
# ``mjContact`` array at byte offsets measured once from the bindings' own views
# (:func:`_contact_layout`, checked on a probe model with contacts; any mismatch disables the
# kernel).  As in :mod:`contactopt.native`: a MuJoCo *fatal* error inside the kernel goes to
# MuJoCo's default handler, which prints it and ends the process, where the Python loop raised
# ``mujoco.FatalError``.

#: run the compiled collection loop where available (False: the Python loop; the same results)
NATIVE_COLLECT = True


_mj_kinematics, _mj_compos, _mj_collision = (native.mj_kinematics, native.mj_compos,
                                              native.mj_collision)


def _struct_offsets(d: mujoco.MjData):
    """Byte offsets in the ``mjData`` struct of ``ncon`` and of the ``contact`` pointer (the field
    after the ``cfrc_ext`` pointer, found by its address among the pointer slots after ``ncon``)."""
    ncon_off = native.ncon_field_offset(d)
    return ncon_off, native.pointer_field_offset(d, d.cfrc_ext.ctypes.data, ncon_off) + 8


def _contact_layout():
    """``(ncon offset, contact pointer offset, sizeof(mjContact), field offsets)`` or None.

    Field offsets (bytes in ``mjContact``): dist, pos, frame, friction, geom, exclude.  Measured
    on two MjData of a probe model (overlapping spheres and a box) and checked against the
    bindings' ``d.ncon`` and ``d.contact`` views at several configurations.
    """
    if not native.NATIVE:
        return None
    try:
        m = mujoco.MjModel.from_xml_string(
            "<mujoco><worldbody><geom type='sphere' size='0.1'/>"
            "<body><freejoint/><geom type='sphere' size='0.1'/></body>"
            "<body pos='0 0.05 0'><freejoint/><geom type='box' size='0.1 0.1 0.1'/></body>"
            "</worldbody></mujoco>")
        layout = None
        for trial in range(2):
            d = mujoco.MjData(m)
            offs = _struct_offsets(d)
            for shift in (0.0, 0.03, 5.0):  # 3 contacts, fewer, none
                d.qpos[:] = m.qpos0
                d.qpos[0] += shift
                mujoco.mj_kinematics(m, d)
                mujoco.mj_collision(m, d)
                n = ctypes.c_int32.from_address(d._address + offs[0]).value
                if n != d.ncon:
                    return None
                if not n:
                    continue
                c = d.contact
                if ctypes.c_uint64.from_address(d._address + offs[1]).value != c.dist.ctypes.data:
                    return None
                a0 = c.dist.ctypes.data
                fields = tuple(getattr(c, f).ctypes.data - a0
                               for f in ("dist", "pos", "frame", "friction", "geom", "exclude"))
                cur = offs + (c.dist.strides[0], fields)
                if layout is not None and cur != layout:
                    return None
                layout = cur
        if layout is None or layout[2] % 8 or any(f % 8 for f in layout[3][:4]) or any(f % 4 for f in layout[3][4:]):
            return None
        return layout
    except Exception:  # noqa: BLE001  # pragma: no cover
        return None


_LAYOUT = _contact_layout()
_NO_X9, _NO_X3 = np.zeros((0, 0, 9)), np.zeros((0, 0, 3))
_NO_MASK = np.zeros(0, dtype=bool)
_CONTACT_FIELDS = np.array(_LAYOUT[3] if _LAYOUT is not None else (0,) * 6, dtype=np.int64)


@_njit(cache=True, nogil=True)
def _collect_kernel(m, d, ncon_off, con_off, stride, fields, qpos, dq, k0, top,
                    cfg, dist, geom, fric, excl, pos, frame,
                    d_cdof, d_scom, cdof, scom, want_x, d_xmat, d_xpos, xmat, xpos, status):
    """The loop of :meth:`CompliantContactBatch._collect` from configuration ``k0`` (contacts so far:
    ``top``).  ``status = (k, top, end)``: ``k == K`` when done, else configuration ``k`` needs
    ``end`` entries of capacity (its data are redone on the next call)."""
    K = qpos.shape[0]
    cap = dist.shape[0]
    nq = dq.shape[0]
    s8 = stride // 8
    s4 = stride // 4
    o_dist, o_pos, o_frame, o_fric = fields[0] // 8, fields[1] // 8, fields[2] // 8, fields[3] // 8
    o_geom, o_excl = fields[4] // 4, fields[5] // 4
    ncon_p = native.raw_i32(d + ncon_off, 1)
    con_p = native.raw_u64(d + con_off, 1)
    for k in range(k0, K):
        for j in range(nq):
            dq[j] = qpos[k, j]
        _mj_kinematics(m, d)
        _mj_collision(m, d)
        n = ncon_p[0]
        if n == 0:
            continue
        _mj_compos(m, d)
        cdof[k] = d_cdof
        scom[k] = d_scom
        if want_x:
            xmat[k] = d_xmat
            xpos[k] = d_xpos
        end = top + n
        if end > cap:
            status[0] = k
            status[1] = top
            status[2] = end
            return
        addr = con_p[0]
        cf = native.raw_f64(addr, n * s8)
        ci = native.raw_i32(addr, n * s4)
        for c in range(n):
            i = top + c
            b8 = c * s8
            b4 = c * s4
            cfg[i] = k
            dist[i] = cf[b8 + o_dist]
            geom[i, 0] = ci[b4 + o_geom]
            geom[i, 1] = ci[b4 + o_geom + 1]
            fric[i] = cf[b8 + o_fric]
            excl[i] = ci[b4 + o_excl]
            for j in range(3):
                pos[i, j] = cf[b8 + o_pos + j]
            for j in range(9):
                frame[i, j] = cf[b8 + o_frame + j]
        top = end
    status[0] = K
    status[1] = top
    status[2] = top

_DSBL_CONSTRAINT = int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
_DSBL_CONTACT = int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
_DSBL_OTHER = (int(mujoco.mjtDisableBit.mjDSBL_MIDPHASE) | int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
               | int(mujoco.mjtDisableBit.mjDSBL_EQUALITY) | int(mujoco.mjtDisableBit.mjDSBL_FRICTIONLOSS))
_ENBL_SLEEP = int(getattr(mujoco.mjtEnableBit, "mjENBL_SLEEP", 0))
_OPT_FIELDS = ("disableflags", "enableflags", "o_margin", "o_friction")
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

#: evaluate the forces and derivatives of the collected contacts as one compiled pass (False: the
#: NumPy reference; the same results up to rounding)
NATIVE_FORCES = True


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


class BatchForces:
    """Contact forces of ``K`` configurations.

    Attributes:
      F: ``(K, nv)`` generalized contact forces.
      dFdv: ``(K, nv, nv)`` exact ``∂F/∂v`` at fixed ``q`` (or None).
      dFdq: ``(K, nv, nv)`` closed-form ``∂F/∂q`` (module docstring; or None).
      count: ``(K,)`` number of active contacts of each configuration.
      dofs: ``(K, nv)`` bool, the dofs that move a body of some active contact of each
        configuration (the only ones the contact force can depend on, kinematic tree).
      exact: ``(K,)`` bool, ``dFdq`` is exact for the configuration (every contact has a
        supported geometry or a negligible force; module docstring).
    """

    __slots__ = ("F", "dFdv", "dFdq", "count", "dofs", "exact")

    def __init__(self, F, dFdv, dFdq, count, dofs=None, exact=None):
        self.F, self.dFdv, self.dFdq, self.count = F, dFdv, dFdq, count
        self.dofs = np.zeros(F.shape, dtype=bool) if dofs is None else dofs
        self.exact = np.ones(F.shape[0], dtype=bool) if exact is None else exact


class _Scratch:
    """One thread's private collision copy of the contact model's ``MjModel``.

    ``synced`` pairs each synced field's array in the user's model (a view, read at every sync)
    with its copy here.
    """

    def __init__(self, model: mujoco.MjModel):
        self.model = copy.deepcopy(model)
        self.data = mujoco.MjData(self.model)
        self.synced = tuple((getattr(model, f), getattr(self.model, f))
                            for f in SYNCED_FIELDS if getattr(model, f).size)
        self.opt_state = None  # the user's option values at the last sync
        self.per_config = 4.0  # contacts per configuration seen last (buffer capacity hint)


class CompliantContactBatch:
    """Vectorized compliant contact forces of a :class:`CompliantContactModel` (module docstring).

    Args:
      contact: the :class:`CompliantContactModel` (its model and parameters are read at every
        :meth:`forces` call, so edits of synced model fields and parameters take effect).

    Thread-safe: each thread uses its own private model copy.
    """

    def __init__(self, contact: CompliantContactModel):
        if not isinstance(contact, CompliantContactModel):
            raise ParameterError(f"CompliantContactBatch: contact must be a CompliantContactModel, got {type(contact).__name__}")
        self.contact = contact
        self.model = contact.model
        self._local = threading.local()
        m = self.model
        self._geom_body = m.geom_bodyid.astype(np.intp)
        # Combined condim of each geom pair (MuJoCo's rule: the higher-priority geom's, else the max),
        # explicit <pair>s override.  Only "is it 1" matters (frictionless).
        cd, pr = m.geom_condim.astype(int), m.geom_priority.astype(int)
        hi = pr[:, None] > pr[None, :]
        lo = pr[:, None] < pr[None, :]
        tab = np.where(hi, cd[:, None], np.where(lo, cd[None, :], np.maximum(cd[:, None], cd[None, :])))
        for p in range(m.npair):
            g1, g2 = int(m.pair_geom1[p]), int(m.pair_geom2[p])
            tab[g1, g2] = tab[g2, g1] = int(m.pair_dim[p])
        self._frictionless = tab == 1
        self._body_weld = m.body_weldid.astype(np.intp)
        self._body_root = m.body_rootid.astype(np.intp)
        # _dof_moves[b, j]: dof j moves body b (mj_jac's ancestor chain, from the nearest body with dofs)
        moves = np.zeros((m.nbody, m.nv))
        for b in range(m.nbody):
            c = b
            while c and not m.body_dofnum[c]:
                c = m.body_parentid[c]
            if not c:
                continue
            j = m.body_dofadr[c] + m.body_dofnum[c] - 1
            while j >= 0:
                moves[b, j] = 1.0
                j = m.dof_parentid[j]
        self._dof_moves = moves
        self._has_capsule = bool(np.isin(m.geom_type, (_T_CAPSULE, _T_CYLINDER, _T_BOX)).any())
        # _before[j, k]: the motion axis of dof j turns with dof k (∂S_j/∂q_k = S_k × S_j):
        # k moves a strict ancestor joint of j's, or k and j belong to the same ball joint or the
        # rotational part of the same free joint (local-frame tangent perturbations)
        before = np.zeros((m.nv, m.nv), dtype=bool)
        for j in range(m.nv):
            k = m.dof_parentid[j]
            while k >= 0:
                before[j, k] = True
                k = m.dof_parentid[k]
            jnt = m.dof_jntid[j]
            jt = int(m.jnt_type[jnt])
            a = int(m.jnt_dofadr[jnt])
            if jt == int(mujoco.mjtJoint.mjJNT_BALL):
                before[j, a:a + 3] = True
            elif jt == int(mujoco.mjtJoint.mjJNT_FREE) and j >= a + 3:
                before[j, a:a + 6] = True
        np.fill_diagonal(before, False)
        self._before = before.astype(float)
        self._gtype = m.geom_type.astype(np.intp)
        self._gsize = m.geom_size.copy()

    # ------------------------------------------------------------------ scratch

    def _scratch(self) -> _Scratch:
        s = getattr(self._local, "scratch", None)
        if s is None:
            s = self._local.scratch = _Scratch(self.model)
        return s

    def _sync(self, s: _Scratch, w_max: float) -> bool:
        """Re-sync the private copy with the user's model; False if contacts are disabled."""
        model, m2 = self.model, s.model
        flags = int(model.opt.disableflags)
        if flags & (_DSBL_CONSTRAINT | _DSBL_CONTACT):
            return False
        for src, dst in s.synced:
            np.copyto(dst, src)
        opt = model.opt
        state = (opt.disableflags, opt.enableflags, opt.o_margin, opt.o_friction.tobytes(), w_max)
        if state != s.opt_state:
            for name in _OPT_FIELDS:
                setattr(m2.opt, name, getattr(opt, name))
            m2.opt.enableflags = m2.opt.enableflags & ~_ENBL_SLEEP
            m2.opt.disableflags = m2.opt.disableflags | _DSBL_OTHER
            m2.opt.o_margin = max(m2.opt.o_margin, w_max)
            s.opt_state = state
        np.maximum(m2.geom_margin, w_max, out=m2.geom_margin)
        m2.geom_gap[:] = 0.0
        if m2.npair:
            np.maximum(m2.pair_margin, w_max, out=m2.pair_margin)
            m2.pair_gap[:] = 0.0
        return True

    # ------------------------------------------------------------------ ∂F/∂q

    def _position_derivative(self, phi, mu, geom, v, fc, dfc, d, dd, extra, fc_max):
        """``(∂F_i/∂q (M, nv, nv), exact (M,))`` of every contact (see the module docstring).

        World-frame force ``f = f_n (n̂ + r)``, ``r = −μ v_t/√(v_s² + |v_t|²)``, ``F_i = Aᵀ f`` with
        ``A = Jp(b2, p) − Jp(b1, p)``::

            dF_i = (dA)ᵀ f + Aᵀ (f_φ dφ + f_Δv d(A v) + f_n̂ dn̂)

        Each side of a pair is classified at its witness point as *flat* (a plane, a box face:
        the normal turns with the body), a *point* core (a sphere's centre, a capsule's end, a
        box corner) or a *line* core (a capsule's segment, a box edge) with a radius; pairs
        flat–point, point–point and point–line are exact, others keep the signed-distance term
        only (``exact`` False unless the force is negligible).
        """
        p = self.contact.params
        pos, n, jp, jr, ax, ctr = extra
        nv = jp.shape[-1]
        A = jp[:, 1] - jp[:, 0]  # (M, 3, nv)
        Jn = np.einsum("mk,mkv->mv", n, A)
        fn = fc * d
        dv = np.einsum("mkv,mv->mk", A, v)  # relative velocity Δv (world)
        vn = np.einsum("mk,mk->m", n, dv)
        vt = dv - vn[:, None] * n
        sden = np.sqrt(p.stiction_velocity ** 2 + np.einsum("mk,mk->m", vt, vt))
        r = -(mu / sden)[:, None] * vt
        f_phi = (dfc * d)[:, None] * (n + r)
        a = np.einsum("mkv,mk->mv", A, f_phi)
        out = a[:, :, None] * Jn[:, None, :]  # the signed-distance term
        # Every term but the signed-distance one scales with the contact's force: negligible below
        # 100× the query threshold or 1e-5 × the largest force of the configuration.
        significant = fc > np.maximum(1e2 * p.force_threshold, 1e-5 * fc_max)
        kind, rho, core, axis = self._classify(geom, pos, n, phi, ax, ctr)
        k1, k2 = kind[:, 0], kind[:, 1]
        L = phi + rho[:, 0] + rho[:, 1]
        flat1 = (k1 == _FLAT) & (k2 == _POINT)
        flat2 = (k1 == _POINT) & (k2 == _FLAT)
        cores = (((k1 == _POINT) & (k2 >= _POINT)) | ((k1 == _LINE) & (k2 == _POINT))) & (L > 1e-9)
        supported = flat1 | flat2 | cores
        exact = supported | ~significant
        ok = np.flatnonzero(supported & significant)
        if not ok.size:
            return out, exact
        K = ok.size
        A_, n_, v_, r_ = A[ok], n[ok], v[ok], r[ok]
        jp_, jr_, c_, rho_, phi_, L_, Jn_ = jp[ok], jr[ok], core[ok], rho[ok], phi[ok], L[ok], Jn[ok]
        fc_, dd_, fn_, vn_, dv_, sden_, mu_, vt_ = fc[ok], dd[ok], fn[ok], vn[ok], dv[ok], sden[ok], mu[ok], vt[ok]
        nr_ = n_ + r_
        f_ = fn_[:, None] * nr_  # force on geom 2 (world)
        eye = np.eye(3)
        # force-law partials (world): ∂f/∂Δv, ∂f/∂n̂
        Rt = -(mu_ / sden_)[:, None, None] * (eye - vt_[:, :, None] * vt_[:, None, :] / (sden_ ** 2)[:, None, None])
        Pn = eye - n_[:, :, None] * n_[:, None, :]
        g = fc_ * dd_
        Gv = nr_[:, :, None] * (g[:, None] * n_)[:, None, :] + fn_[:, None, None] * (Rt @ Pn)
        Gn = (nr_[:, :, None] * (g[:, None] * dv_)[:, None, :] + fn_[:, None, None] * eye
              - fn_[:, None, None] * (Rt @ (n_[:, :, None] * dv_[:, None, :] + vn_[:, None, None] * eye)))
        # material second-order kinematics at p: ∂u_j/∂q_k = ω_k × u_j − ω_j × u_k (k before j)
        Bv = v_[:, :, None] * self._before[None]  # (K, j, k): v_j [k before j]
        Av = np.zeros((K, 3, nv))
        C = np.zeros((K, nv, nv))
        for side, sign in ((1, 1.0), (0, -1.0)):
            u, om = jp_[:, side], jr_[:, side]  # (K, 3, nv)
            Av += sign * (_cross(om, u @ Bv) - _cross(om @ Bv, u))
            P = np.swapaxes(u, 1, 2) @ _cross(f_[:, :, None], om)  # P[j, k] = u_j · (f × ω_k)
            C += sign * self._before[None] * (P - np.swapaxes(P, 1, 2))  # C[j, k] = f · ∂u_j/∂q_k
        # geometry: Jacobians of the core points, dn̂ and dp
        Dc = [jp_[:, s] + _cross(jr_[:, s], (c_[:, s] - pos[ok])[:, :, None]) for s in (0, 1)]
        Dn = np.zeros((K, 3, nv))
        Dp = np.zeros((K, 3, nv))
        f1, f2 = flat1[ok], flat2[ok]
        half_dphi = 0.5 * n_[:, :, None] * Jn_[:, None, :]
        if f1.any():  # normal of side 1's face; p = c2 − (ρ2 + φ/2) n̂
            Dn[f1] = _cross(jr_[f1, 0], n_[f1, :, None])
            Dp[f1] = Dc[1][f1] - (rho_[f1, 1] + 0.5 * phi_[f1])[:, None, None] * Dn[f1] - half_dphi[f1]
        if f2.any():  # normal of side 2's face; p = c1 + (ρ1 + φ/2) n̂
            Dn[f2] = _cross(jr_[f2, 1], n_[f2, :, None])
            Dp[f2] = Dc[0][f2] + (rho_[f2, 0] + 0.5 * phi_[f2])[:, None, None] * Dn[f2] + half_dphi[f2]
        co = ~(f1 | f2)
        if co.any():
            d1, d2 = Dc[0][co], Dc[1][co]
            nn, LL, kk = n_[co], L_[co], kind[ok][co]
            for side, sgn in ((1, -1.0), (0, 1.0)):  # a line core slides: its nearest point moves
                sel = kk[:, side] == _LINE
                if not sel.any():
                    continue
                es = axis[ok][co][sel, side]
                mine, other = (d2[sel], d1[sel]) if side == 1 else (d1[sel], d2[sel])
                exn = np.cross(es, nn[sel])
                ds = (np.einsum("mk,mkv->mv", es, other - mine)
                      + sgn * LL[sel, None] * np.einsum("mk,mkv->mv", exn, jr_[co][sel, side]))
                upd = mine + es[:, :, None] * ds[:, None, :]
                if side == 1:
                    d2[sel] = upd
                else:
                    d1[sel] = upd
            Pc = eye - nn[:, :, None] * nn[:, None, :]
            Dn[co] = Pc @ (d2 - d1) / LL[:, None, None]
            Dp[co] = 0.5 * (d1 + d2) + (0.5 * (rho_[co, 0] - rho_[co, 1]))[:, None, None] * Dn[co]
        dJr = jr_[:, 1] - jr_[:, 0]
        w = np.einsum("mkv,mv->mk", dJr, v_)  # relative angular velocity
        inner = Gv @ (Av + _cross(w[:, :, None], Dp)) + Gn @ Dn
        out[ok] += (C - np.swapaxes(dJr, 1, 2) @ _cross(f_[:, :, None], Dp) + np.swapaxes(A_, 1, 2) @ inner)
        return out, exact

    def _classify(self, geom, pos, n, phi, ax, ctr):
        """Local geometry of both sides of each contact at its witness point.

        Returns ``(kind (M, 2), radius (M, 2), core (M, 2, 3), axis (M, 2, 3))``: kind ``_FLAT``
        (plane, box face, cylinder cap), ``_POINT`` (sphere centre, capsule end, box corner),
        ``_LINE`` (capsule segment, box edge, cylinder side; ``axis`` its direction) or ``_NONE``
        (other geometry, a cylinder's rim); the witness point is ``core ± radius·n̂``.
        """
        M = geom.shape[0]
        t = self._gtype[geom]
        size = self.model.geom_size[geom]  # (M, 2, 3)
        kind = np.full((M, 2), _NONE)
        rho = np.zeros((M, 2))
        axis = np.zeros((M, 2, 3))
        w = np.stack([pos - 0.5 * phi[:, None] * n, pos + 0.5 * phi[:, None] * n], axis=1)  # witnesses
        out_n = np.stack([n, -n], axis=1)  # outward normal of each side at its witness point
        kind[t == _T_PLANE] = _FLAT
        sph = t == _T_SPHERE
        cap = t == _T_CAPSULE
        rho[sph | cap] = size[sph | cap][:, 0]
        core = w - rho[:, :, None] * out_n
        kind[sph] = _POINT
        if ax is not None:
            R = ax  # (M, 2, 3, 3) geom rotation matrices
            loc = np.einsum("mgji,mgj->mgi", R, core - ctr)  # core in the geom frame
            if cap.any():
                zc = np.abs(loc[..., 2])
                kind[cap] = np.where(zc[cap] < size[cap][:, 1] * (1 - 1e-9), _LINE, _POINT)
                axis[cap] = R[cap][:, :, 2]
            cyl = t == _T_CYLINDER
            if cyl.any():  # side: a line core on the axis (radius R); cap: flat; rim: unsupported
                lw = np.einsum("mgji,mgj->mgi", R, w - ctr)[cyl]  # witness in the geom frame
                Rc, hc = size[cyl][:, 0], size[cyl][:, 1]
                on_side = np.abs(np.hypot(lw[:, 0], lw[:, 1]) - Rc) <= 1e-6 * Rc
                on_cap = np.abs(np.abs(lw[:, 2]) - hc) <= 1e-6 * hc
                kind[cyl] = np.select([on_side & ~on_cap, on_cap & ~on_side], [_LINE, _FLAT], _NONE)
                rho[cyl] = np.where(kind[cyl] == _LINE, Rc, 0.0)
                core[cyl] = w[cyl] - rho[cyl][:, None] * out_n[cyl]
                axis[cyl] = R[cyl][:, :, 2]
            box = t == _T_BOX
            if box.any():
                at = np.abs(loc[box]) >= size[box] * (1 - 1e-6)  # (b, 3): on the face of each axis
                nf = at.sum(axis=1)
                kind[box] = np.select([nf == 1, nf == 2, nf == 3], [_FLAT, _LINE, _POINT], _NONE)
                free = np.argmin(at, axis=1)  # the coordinate along an edge
                axis[box] = np.take_along_axis(R[box], free[:, None, None].repeat(3, axis=1), axis=2)[:, :, 0]
        else:
            kind[cap] = _NONE
        return kind, rho, core, axis

    # ------------------------------------------------------------------ queries

    def _collect_raw(self, qpos: np.ndarray, w_max: float, extra: bool = False):
        """The collection loop of :meth:`_collect`: ``(top, cfg, dist, geom, fric, excl, pos, frame,
        cdof, scom, xmat, xpos)``, MuJoCo's raw contacts ``[0, top)`` of ``qpos (K, nq)`` (unfiltered,
        configuration by configuration) with each configuration's ``cdof`` and ``subtree_com`` (and,
        with ``extra`` on a model with capsules, cylinders or boxes, ``geom_xmat`` / ``geom_xpos``,
        else None); None when contacts are disabled.  Rows of configurations without contacts are
        not written."""
        s = self._scratch()
        K = qpos.shape[0]
        model = self.model
        nv, nb = model.nv, model.nbody
        if not self._sync(s, w_max):
            return None
        m2, d2 = s.model, s.data
        kin, com, col = mujoco.mj_kinematics, mujoco.mj_comPos, mujoco.mj_collision
        cap = max(int(s.per_config * K * 1.25) + 8, 16)
        cfg = np.empty(cap, dtype=np.intp)
        dist = np.empty(cap)
        geom = np.empty((cap, 2), dtype=np.intp)
        fric = np.empty(cap)
        excl = np.empty(cap, dtype=np.intp)
        pos = np.empty((cap, 3))
        frame = np.empty((cap, 9))
        cdof = np.empty((K, nv, 6))
        scom = np.empty((K, nb, 3))
        xmat = np.empty((K, model.ngeom, 9)) if (extra and self._has_capsule) else None
        xpos = np.empty((K, model.ngeom, 3)) if xmat is not None else None
        top = 0
        dq = d2.qpos
        if NATIVE_COLLECT and _LAYOUT is not None:
            ncon_off, con_off, stride, _ = _LAYOUT
            want_x = xmat is not None
            xm = xmat if want_x else _NO_X9
            xp = xpos if want_x else _NO_X3
            status = np.zeros(3, dtype=np.int64)
            qk = np.ascontiguousarray(qpos, dtype=float)
            k = 0
            while True:
                _collect_kernel(m2._address, d2._address, ncon_off, con_off, stride, _CONTACT_FIELDS, qk, dq,
                                k, top, cfg, dist, geom, fric, excl, pos, frame, d2.cdof, d2.subtree_com,
                                cdof, scom, want_x, d2.geom_xmat, d2.geom_xpos, xm, xp, status)
                k, top = int(status[0]), int(status[1])
                if k == K:
                    break
                cap = 2 * int(status[2])  # the Python loop's growth rule
                cfg, dist, fric, excl = (np.resize(x, cap) for x in (cfg, dist, fric, excl))
                geom, pos, frame = np.resize(geom, (cap, 2)), np.resize(pos, (cap, 3)), np.resize(frame, (cap, 9))
            K_loop = 0
        else:
            K_loop = K
        for k in range(K_loop):
            dq[:] = qpos[k]
            kin(m2, d2)
            col(m2, d2)
            n = d2.ncon
            if not n:
                continue
            com(m2, d2)
            cdof[k] = d2.cdof
            scom[k] = d2.subtree_com
            if xmat is not None:
                xmat[k] = d2.geom_xmat
                xpos[k] = d2.geom_xpos
            end = top + n
            if end > cap:
                cap = 2 * end
                cfg, dist, fric, excl = (np.resize(x, cap) for x in (cfg, dist, fric, excl))
                geom, pos, frame = np.resize(geom, (cap, 2)), np.resize(pos, (cap, 3)), np.resize(frame, (cap, 9))
            con = d2.contact
            cfg[top:end] = k
            dist[top:end] = con.dist
            geom[top:end] = con.geom
            fric[top:end] = con.friction[:, 0]
            excl[top:end] = con.exclude
            pos[top:end] = con.pos
            frame[top:end] = con.frame
            top = end
        s.per_config = max(top / max(K, 1), 1.0)  # capacity hint for the next call
        return top, cfg, dist, geom, fric, excl, pos, frame, cdof, scom, xmat, xpos

    def _collect(self, qpos: np.ndarray, w_max: float, extra: bool = False):
        """Raw contacts of ``qpos (K, nq)``: (config index, φ, geoms, μ, J (M, 3, nv) rows t1, t2, n).

        Contacts are listed configuration by configuration (``cfg`` is sorted).  The loop only
        runs MuJoCo (kinematics, collision, ``mj_comPos``) and copies contact data, ``cdof`` and
        ``subtree_com``; the contact Jacobians are then formed for all contacts at once with
        MuJoCo's ``mj_jac`` formula (column ``j`` of ``Jp(b, p)`` is
        ``cdof_lin,j + cdof_rot,j × (p − subtree_com[root(b)])`` for the dofs ``j`` that move ``b``).
        """
        raw = self._collect_raw(qpos, w_max, extra)
        if raw is None:
            return None
        top, cfg, dist, geom, fric, excl, pos, frame, cdof, scom, xmat, xpos = raw
        nv = self.model.nv
        if not top:
            return None
        ok = (dist[:top] < w_max) & (excl[:top] == 0)
        bodies = self._geom_body[geom[:top]]  # (M, 2)
        ok &= self._body_weld[bodies[:, 0]] != self._body_weld[bodies[:, 1]]
        if self.contact._body_mask is not None:
            ok &= self.contact._body_mask[bodies].any(axis=1)
        idx = np.flatnonzero(ok)
        if not idx.size:
            return None
        cfg, dist, geom, fric = cfg[idx], dist[idx], geom[idx], fric[idx]
        bodies, p, F = bodies[idx], pos[idx], frame[idx].reshape(-1, 3, 3)[:, (1, 2, 0)]  # rows t1, t2, n
        # translational (jp) and rotational (jr) Jacobians of both bodies at the contact point,
        # (M, 2, 3, nv): MuJoCo's mj_jac, v + ω × (p − c_root) over the dofs that move the body
        cd = cdof[cfg].transpose(0, 2, 1)  # (M, 6, nv): rows ω (3), v (3)
        off = p[:, None, :] - scom[cfg[:, None], self._body_root[bodies]]  # (M, 2, 3)
        mv = self._dof_moves[bodies][:, :, None, :]  # (M, 2, 1, nv)
        w = cd[:, None, :3]  # (M, 1, 3, nv)
        o = off[:, :, :, None]  # (M, 2, 3, 1)
        jp = np.empty((cd.shape[0], 2, 3, nv))
        jp[:, :, 0] = cd[:, None, 3] + w[:, :, 1] * o[:, :, 2] - w[:, :, 2] * o[:, :, 1]
        jp[:, :, 1] = cd[:, None, 4] + w[:, :, 2] * o[:, :, 0] - w[:, :, 0] * o[:, :, 2]
        jp[:, :, 2] = cd[:, None, 5] + w[:, :, 0] * o[:, :, 1] - w[:, :, 1] * o[:, :, 0]
        jp *= mv
        J = F @ (jp[:, 1] - jp[:, 0])  # (M, 3, nv): F (Jp(b2, p) − Jp(b1, p))
        p = self.contact.params
        if p.friction is None:
            mu = np.where(self._frictionless[geom[:, 0], geom[:, 1]], 0.0, fric)
        else:
            mu = np.full(dist.shape, p.friction)
        if extra:
            jr = w * mv  # (M, 2, 3, nv)
            ax = ctr = None
            if xmat is not None:
                ax = xmat[cfg[:, None], geom].reshape(-1, 2, 3, 3)  # (M, 2, 3, 3): geom rotations
                ctr = xpos[cfg[:, None], geom]  # (M, 2, 3): geom centres
            extra = (pos[idx], F[:, 2], jp, jr, ax, ctr)
        else:
            extra = None
        return cfg, dist, geom, mu, J, bodies, extra

    def forces(self, qpos, qvel, *, dv: bool = False, dq: bool = False) -> BatchForces:
        """Compliant contact forces at ``K`` states.

        Args:
          qpos: ``(K, nq)`` configurations; qvel: ``(K, nv)`` velocities.
          dv: also ``∂F/∂v`` (exact); dq: also the closed-form ``∂F/∂q`` (exact for spheres,
            capsules, planes and boxes, see :attr:`BatchForces.exact`).

        Returns:
          :class:`BatchForces`.

        Raises:
          ShapeError / NonFiniteError: wrong shapes or non-finite values.
        """
        p = self.contact.params
        qpos = as_array("qpos", qpos, (None, self.model.nq))
        K, nv = qpos.shape[0], self.model.nv
        qvel = as_array("qvel", qvel, (K, nv))
        F = np.zeros((K, nv))
        dFdv = np.zeros((K, nv, nv)) if dv else None
        dFdq = np.zeros((K, nv, nv)) if dq else None
        count = np.zeros(K, dtype=np.intp)
        exact = np.ones(K, dtype=bool)
        if NATIVE_FORCES:
            raw = self._collect_raw(qpos, p.max_distance, extra=dq) if K else None
            if raw is None or not raw[0]:
                return BatchForces(F, dFdv, dFdq, count)
            top, cfg, dist, geom, fric, excl, pos, frame, cdof, scom, xmat, xpos = raw
            dofs = np.zeros((K, nv), dtype=bool)
            mask = self.contact._body_mask
            _forces_kernel(top, cfg, dist, geom, fric, excl, pos, frame, cdof, scom,
                           _NO_X9 if xmat is None else xmat, _NO_X3 if xpos is None else xpos, qvel,
                           p.max_distance, self._geom_body, self._body_weld, self._body_root,
                           _NO_MASK if mask is None else mask, self._dof_moves, self._frictionless,
                           -1.0 if p.friction is None else p.friction, self._gtype, self.model.geom_size,
                           self._before, p.stiffness, p.smoothing, p.dissipation_velocity, p.stiction_velocity,
                           p.force_threshold, dv, dq, F, _NO_X3 if dFdv is None else dFdv,
                           _NO_X3 if dFdq is None else dFdq, count, dofs, exact)
            return BatchForces(F, dFdv, dFdq, count, dofs, exact if dq else None)
        raw = self._collect(qpos, p.max_distance, extra=dq) if K else None
        if raw is None:
            return BatchForces(F, dFdv, dFdq, count)
        cfg, phi, geom, mu, J, bodies, extra = raw
        cnt = np.bincount(cfg, minlength=K)
        count[:] = cnt
        live = np.flatnonzero(cnt)
        starts = np.concatenate([[0], np.cumsum(cnt[live])[:-1]])  # cfg is sorted: one segment per config
        dofs = np.zeros((K, nv), dtype=bool)
        dofs[live] = np.maximum.reduceat(self._dof_moves[bodies].max(axis=1), starts, axis=0) > 0
        vc = np.einsum("mkv,mv->mk", J, qvel[cfg])  # (M, 3): t1, t2, n
        fc, dfc = softplus_normal_force(phi, p.stiffness, p.smoothing)
        d, dd = hunt_crossley_factor(vc[:, 2], p.dissipation_velocity)
        fn = fc * d
        ft, dft_dvt, dft_dfn = regularized_friction(vc[:, :2], fn, mu, p.stiction_velocity)
        gamma = np.concatenate([ft, fn[:, None]], axis=1)
        F[live] = np.add.reduceat(np.einsum("mkv,mk->mv", J, gamma), starts, axis=0)
        if dv or dq:
            # contacts of each configuration side by side, zero-padded: (K_live, c_max, ...)
            cmax = int(cnt.max())
            slot = np.arange(cfg.size) - np.repeat(starts, cnt[live])
            seg = np.repeat(np.arange(live.size), cnt[live])
            Jp = np.zeros((live.size, cmax, 3, nv))
            Jp[seg, slot] = J
            Jp = Jp.reshape(live.size, 3 * cmax, nv)
        if dv:
            G = np.zeros((cfg.size, 3, 3))  # ∂γ/∂v_c
            dfn_dvn = fc * dd
            G[:, 2, 2] = dfn_dvn
            G[:, :2, :2] = dft_dvt
            G[:, :2, 2] = dft_dfn * dfn_dvn[:, None]
            GJ = np.zeros((live.size, cmax, 3, nv))
            GJ[seg, slot] = G @ J
            dFdv[live] = np.swapaxes(Jp, 1, 2) @ GJ.reshape(live.size, 3 * cmax, nv)  # Σ Jᵀ G J
        if dq:
            fc_max = np.repeat(np.maximum.reduceat(fc, starts), cnt[live])  # largest force of the config
            D, ex = self._position_derivative(phi, mu, geom, qvel[cfg], fc, dfc, d, dd, extra, fc_max)
            exact[live] = np.logical_and.reduceat(ex, starts)
            Dp = np.zeros((live.size, cmax, nv, nv))
            Dp[seg, slot] = D
            dFdq[live] = Dp.sum(axis=1)
        return BatchForces(F, dFdv, dFdq, count, dofs, exact if dq else None)
