"""MuJoCo's dynamics without its constraint solver, on a private model copy.

The contact models of this package replace MuJoCo's constraints with their own
impulses; all they need from MuJoCo is the "smooth" part of the dynamics at one
state: the inertia ``M`` and the force ``n + u = qfrc_smooth`` (passive minus
bias forces plus actuator and applied forces).  :class:`UnconstrainedDynamics`
evaluates them on a copy of the model with ``mjDSBL_CONSTRAINT`` set and, with
implicit damping, returns ``M + h·diag(dof_damping)`` — the matrix MuJoCo's Euler
integrator uses, so that ``(M + hD)(w⁺ − w) = h(n + u) + Jᵀf`` is stable for light
links with strong joint damping.
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np
import scipy.linalg

from ..errors import ContactoptError, NonFiniteError, as_array, check_positive
from ..model import MAX_STATE_VALUE, new_reset_warnings, reset_warnings

__all__ = ["UnconstrainedDynamics", "SingularInertiaError"]

_DSBL_CONSTRAINT = int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)


class SingularInertiaError(ContactoptError, ArithmeticError):
    """The joint-space inertia matrix could not be factorized."""


class UnconstrainedDynamics:
    """Scratch evaluation of ``M`` (+ ``hD``) and ``qfrc_smooth`` for one model.

    Args:
      model: the ``MjModel`` (copied: later edits of ``model`` are not seen).
      implicit_damping: add ``h·diag(dof_damping)`` to ``M``.
      damping_in_armature: add it as armature of the private copy instead, so that MuJoCo's
        sparse factorization is of ``M + hD`` and :meth:`solve` needs no dense factor (the
        copy's kinetic energy then includes ``½ h vᵀDv``).

    Attributes:
      model: the user's model; smooth_model: the private copy; data: its scratch
      ``MjData`` (holds the last loaded state and its derived quantities);
      timestep: h [s].

    Not thread-safe (one scratch ``MjData``).
    """

    def __init__(self, model: mujoco.MjModel, *, implicit_damping: bool = True,
                 damping_in_armature: bool = False):
        self.model = model
        self.timestep = check_positive("model.opt.timestep", model.opt.timestep)
        self.smooth_model = copy.deepcopy(model)
        self.smooth_model.opt.disableflags |= _DSBL_CONSTRAINT
        damping = np.asarray(model.dof_damping, dtype=float)
        self._damping = self.timestep * damping if implicit_damping and damping.any() else None
        if self._damping is not None and damping_in_armature:
            # M + hD is MuJoCo's own inertia of the copy, so its sparse factor (qLD) solves with it
            self.smooth_model.dof_armature += self._damping
            self._damping = None
        self.data = mujoco.MjData(self.smooth_model)

    def load(self, qpos, qvel, *, ctrl=None, qfrc_applied=None, xfrc_applied=None, act=None,
             mocap_pos=None, mocap_quat=None) -> None:
        """Copy a validated state and inputs into the scratch data (None: zero, or keep mocap).

        Args:
          qpos ``(nq,)``; qvel ``(nv,)``; ctrl ``(nu,)``; qfrc_applied ``(nv,)``;
          xfrc_applied ``(nbody, 6)``; act ``(na,)``; mocap_pos/mocap_quat ``(nmocap, 3|4)``.

        Raises:
          ShapeError, NonFiniteError: a wrong shape, NaN or infinity.
          ParameterError: a qpos/qvel entry beyond ``MAX_STATE_VALUE`` (1e10; MuJoCo would reset it).
        """
        m, d = self.smooth_model, self.data
        d.qpos[:] = as_array("qpos", qpos, (m.nq,), max_abs=MAX_STATE_VALUE)
        d.qvel[:] = as_array("qvel", qvel, (m.nv,), max_abs=MAX_STATE_VALUE)
        d.ctrl[:] = 0.0 if ctrl is None else as_array("ctrl", ctrl, (m.nu,))
        d.qfrc_applied[:] = 0.0 if qfrc_applied is None else as_array("qfrc_applied", qfrc_applied, (m.nv,))
        d.xfrc_applied[:] = 0.0 if xfrc_applied is None else as_array("xfrc_applied", xfrc_applied, (m.nbody, 6))
        if m.na:
            d.act[:] = 0.0 if act is None else as_array("act", act, (m.na,))
        if m.nmocap:
            if mocap_pos is not None:
                d.mocap_pos[:] = as_array("mocap_pos", mocap_pos, (m.nmocap, 3))
            if mocap_quat is not None:
                d.mocap_quat[:] = as_array("mocap_quat", mocap_quat, (m.nmocap, 4))

    def evaluate(self):
        """``mj_forward`` on the loaded state; returns ``(M, factor)``.

        ``M`` is ``(nv, nv)`` (plus ``hD`` with implicit damping) and ``factor`` its
        Cholesky factor for ``scipy.linalg.cho_solve``; ``self.data.qfrc_smooth`` holds ``n + u``.

        Raises:
          SingularInertiaError: ``M`` is not positive definite.
          NonFiniteError: MuJoCo found the state non-finite or beyond 1e10 and reset the data (the
            evaluation would be of ``qpos0``), or the smooth acceleration is non-finite or beyond 1e30.
        """
        m, d = self.smooth_model, self.data
        before = reset_warnings(d)
        mujoco.mj_forward(m, d)
        bad = new_reset_warnings(d, before)
        if not bad and not np.all(np.abs(d.qacc) <= 1e30):
            # far beyond anything physical (mj_step would reset beyond 1e10; the convex model's
            # inverse legitimately asks for large forces on infeasible targets, so the bound is looser)
            bad = ["qacc"]
        if bad:
            raise NonFiniteError(
                f"the smooth dynamics failed at this state and inputs: {'/'.join(bad)} non-finite or huge "
                f"(qpos/qvel beyond {MAX_STATE_VALUE:g}: MuJoCo reset the state; qacc beyond 1e30); check "
                "qpos, qvel, ctrl and applied forces for huge values")
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M)
        if self._damping is not None:
            M[np.diag_indices(m.nv)] += self._damping
        try:
            factor = scipy.linalg.cho_factor(M, check_finite=False)
        except np.linalg.LinAlgError:
            raise SingularInertiaError(
                "the inertia matrix is not positive definite at this state (check the model's "
                "masses and armature, or whether the state diverged)") from None
        return M, factor

    def solve(self, rhs: np.ndarray, factor=None) -> np.ndarray:
        """``(M + hD)⁻¹ rhs`` at the state of the last :meth:`evaluate`, for ``rhs (nv,)`` or ``(nv, k)``.

        With the damping in the armature (or no damping) this is MuJoCo's sparse ``LᵀDL`` solve
        (``mj_solveM``, no BLAS threads); otherwise ``factor`` (from :meth:`evaluate`) is used.
        """
        rhs = np.asarray(rhs, dtype=float)
        if self._damping is not None:
            return scipy.linalg.cho_solve(factor, rhs, check_finite=False)
        y = np.ascontiguousarray(rhs.T if rhs.ndim == 2 else rhs[None])
        x = np.empty_like(y)
        mujoco.mj_solveM(self.smooth_model, self.data, x, y)
        return x.T if rhs.ndim == 2 else x[0]

    def integrate_activation(self) -> np.ndarray:
        """``(na,)`` activations after one explicit Euler step from the loaded state."""
        return self.data.act + self.timestep * self.data.act_dot
