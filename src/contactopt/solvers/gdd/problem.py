"""The quantities of one state that goal-directed dynamics works on.

:func:`build_problem` reads ONE MuJoCo evaluation of a state (the position and
velocity stages: ``mj_fwdPosition`` + ``mj_fwdVelocity``, or ``mj_step1``) and
returns a :class:`GDDProblem`: the dense inertia ``M``, the force
``c`` that does not come from the controls, the constraint rows
(``efc_J, efc_aref, efc_D, efc_R, efc_frictionloss`` and the cone structure) and
the actuation (:class:`ActuationModel`).  The inverse dynamics are then::

    g(a) = M a + c − Jᵀ f(J a − aref),      f = −∇s   (MuJoCo's soft constraints)

and ``g(a) = mj_inverse's qfrc_inverse − (qfrc_applied + xfrc + uncontrolled actuators)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from ...errors import ParameterError, as_array
from ...model import actuator_moment_matrix
from . import kernels as K

__all__ = ["ActuationModel", "ActuationArrays", "GDDProblem", "build_problem"]

# --------------------------------------------------------------------------- actuation


class ActuationModel:
    """Which actuators goal-directed dynamics controls, and how their forces map to ``g``.

    An actuator is *controllable* when its force is affine in its control with no
    activation dynamics or delay: ``dyntype`` none, ``gaintype`` fixed or affine,
    ``biastype`` none or affine, nonzero gain.  Its force is
    ``w_k = gain_k · ctrl_k + bias_k(length, velocity)`` and the generalized force
    is ``τ = B w`` with ``B (nv, n_ctrl)`` the transposed actuator moment
    matrix (gears, joint, tendon, site transmissions; from MuJoCo).  Forces of the
    other actuators (activation dynamics, muscles, …) are taken as given.

    The GDD constraints are written on ``g``:

    * ``Zᵀ g = 0`` with ``Z (nv, nz)`` an orthonormal basis of the complement of
      ``range(B)`` (the "root force" of the seed, ``g_z = 0``);
    * ``lo ≤ B⁺ g ≤ hi``: actuator forces within the limits implied by
      ``ctrlrange`` and ``forcerange`` (redundant actuators share the
      minimum-norm distribution ``B⁺ g``).

    ``B``, ``Z`` and ``B⁺`` are cached when every transmission is a joint (or a
    fixed tendon), i.e. when ``B`` does not depend on ``qpos``.

    Raises:
      ParameterError: the model has no actuators, or none of them is controllable.
    """

    def __init__(self, model: mujoco.MjModel, *, tol: float = 1e-9):
        if model.nu == 0:
            raise ParameterError(
                "model has no actuators: goal-directed dynamics needs at least one "
                "controllable actuator"
            )
        dyn_none = model.actuator_dyntype == int(mujoco.mjtDyn.mjDYN_NONE)
        gain_ok = np.isin(model.actuator_gaintype, [int(mujoco.mjtGain.mjGAIN_FIXED),
                                                    int(mujoco.mjtGain.mjGAIN_AFFINE)])
        bias_ok = np.isin(model.actuator_biastype, [int(mujoco.mjtBias.mjBIAS_NONE),
                                                    int(mujoco.mjtBias.mjBIAS_AFFINE)])
        no_delay = np.ones(model.nu, dtype=bool)
        if hasattr(model, "actuator_delay"):
            no_delay = np.asarray(model.actuator_delay).reshape(model.nu, -1).max(axis=1) <= 0
        gain_nonzero = np.abs(model.actuator_gainprm[:, :3]).sum(axis=1) > 0
        ctrl = dyn_none & gain_ok & bias_ok & no_delay & gain_nonzero
        self.controllable = np.flatnonzero(ctrl)
        self.uncontrolled = np.flatnonzero(~ctrl)
        if self.controllable.size == 0:
            raise ParameterError(
                "no controllable actuator: goal-directed dynamics needs actuators whose force "
                "is affine in ctrl without activation dynamics (motor, position, velocity, general)"
            )
        self.nv = model.nv
        self.nu = model.nu
        self.tol = tol
        trn = model.actuator_trntype
        joint_like = np.isin(trn, [int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT)])
        fixed_tendon = np.zeros(model.nu, dtype=bool)
        tendon = trn == int(mujoco.mjtTrn.mjTRN_TENDON)
        if tendon.any():
            tid = model.actuator_trnid[tendon, 0]
            # a fixed tendon has only joint wraps
            is_fixed = np.array([
                np.all(model.wrap_type[model.tendon_adr[t]:model.tendon_adr[t] + model.tendon_num[t]]
                       == int(mujoco.mjtWrap.mjWRAP_JOINT)) for t in tid])
            fixed_tendon[np.flatnonzero(tendon)] = is_fixed
        self.constant = bool(np.all(joint_like | fixed_tendon))
        c = self.controllable
        self.gaintype_affine = model.actuator_gaintype[c] == int(mujoco.mjtGain.mjGAIN_AFFINE)
        self.biastype_affine = model.actuator_biastype[c] == int(mujoco.mjtBias.mjBIAS_AFFINE)
        self.any_affine_gain = bool(self.gaintype_affine.any())
        self.any_bias = bool(self.biastype_affine.any()
                             and np.any(model.actuator_biasprm[c[self.biastype_affine], :3] != 0))
        self.gainprm = model.actuator_gainprm[c, :3].copy()
        self.biasprm = model.actuator_biasprm[c, :3].copy()
        clim = model.actuator_ctrllimited[c].astype(bool)
        if mujoco.mjtDisableBit.mjDSBL_CLAMPCTRL & model.opt.disableflags:
            clim[:] = False
        self.ctrl_lo = np.where(clim, model.actuator_ctrlrange[c, 0], -np.inf)
        self.ctrl_hi = np.where(clim, model.actuator_ctrlrange[c, 1], np.inf)
        if np.any(self.ctrl_lo > self.ctrl_hi):
            raise ParameterError("an actuator has ctrlrange with lower bound above upper bound")
        flim = model.actuator_forcelimited[c].astype(bool)
        self.force_lo = np.where(flim, model.actuator_forcerange[c, 0], -np.inf)
        self.force_hi = np.where(flim, model.actuator_forcerange[c, 1], np.inf)
        self._cache = None
        self._arrays = None

    @property
    def state_dependent(self) -> bool:
        """True when B, the gains or the biases depend on the state (recomputed every solve)."""
        return not self.constant or self.any_affine_gain or self.any_bias

    def arrays(self, model, data) -> "ActuationArrays":
        """All actuation arrays at the current state (cached when state independent)."""
        if self._arrays is not None and not self.state_dependent:
            return self._arrays
        B, Zt, Bpinv = self.matrices(model, data)
        gain, bias = self.gain_bias(model, data)
        flo, fhi, clo, chi = self.force_bounds(gain, bias)
        if np.any(flo > fhi):
            raise ParameterError("actuator force limits are empty (lower bound above upper bound)")
        box = np.flatnonzero(np.isfinite(flo) | np.isfinite(fhi))
        Cbox = Bpinv[box]
        Bdir = B[:, box].T
        lo = flo[box]
        hi = fhi[box]
        packed = np.concatenate((Zt.ravel(), Cbox.ravel(), Bdir.ravel(), Bpinv.ravel(), lo, hi,
                                 gain, bias, clo, chi))
        out = ActuationArrays(
            B=B, Zt=Zt, Bpinv=Bpinv, gain=gain, bias=bias, force_lo=flo, force_hi=fhi,
            ctrl_lo=clo, ctrl_hi=chi, box=box, Cbox=np.ascontiguousarray(Cbox),
            Bdir=np.ascontiguousarray(Bdir), lo=lo, hi=hi, packed=packed,
        )
        if not self.state_dependent:
            self._arrays = out
        return out

    # -- matrices ---------------------------------------------------------------------

    def matrices(self, model, data):
        """``(B (nv, nc), Zᵀ (nz, nv), B⁺ (nc, nv))`` at the current configuration."""
        if self.constant and self._cache is not None:
            return self._cache
        moment = actuator_moment_matrix(model, data)
        B = np.ascontiguousarray(moment[self.controllable].T)
        u, s, vt = np.linalg.svd(B, full_matrices=True)
        smax = s.max(initial=0.0)
        rank = int(np.sum(s > self.tol * max(smax, 1e-300)))
        if rank == 0:
            raise ParameterError("the controllable actuators produce no generalized force here")
        Zt = np.ascontiguousarray(u[:, rank:].T)
        # exact selection structure when B only touches whole dofs
        rows = np.abs(B).sum(axis=1) > self.tol * max(np.abs(B).max(), 1.0)
        if Zt.shape[0] == int((~rows).sum()):
            sel = np.zeros((Zt.shape[0], self.nv))
            sel[np.arange(Zt.shape[0]), np.flatnonzero(~rows)] = 1.0
            overlap = Zt @ sel.T  # orthogonal iff both span the same subspace
            if np.allclose(overlap @ overlap.T, np.eye(Zt.shape[0]), atol=1e-8):
                Zt = sel
        sinv = np.where(s[:rank] > 0, 1.0 / s[:rank], 0.0)
        Bpinv = np.ascontiguousarray((vt[:rank].T * sinv) @ u[:, :rank].T)
        Bpinv[np.abs(Bpinv) < 1e-15 * max(np.abs(Bpinv).max(), 1e-300)] = 0.0
        out = (B, Zt, Bpinv)
        if self.constant:
            self._cache = out
        return out

    def gain_bias(self, model, data):
        """Per controllable actuator: ``gain (nc,)`` and ``bias (nc,)`` with ``w = gain·ctrl + bias``."""
        c = self.controllable
        if self.any_affine_gain or self.any_bias:
            length = data.actuator_length[c]
            vel = data.actuator_velocity[c]
        if self.any_affine_gain:
            gain = self.gainprm[:, 0] + np.where(
                self.gaintype_affine, self.gainprm[:, 1] * length + self.gainprm[:, 2] * vel, 0.0)
        else:
            gain = np.ascontiguousarray(self.gainprm[:, 0])
        if self.any_bias:
            bias = np.where(self.biastype_affine,
                            self.biasprm[:, 0] + self.biasprm[:, 1] * length + self.biasprm[:, 2] * vel,
                            0.0)
        else:
            bias = np.zeros(c.size)
        return gain, bias

    def force_bounds(self, gain, bias):
        """Force bounds ``(lo, hi)`` of the controllable actuators and effective ctrl bounds.

        Returns ``(force_lo, force_hi, ctrl_lo, ctrl_hi)``, each ``(nc,)``; ±inf where unbounded.
        """
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = gain * self.ctrl_lo + bias
            f2 = gain * self.ctrl_hi + bias
        f1 = np.where(np.isnan(f1), -np.inf * np.sign(gain), f1)
        f2 = np.where(np.isnan(f2), np.inf * np.sign(gain), f2)
        flo = np.maximum(np.minimum(f1, f2), self.force_lo)
        fhi = np.minimum(np.maximum(f1, f2), self.force_hi)
        # effective ctrl range: ctrlrange ∩ preimage of forcerange
        with np.errstate(invalid="ignore", divide="ignore"):
            c1 = (self.force_lo - bias) / gain
            c2 = (self.force_hi - bias) / gain
        clo = np.maximum(self.ctrl_lo, np.where(gain > 0, c1, c2))
        chi = np.minimum(self.ctrl_hi, np.where(gain > 0, c2, c1))
        clo = np.where(np.isnan(clo), self.ctrl_lo, clo)
        chi = np.where(np.isnan(chi), self.ctrl_hi, chi)
        return flo, fhi, clo, chi




@dataclass(frozen=True)
class ActuationArrays:
    """Actuation at one state (see :class:`ActuationModel`); ``nc`` controllable actuators.

    B ``(nv, nc)``, Zt ``(nz, nv)``, Bpinv ``(nc, nv)``; gain, bias, force_lo,
    force_hi, ctrl_lo, ctrl_hi ``(nc,)``; box: indices of actuators with a finite
    force bound and, for them, Cbox ``(nb, nv)`` (rows of B⁺), Bdir ``(nb, nv)``
    (columns of B), lo, hi ``(nb,)``.  packed: all of ``Zt, Cbox, Bdir, Bpinv`` (row-major)
    then ``lo, hi, gain, bias, ctrl_lo, ctrl_hi`` in one array, the form the solver kernel
    takes (see :func:`kernels.gdd_solve`).
    """

    B: np.ndarray
    Zt: np.ndarray
    Bpinv: np.ndarray
    gain: np.ndarray
    bias: np.ndarray
    force_lo: np.ndarray
    force_hi: np.ndarray
    ctrl_lo: np.ndarray
    ctrl_hi: np.ndarray
    box: np.ndarray
    Cbox: np.ndarray
    Bdir: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    packed: np.ndarray | None = None


# --------------------------------------------------------------------------- problem

_EMPTY_I = np.zeros(0, dtype=np.int32)
_EMPTY_F = np.zeros(0)
_EMPTY_F5 = np.zeros((0, 5))


class DataViews:
    """Numpy views of the fixed-size fields of an ``MjData`` (created once, reused every step).

    Their memory never moves; the constraint (``efc_*``) arrays live in MuJoCo's
    arena and are re-read at every state.  Also holds the buffers a solver reuses.
    """

    #: the ``MjData`` fields viewed (same names)
    FIELDS = ("qfrc_bias", "qfrc_passive", "qfrc_applied", "xfrc_applied", "qvel", "qacc", "ctrl",
              "qacc_warmstart")
    __slots__ = ("data", *FIELDS, "M", "c", "sparse", "elliptic")

    def __init__(self, model, data):
        self.data = data
        for name in self.FIELDS:
            setattr(self, name, getattr(data, name))
        self.M = np.empty((model.nv, model.nv))
        self.c = np.empty(model.nv)
        self.sparse = bool(mujoco.mj_isSparse(model))
        self.elliptic = model.opt.cone == int(mujoco.mjtCone.mjCONE_ELLIPTIC)


class GDDProblem:
    """One state's quantities for goal-directed dynamics (read from one MuJoCo evaluation).

    Attributes:
      model, data: the MuJoCo model and the data the quantities were read from.
      M: ``(nv, nv)`` inertia (armature included), kg or kg·m².
      c: ``(nv,)`` force not produced by the controllable actuators:
        ``qfrc_bias − qfrc_passive − qfrc_applied − Jᵀxfrc_applied − (uncontrolled actuators)``.
      qvel: ``(nv,)`` velocity v.
      J: ``(nefc, nv)`` dense constraint Jacobian; aref, D, R, floss, efc_type, efc_id: ``(nefc,)``.
      con_dim, con_mu, con_fric, con_adr: contact data (filled for elliptic cones only).
      actuation: :class:`ActuationArrays` at this state.

    With ``copy=False`` (the solver's internal use) arrays may be views into
    ``data`` and into reused buffers: valid until ``data`` changes or the next solve.
    """

    __slots__ = ("model", "data", "M", "c", "qvel", "J", "aref", "D", "R", "floss", "efc_type",
                 "efc_id", "con_dim", "con_mu", "con_fric", "con_adr", "actuation", "_kinds")

    def __init__(self, model, data, actuation_model: ActuationModel, *, copy: bool = True,
                 views: "DataViews | None" = None):
        nv = model.nv
        nefc = data.nefc
        if views is None or views.data is not data:
            views = DataViews(model, data)
        self.model = model
        self.data = data
        M = np.empty((nv, nv)) if copy else views.M
        _full_inertia(model, data, M)
        self.M = M
        c = np.subtract(views.qfrc_bias, views.qfrc_passive, out=None if copy else views.c)
        c -= views.qfrc_applied
        xfrc = views.xfrc_applied
        if np.count_nonzero(xfrc):
            for b in np.flatnonzero(np.any(xfrc != 0, axis=1)):
                acc = np.zeros(nv)
                mujoco.mj_applyFT(model, data, xfrc[b, :3], xfrc[b, 3:], data.xipos[b], int(b), acc)
                c -= acc
        am = actuation_model
        if am.uncontrolled.size:
            mujoco.mj_fwdActuation(model, data)
            moment = actuator_moment_matrix(model, data)
            u = am.uncontrolled
            c -= moment[u].T @ data.actuator_force[u]
        self.c = c
        self.qvel = views.qvel.copy() if copy else views.qvel
        if nefc:
            if views.sparse:
                J = np.zeros((nefc, nv))
                mujoco.mju_sparse2dense(J, data.efc_J, data.efc_J_rownnz[:nefc],
                                        data.efc_J_rowadr[:nefc], data.efc_J_colind)
            else:
                J = data.efc_J.reshape(nefc, nv)
                if copy:
                    J = J.copy()
            self.J = J
            rows = (data.efc_aref, data.efc_D, data.efc_R, data.efc_frictionloss, data.efc_type,
                    data.efc_id)
            if rows[0].shape[0] != nefc:  # older bindings expose the allocated size
                rows = tuple(x[:nefc] for x in rows)
            if copy:
                rows = tuple(x.copy() for x in rows)
            self.aref, self.D, self.R, self.floss, self.efc_type, self.efc_id = rows
            if views.elliptic and data.ncon:
                con = data.contact
                self.con_dim = np.ascontiguousarray(con.dim, dtype=np.int32)
                self.con_mu = np.ascontiguousarray(con.mu, dtype=float)
                self.con_fric = np.ascontiguousarray(con.friction, dtype=float)
                self.con_adr = np.ascontiguousarray(con.efc_address, dtype=np.int32)
            else:
                self.con_dim, self.con_mu, self.con_fric, self.con_adr = (
                    _EMPTY_I, _EMPTY_F, _EMPTY_F5, _EMPTY_I)
        else:
            self.J = np.zeros((0, nv))
            self.aref = self.D = self.R = self.floss = _EMPTY_F
            self.efc_type = self.efc_id = _EMPTY_I
            self.con_dim, self.con_mu, self.con_fric, self.con_adr = (
                _EMPTY_I, _EMPTY_F, _EMPTY_F5, _EMPTY_I)
        self.actuation = am.arrays(model, data)
        self._kinds = None

    @property
    def nv(self) -> int:
        return self.M.shape[0]

    @property
    def nefc(self) -> int:
        return self.J.shape[0]

    def row_kinds(self):
        """``(kind, cdim, cmu, cfric)`` of the constraint rows (see :func:`kernels.row_kinds`)."""
        if self._kinds is None:
            n = self.nefc
            kind = np.empty(n, dtype=np.int64)
            cdim = np.zeros(n, dtype=np.int64)
            cmu = np.zeros(n)
            cfric = np.zeros((n, 5))
            K.row_kinds(self.efc_type, self.efc_id, self.con_dim, self.con_mu, self.con_fric,
                        self.con_adr, kind, cdim, cmu, cfric)
            self._kinds = (kind, cdim, cmu, cfric)
        return self._kinds

    # -- reference evaluations (cost terms and tests; the solver uses the kernels) --

    def constraint_force(self, qacc, *, jacobian: bool = False):
        """MuJoCo's inverse constraint force ``f = −∇s(J a − aref)`` at acceleration ``a``.

        Args:
          qacc: ``(nv,)`` acceleration a.
          jacobian: also return ``∂f/∂a = −H[s] J`` ``(nefc, nv)``.

        Returns:
          ``f (nefc,)`` (equal to ``mj_inverse``'s ``efc_force``), and the Jacobian if asked.
        """
        a = as_array("qacc", qacc, (self.nv,))
        jar = self.J @ a - self.aref
        n = self.nefc
        kind, cdim, cmu, cfric = self.row_kinds()
        f = np.empty(n)
        state = np.empty(n, dtype=np.int64)
        hdiag = np.zeros(n)
        hcone = np.zeros((n, 6, 6))
        K.constraint_update(jar, self.D, self.R, self.floss, kind, cdim, cmu, cfric, f, state,
                            hdiag, hcone)
        if not jacobian:
            return f
        H = np.diag(hdiag)
        for i in np.flatnonzero((kind == K.ROW_CONE) & (state == K.STATE_CONE)):
            d = cdim[i]
            H[i:i + d, i:i + d] = hcone[i, :d, :d]
        return f, -H @ self.J

    def inverse_dynamics(self, qacc) -> np.ndarray:
        """``g(a) = M a + c − Jᵀ f(a)`` ``(nv,)``: the generalized force the controls must produce."""
        a = as_array("qacc", qacc, (self.nv,))
        return self.M @ a + self.c - self.J.T @ self.constraint_force(a)


def _full_inertia(model, data, out):
    """Dense inertia into ``out``; ``mj_fullM`` takes ``(m, d, dst)`` in MuJoCo 4, ``(m, dst, M)`` before."""
    global _FULLM_NEW
    if _FULLM_NEW is None:
        try:
            mujoco.mj_fullM(model, data, out)
            _FULLM_NEW = True
            return
        except TypeError:
            _FULLM_NEW = False
    if _FULLM_NEW:
        mujoco.mj_fullM(model, data, out)
    else:
        mujoco.mj_fullM(model, out, data.qM)


_FULLM_NEW = None


def build_problem(model: mujoco.MjModel, data: mujoco.MjData,
                  actuation: ActuationModel | None = None, *, copy: bool = True) -> GDDProblem:
    """Read a :class:`GDDProblem` from ``data`` after its position and velocity stages.

    ``data`` must hold ``mj_fwdPosition`` + ``mj_fwdVelocity`` results (``mj_step1``
    or ``mj_forward`` also do) for its ``qpos, qvel``; nothing is recomputed here
    except ``mj_fwdActuation`` when some actuator is not controllable.

    Raises:
      ParameterError: the model has no controllable actuator.
    """
    if actuation is None:
        actuation = ActuationModel(model)
    return GDDProblem(model, data, actuation, copy=copy)
