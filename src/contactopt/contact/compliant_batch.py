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
import threading

import mujoco
import numpy as np

from ..errors import ParameterError, as_array
from .compliant import (
    CompliantContactModel,
    hunt_crossley_factor,
    regularized_friction,
    softplus_normal_force,
)
from .compliant_collect import (
    _CONTACT_FIELDS,
    _DSBL_CONSTRAINT,
    _DSBL_CONTACT,
    _DSBL_OTHER,
    _ENBL_SLEEP,
    _LAYOUT,
    _NO_MASK,
    _NO_X3,
    _NO_X9,
    _OPT_FIELDS,
    _collect_kernel,
)
from .compliant_forces import (
    _FLAT,
    _LINE,
    _NONE,
    _POINT,
    _T_BOX,
    _T_CAPSULE,
    _T_CYLINDER,
    _T_PLANE,
    _T_SPHERE,
    _cross,
    _forces_kernel,
)
from .geometry import SYNCED_FIELDS

__all__ = ["CompliantContactBatch", "BatchForces"]

# The two stages of :meth:`CompliantContactBatch.forces` run as compiled kernels where available:
# the collection loop (:mod:`.compliant_collect`) and the force evaluation (:mod:`.compliant_forces`).
# Their NumPy / Python references remain in :class:`CompliantContactBatch` as the fallback.

#: run the compiled collection loop where available (False: the Python loop; the same results)
NATIVE_COLLECT = True

#: evaluate the forces and derivatives of the collected contacts as one compiled pass (False: the
#: NumPy reference; the same results up to rounding)
NATIVE_FORCES = True


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
