"""Forward and inverse dynamics in generalized coordinates with the convex contact model.

Discrete-time equations of motion (Todorov 2011, eq. 5–7), with ``w`` the
generalized velocity (MuJoCo's ``qvel``), ``M`` the inertia, ``n`` the passive
minus bias forces (``qfrc_passive − qfrc_bias``: gravity, Coriolis,
springs, damping, gravity compensation) and ``u`` the applied generalized force
(actuators, ``qfrc_applied``, ``xfrc_applied``)::

    M w⁺ = M w + (n + u) h + Jᵀ f                  (5)
    v⁺ = J w⁺ = c + A f,   A = J M⁻¹ Jᵀ            (6)
    c = J w + J M⁻¹ (n + u) h                       (7)
    q⁺ = q ⊕ h w⁺                                  (positions on the manifold: mj_integratePos)

Joint damping ``D = diag(dof_damping)`` is integrated implicitly, as in MuJoCo's
Euler integrator: ``M`` above stands for ``M + h D`` (and ``n`` keeps the damping
force ``−D w``), i.e. ``(M + hD)(w⁺ − w) = h(n + u) + Jᵀ f``.  With explicit
damping the light distal links of the humanoid (damping 5 N·m·s, inertia ~0.02
kg·m²) would be unstable at h = 10 ms.  Set ``implicit_damping=False`` for the
plain eq. 5.

``J``, the distances, frames and friction come from :func:`contact_space` (active
joint limits and contacts within ``w_max``); ``R`` from the distances by the
contact model's schedule (eq. 24).  MuJoCo evaluates ``M`` and ``n + u`` (its
"smooth" dynamics, ``qfrc_smooth``/``qacc_smooth``) on a private copy of the model
with its own constraint solver switched off, so MuJoCo's soft contacts play no part.

Forward dynamics ``w⁺ = a(q, w, u)`` solves the contact-space forward problem
for ``f``; inverse dynamics ``u = b(q, w, w⁺)`` solves the inverse problem for
``v⁺ = J w⁺`` and reads ``u`` off eq. 5::

    u = (M (w⁺ − w) − Jᵀ f) / h − n

The ``v_min`` rule
------------------
For a limit or contact at normal distance ``w_i`` [m, or rad for hinge limits]
the next-step normal velocity must keep it from penetrating (first order:
``w_i + h v_i ≥ 0``) and must repair an existing penetration gradually::

    v_min,i = −w_i / h             if w_i ≥ 0   (approach no faster than the gap closes in one step)
    v_min,i = −ρ · w_i / h          if w_i < 0   (recover the fraction ρ ∈ (0, 1] per step)

``ρ`` is ``penetration_recovery`` (default 0.2: a penetration decays by 20 % per
step instead of being pushed out in one step, which would eject the body with
the speed ``|w|/h``).  The rule is continuous at ``w = 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
import scipy.linalg

from ..errors import ParameterError, ShapeError, as_array, check_instance
from ..model import MAX_STATE_VALUE
from ..native.blas import one_blas_thread
from .convex import ContactBatch, ContactStatus, ConvexContactModel
from .geometry import ContactSpace, contact_space
from .smooth_dynamics import SingularInertiaError, UnconstrainedDynamics

__all__ = ["ConvexDynamics", "ConvexContactProblem", "ForwardStep", "InverseStep", "SingularInertiaError"]



@dataclass(frozen=True)
class ConvexContactProblem:
    """Everything eq. 5–7 need at one state.

    Attributes:
      space: the :class:`ContactSpace` (``J (n, nv)``, distances, friction, frames).
      M: ``(nv, nv)`` joint-space inertia [kg, kg·m², ...], plus ``h·diag(dof_damping)``
        with implicit damping.
      Minv_JT: ``(nv, n)`` ``M⁻¹ Jᵀ``.
      A: ``(n, n)`` ``J M⁻¹ Jᵀ``, symmetrized.
      qacc_smooth: ``(nv,)`` ``M⁻¹ (n + u)``, the acceleration without contact.
      qfrc_smooth: ``(nv,)`` ``n + u`` [N, N·m].
      v_min: ``(n_l + n_c,)`` minimum normal velocities (module docstring).
      R: ``(n,)`` regularizer diagonal from the distances.
      timestep: h [s].
    """

    space: ContactSpace
    M: np.ndarray
    Minv_JT: np.ndarray
    A: np.ndarray
    qacc_smooth: np.ndarray
    qfrc_smooth: np.ndarray
    v_min: np.ndarray
    R: np.ndarray
    timestep: float

    def batch(self) -> ContactBatch:
        """This problem as a one-element :class:`ContactBatch` (validated)."""
        s = self.space
        return ContactBatch([self.A], friction=[s.friction], v_min=[self.v_min], R=[self.R],
                            n_limits=[s.n_limits])


@dataclass(frozen=True)
class ForwardStep:
    """One forward step ``(q, w, u) → (q⁺, w⁺)``.

    Attributes:
      qpos: ``(nq,)`` next configuration; qvel: ``(nv,)`` next velocity w⁺.
      f: ``(n,)`` contact impulse [N·s] (limits, then (t1, t2, n) per contact).
      v: ``(n,)`` next contact velocity ``J w⁺``.
      problem: the :class:`ConvexContactProblem` of the start state.
      status, iterations: of the contact solve.
      energy: ``(2,)`` potential and kinetic energy of the start state [J] (zeros unless
        the model had ``mjENBL_ENERGY`` set when the :class:`ConvexDynamics` was made).
    """

    qpos: np.ndarray
    qvel: np.ndarray
    f: np.ndarray
    v: np.ndarray
    problem: ConvexContactProblem
    status: ContactStatus
    iterations: int
    energy: np.ndarray

    @property
    def normal_impulse(self) -> np.ndarray:
        """``(n_l + n_c,)`` normal components of ``f`` [N·s]."""
        return self.f[self.problem.space.normal_rows()]


@dataclass(frozen=True)
class InverseStep:
    """One inverse step ``(q, w, w⁺) → u``.

    Attributes:
      qfrc: ``(nv,)`` applied generalized force u [N, N·m] that produces w⁺.
      f: ``(n,)`` contact impulse [N·s].
      c: ``(n,)`` contact velocity without impulse (eq. 7).
      problem: the :class:`ConvexContactProblem` (``qfrc_smooth`` there is ``n`` alone).
      status, iterations: of the contact solve.
    """

    qfrc: np.ndarray
    f: np.ndarray
    c: np.ndarray
    problem: ConvexContactProblem
    status: ContactStatus
    iterations: int


class ConvexDynamics:
    """Forward and inverse dynamics of a MuJoCo model with the convex contact model.

    Args:
      model: the ``MjModel``.  Its time step is h.  A private copy (constraints
        disabled) evaluates the smooth dynamics, so edits of ``model`` after
        construction are not seen: make a new object.
      contact_model: the :class:`ConvexContactModel` (κ, q, R schedule, w_max); default parameters if None.
      penetration_recovery: ρ ∈ (0, 1] of the ``v_min`` rule (module docstring).
      implicit_damping: integrate joint damping implicitly (``M + h D``, module docstring).

    Not thread-safe (one scratch ``MjData``): use one object per thread.
    Actuator activations (``na > 0``) are integrated by explicit Euler.
    """

    def __init__(self, model: mujoco.MjModel, contact_model: ConvexContactModel | None = None, *,
                 penetration_recovery: float = 0.2, implicit_damping: bool = True):
        check_instance("model", model, mujoco.MjModel)
        contact_model = check_instance("contact_model", contact_model, ConvexContactModel, ConvexContactModel)
        rho = float(penetration_recovery)
        if not (math.isfinite(rho) and 0.0 < rho <= 1.0):
            raise ParameterError(f"penetration_recovery must be in (0, 1], got {penetration_recovery!r}")
        self.model = model
        self.contact_model = contact_model
        self.penetration_recovery = rho
        self._smooth = UnconstrainedDynamics(model, implicit_damping=implicit_damping)
        self.timestep = self._smooth.timestep

    # ------------------------------------------------------------------ pieces

    def v_min(self, distance) -> np.ndarray:
        """``(m,)`` minimum normal velocities for normal distances ``(m,)`` (module docstring)."""
        w = np.asarray(distance, dtype=float)
        return np.where(w >= 0.0, -w, -self.penetration_recovery * w) / self.timestep

    @one_blas_thread
    def problem(self, qpos, qvel, *, ctrl=None, qfrc_applied=None, xfrc_applied=None, act=None,
                mocap_pos=None, mocap_quat=None) -> ConvexContactProblem:
        """Evaluate ``M``, ``n + u``, the contact space, ``A``, ``v_min`` and ``R`` at one state.

        Args:
          qpos: ``(nq,)``; qvel: ``(nv,)``.
          ctrl: ``(nu,)`` actuator controls (clamped by MuJoCo if ``ctrllimited``); zero if None.
          qfrc_applied: ``(nv,)`` generalized force; xfrc_applied: ``(nbody, 6)`` Cartesian wrenches.
          act: ``(na,)`` actuator activations; mocap_pos/mocap_quat: ``(nmocap, 3|4)``.
        """
        self._smooth.load(qpos, qvel, ctrl=ctrl, qfrc_applied=qfrc_applied, xfrc_applied=xfrc_applied,
                          act=act, mocap_pos=mocap_pos, mocap_quat=mocap_quat)
        M, factor = self._smooth.evaluate()
        m, d = self._smooth.smooth_model, self._smooth.data
        space = contact_space(self.model, d, self.contact_model.w_max)
        qacc_smooth = scipy.linalg.cho_solve(factor, d.qfrc_smooth)
        n = space.n
        if n:
            Minv_JT = scipy.linalg.cho_solve(factor, space.J.T)
            A = space.J @ Minv_JT
            A = 0.5 * (A + A.T)
        else:
            A = np.zeros((0, 0))
            Minv_JT = np.zeros((m.nv, 0))
        return ConvexContactProblem(
            space=space, M=M, Minv_JT=Minv_JT, A=A,
            qacc_smooth=qacc_smooth, qfrc_smooth=d.qfrc_smooth.copy(),
            v_min=self.v_min(space.distance),
            R=self.contact_model.regularizer(space.distance, space.n_limits),
            timestep=self.timestep,
        )

    # ------------------------------------------------------------------ dynamics

    @one_blas_thread
    def forward(self, qpos, qvel, *, ctrl=None, qfrc_applied=None, xfrc_applied=None, act=None,
                mocap_pos=None, mocap_quat=None, f_init=None) -> ForwardStep:
        """Forward dynamics ``(q, w, u) → (q⁺, w⁺)`` (eq. 5–7 and the forward contact map).

        ``w⁺ = w + h M⁻¹(n + u) + M⁻¹ Jᵀ f`` with ``f`` the forward solution for
        ``c = J (w + h M⁻¹ (n + u))``; ``q⁺ = q ⊕ h w⁺``.  Arguments as in :meth:`problem`;
        ``f_init`` an optional ``(n,)`` warm start.

        Raises:
          ShapeError, NonFiniteError: wrong shapes, NaN or infinity (also: MuJoCo found the
            acceleration at this state non-finite or beyond 1e10).
          ParameterError: a qpos/qvel entry beyond 1e10 (``MAX_STATE_VALUE``; MuJoCo would reset it).
        """
        qvel = as_array("qvel", qvel, (self.model.nv,))
        p = self.problem(qpos, qvel, ctrl=ctrl, qfrc_applied=qfrc_applied, xfrc_applied=xfrc_applied,
                         act=act, mocap_pos=mocap_pos, mocap_quat=mocap_quat)
        h = self.timestep
        w_free = qvel + h * p.qacc_smooth
        if p.space.n:
            c = p.space.J @ w_free
            sol = self.contact_model.forward_batch(p.batch(), c, f_init=f_init).problem(0)
            f, v, status, iters = sol.f, sol.v, sol.status, sol.iterations
            w_next = w_free + p.Minv_JT @ f
        else:
            f = v = np.zeros(0)
            status, iters = ContactStatus.CONVERGED, 0
            w_next = w_free
        q_next = self._smooth.data.qpos.copy()
        mujoco.mj_integratePos(self.model, q_next, w_next, h)
        return ForwardStep(q_next, w_next, f, v, p, status, iters, self._smooth.data.energy.copy())

    @one_blas_thread
    def inverse(self, qpos, qvel, qvel_next, *, act=None, mocap_pos=None, mocap_quat=None,
                f_init=None) -> InverseStep:
        """Inverse dynamics ``(q, w, w⁺) → u`` with the contact impulse.

        ``f`` is the inverse solution for ``v = J w⁺``; then
        ``u = (M (w⁺ − w) − Jᵀ f) / h − n`` (eq. 5), ``n`` evaluated with zero
        controls and applied forces.

        Args:
          qpos: ``(nq,)``; qvel, qvel_next: ``(nv,)`` w and w⁺.
          f_init: optional ``(n,)`` warm start.

        Raises:
          ShapeError, NonFiniteError: wrong shapes, NaN or infinity.
          ParameterError: a qpos/qvel/qvel_next entry beyond 1e10 (``MAX_STATE_VALUE``).
        """
        nv = self.model.nv
        qvel = as_array("qvel", qvel, (nv,))
        qvel_next = as_array("qvel_next", qvel_next, (nv,), max_abs=MAX_STATE_VALUE)
        p = self.problem(qpos, qvel, act=act, mocap_pos=mocap_pos, mocap_quat=mocap_quat)
        h = self.timestep
        if p.space.n:
            v = p.space.J @ qvel_next
            sol = self.contact_model.inverse_batch(p.batch(), v, f_init=f_init).problem(0)
            f, c, status, iters = sol.f, sol.c, sol.status, sol.iterations
            contact = p.space.J.T @ f
        else:
            f = c = np.zeros(0)
            status, iters = ContactStatus.CONVERGED, 0
            contact = np.zeros(nv)
        u = (p.M @ (qvel_next - qvel) - contact) / h - p.qfrc_smooth
        return InverseStep(u, f, c, p, status, iters)

    @one_blas_thread
    def step(self, data: mujoco.MjData) -> ForwardStep:
        """Advance ``data`` by one step in place: ``qpos``, ``qvel``, ``act`` and ``time``.

        Reads ``qpos, qvel, ctrl, qfrc_applied, xfrc_applied, act`` and the mocap
        poses from ``data``.  Derived quantities of ``data`` are not updated (call
        ``mj_forward`` if you need them).

        Raises:
          ShapeError: ``data`` belongs to a model of different size.
        """
        m = self.model
        if data.qpos.shape != (m.nq,) or data.qvel.shape != (m.nv,) or data.ctrl.shape != (m.nu,):
            raise ShapeError(f"data does not match the model (nq={m.nq}, nv={m.nv}, nu={m.nu})")
        res = self.forward(data.qpos, data.qvel, ctrl=data.ctrl, qfrc_applied=data.qfrc_applied,
                           xfrc_applied=data.xfrc_applied, act=data.act if m.na else None,
                           mocap_pos=data.mocap_pos if m.nmocap else None,
                           mocap_quat=data.mocap_quat if m.nmocap else None)
        if m.na:
            data.act[:] = self._smooth.integrate_activation()
        data.qpos[:] = res.qpos
        data.qvel[:] = res.qvel
        data.time += self.timestep
        return res
