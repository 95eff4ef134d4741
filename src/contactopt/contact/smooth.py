"""The smooth time-stepping contact model of the online-iLQG paper (Tassa, Erez & Todorov 2012, Sec. III-C/D).

A cheap, smooth alternative to the convex model for planner dynamics: every
contact impulse is computed in closed form from a *diagonal* approximation of
the LCP, then made non-negative and friction-limited with smooth functions, so
one step is a C¹ (in fact mostly C∞) function of the state and finite-difference
derivatives are well behaved.

Time stepping (Sec. III-C)
--------------------------
With ``M`` the inertia, ``r`` the smooth forces (MuJoCo's ``qfrc_smooth`` with
the controls: gravity, Coriolis, passive springs/damping, actuators) and ``J`` the
contact Jacobian from :func:`~contactopt.contact.geometry.contact_space` (joint
limit rows first, then ``(t1, t2, n)`` per contact), semi-implicit Euler::

    M v' = M v + h r + Jᵀ λ                      (14a)
    q'   = q ⊕ h v'                               (mj_integratePos)

Joint damping ``D`` is implicit exactly as in MuJoCo's Euler integrator: ``M``
stands for ``M + h D`` everywhere (set ``implicit_damping=False`` for plain 14a).
Without contacts this *is* MuJoCo's Euler step (``mj_step`` with
``integrator="Euler"`` and contacts/limits disabled).

Diagonal approximation (Sec. III-D)
-----------------------------------
Let ``v_free = v + h M⁻¹ r``, ``A = J M⁻¹ Jᵀ`` (only its diagonal is used) and,
per row ``i`` of ``J``::

    b_i = φ_i / h + J_i v_free      normal rows (contacts and joint limits; φ = signed distance)
    b_i =           J_i v_free      tangent rows t1, t2 (no position term)

``φ_i / h`` is the paper's position correction (eq. 15b): ``λ̄_i = −b_i / A_ii``
is the impulse that would make the *next* distance ``φ_i + h J_i v'`` vanish if
row ``i`` were alone (regardless of sign).  The normal impulse is

    λ_i = a(φ_i) · smax(η λ̄_i, β / A_ii)  =  a(φ_i) · smax(−η b_i, β) / A_ii        (17)

``smax(x, β) = (√(x² + β²) + x) / 2`` is the paper's smooth ``max(x, 0)``
(:func:`smax`); ``0 < η < 1`` scales the correction (η < 1 gives a soft,
damped contact: a resting contact is a discrete spring-damper whose error
shrinks by ``√(1 − η)`` per step and settles at ``φ ≈ −(1/η − 1) g h²``).

**β is in velocity units [m/s]** (``smax(ηλ̄, β/A_ii) = smax(−ηb, β)/A_ii`` since
``smax(cx, cβ) = c·smax(x, β)``): the smoothing then does not depend on the
body's mass.  The paper's β = 1 has no stated unit; taken as 1 N·s or 1 m/s it
is 50-100× the impulse/velocity change of a resting contact in our models (a
1 kg ball at h = 10 ms needs 0.1 N·s), so a contact would push with ``β/2`` even
at zero approach — we default to β = 0.01 m/s instead.

The tangent rows, as in the paper, first take the impulses that would stop the
sliding velocity component-wise, ``ν̄_{i,k} = −b_{i,k} / A_{ii,k}`` (k = t1, t2),
then clamp ``ν̄_i`` smoothly into the friction cone ``‖ν_i‖ ≤ μ λ_i``::

    ν_i = ν̄_i · c / (c^p + ‖ν̄_i‖^p)^(1/p),   c = μ λ_i,  p = friction_sharpness

``‖ν_i‖`` is a smooth approximation of ``min(‖ν̄_i‖, c)`` that is *always inside the
cone*, equals ``ν̄`` to first order for small slip (sticking) and tends to
Coulomb ``μ λ`` for large slip.  **Deviation from the paper:** the paper writes
``ν_i = ν̄_i/‖ν̄_i‖ · smin(‖ν̄_i‖, μλ_i)`` with ``smin(x, β) = β − smax(−x, β)``;
taken literally that gives ``‖ν_i‖ = μλ_i/2`` as ``ν̄_i → 0``, a half-cone impulse
in an undefined direction — discontinuous at zero slip (and pushing bodies at
rest).  We keep its intent (smooth saturation at μλ) with the formula above
(C∞ in ν̄ for p = 2; C¹ for any p ≥ 1).  :func:`smin` is provided as the paper
defines it.

Activation and smoothness
-------------------------
Contacts come from MuJoCo's collision detection within ``w_max``
(:func:`contact_space`).  Since ``smax > 0`` everywhere, a contact entering the
set at ``φ = w_max`` would switch on a (tiny, ``≈ β² h / (4ηφ)``) impulse with a
jump.  ``a(φ)`` fades it in: ``a = 1`` for ``φ ≤ φ₀ = (1 − fade)·w_max``,
``a = 0`` at ``w_max``, a quintic smoothstep (C²) in between.  The fade is not
in the paper; with the defaults (w_max = 0.1 m, fade = 0.5) it only touches
contacts more than 5 cm apart, where the impulse is negligible anyway unless the
approach is faster than ``0.05 m / h``.  With it, one step is C¹ in ``(q, v, u)``
wherever MuJoCo's geometry (distance, frame, Jacobian) is smooth.

What is approximate
-------------------
* The diagonal approximation ignores coupling between contacts (``A_ij``, i ≠ j),
  and between a contact's own rows: contacts sharing a body each correct the
  full error, so several simultaneous contacts over-correct (η < 1 tempers this).
* Friction is component-wise with the tangent-row diagonals ``A_{t1}``, ``A_{t2}``:
  if they differ, the result depends on the contact frame's tangent orientation
  (which MuJoCo chooses from the normal).  Torsional/rolling friction are ignored.
* Joint limits are normal rows without friction.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import mujoco
import numpy as np

from ..dynamics import RolloutResult
from ..dynamics.shared import DerivativePool, derivative_indices, interpolate_skipped, thread_count
from ..dynamics.state_space import MujocoStateSpace
from ..errors import (
    NonFiniteError,
    ParameterError,
    ShapeError,
    as_array,
    check_instance,
    check_positive,
)
from ..model import MAX_STATE_VALUE
from .geometry import ContactSpace, contact_space
from .smooth_dynamics import SingularInertiaError, UnconstrainedDynamics
from .smooth_model import (  # noqa: F401  (MOBILITY_FLOOR, regularized_inverse: re-exported)
    MOBILITY_FLOOR,
    SmoothContactModel,
    regularized_inverse,
    smax,
    smin,
)

__all__ = [
    "SmoothContactDynamics",
    "SmoothContactModel",
    "SmoothImpulse",
    "SmoothRollout",
    "SmoothStep",
    "smax",
    "smin",
]


# --------------------------------------------------------------------------- dynamics


class SmoothImpulse(NamedTuple):
    """Contact impulses of one step.

    Attributes:
      f: ``(n,)`` impulse [N·s; N·m·s for hinge limits]: limits, then ``(t1, t2, n)`` per contact.
      space: the :class:`ContactSpace` at the start state (``J``, distances, frames, ...).
      b: ``(n,)`` eq. 15b per row [m/s]; A_diag: ``(n,)`` the row scale used,
      :meth:`SmoothContactModel.row_scale` of ``J M⁻¹ Jᵀ`` (its diagonal with ``scaling="diagonal"``).
    """

    f: np.ndarray
    space: ContactSpace
    b: np.ndarray
    A_diag: np.ndarray

    @property
    def normal(self) -> np.ndarray:
        """``(n_l + n_c,)`` normal impulses λ (aligned with ``space.distance``)."""
        return self.f[self.space.normal_rows()]

    @property
    def generalized(self) -> np.ndarray:
        """``(nv,)`` generalized impulse ``Jᵀ f``."""
        return self.space.J.T @ self.f


class SmoothStep(NamedTuple):
    """``(qpos_next, qvel_next, impulse)`` of :meth:`SmoothContactDynamics.step`."""

    qpos: np.ndarray
    qvel: np.ndarray
    impulse: SmoothImpulse


class SmoothRollout(NamedTuple):
    """Result of :meth:`SmoothContactDynamics.rollout`.

    qpos ``([B,] T+1, nq)``, qvel ``([B,] T+1, nv)`` (index 0 is the initial state),
    normal ``([B,] T)``: the sum of the normal impulses of each step [N·s].
    """

    qpos: np.ndarray
    qvel: np.ndarray
    normal: np.ndarray


class SmoothContactDynamics(MujocoStateSpace, DerivativePool):
    """Semi-implicit Euler with the paper's smooth diagonal contact model, as planner dynamics.

    Implements :class:`~contactopt.dynamics.Dynamics` on the state ``x = [qpos, qvel, act]``
    (tangent ``[dq, dv, dact]``, MuJoCo's convention): :meth:`rollout` under a feedback
    policy and :meth:`derivatives` ``A = ∂x'/∂x``, ``B = ∂x'/∂u``, so iLQG can plan with it
    (``contactopt run TASK --set dynamics=smooth``); :meth:`step_data` advances an ``MjData``,
    so it can be the plant (``--plant-contact smooth``).

    Args:
      model: the ``MjModel``; its ``opt.timestep`` is h.  MuJoCo's smooth dynamics
        (``M``, ``qfrc_smooth``) are evaluated on a private copy with the constraint
        solver disabled (edits of ``model`` after construction other than the
        collision fields :func:`contact_space` re-syncs are not seen).  The user's
        ``opt.disableflags`` (contact/limit/constraint) still select which rows exist.
      contact_model: :class:`SmoothContactModel` (defaults if None).
      implicit_damping: ``M + h·diag(dof_damping)`` as in MuJoCo's Euler integrator.
      derivatives: ``"analytic"`` (default) or ``"fd"``, how :meth:`derivatives` works
        (:meth:`linearize`).
      nthread: threads of :meth:`derivatives` (default ``$CONTACTOPT_NUM_THREADS``, else the
        CPU count); each has its own scratch data.
      derivative_stride: differentiate every k-th step (and the last), interpolate between.
      eps: finite-difference step.

    Activations (``na > 0``) are integrated by explicit Euler.  :meth:`step` and
    :meth:`rollout_batch` take ``act = 0``; :meth:`rollout` and :meth:`step_data` carry them.
    Not thread-safe (one scratch ``MjData`` per object; :meth:`derivatives` makes its own).
    """

    def __init__(self, model: mujoco.MjModel, contact_model: SmoothContactModel | None = None, *,
                 implicit_damping: bool = True, derivatives: str = "analytic", nthread: int | None = None,
                 derivative_stride: int = 1, eps: float = 1e-6):
        model = check_instance("model", model, mujoco.MjModel)
        self.contact_model = check_instance("contact_model", contact_model, SmoothContactModel, SmoothContactModel)
        self._init_state_space(model)
        self._implicit_damping = bool(implicit_damping)
        self._smooth = UnconstrainedDynamics(model, implicit_damping=implicit_damping, damping_in_armature=True)
        self.timestep = self._smooth.timestep
        if derivatives not in ("analytic", "fd"):
            raise ParameterError(f"derivatives must be 'analytic' or 'fd', got {derivatives!r}")
        self.derivative_mode = derivatives
        self.nthread = thread_count(nthread)
        if isinstance(derivative_stride, bool) or int(derivative_stride) != derivative_stride or derivative_stride < 1:
            raise ParameterError(f"derivative_stride must be an integer >= 1, got {derivative_stride!r}")
        self.derivative_stride = int(derivative_stride)
        self.eps = check_positive("eps", eps)
        self._workers: list[UnconstrainedDynamics] = []
        # first dof of each free/ball joint's rotation (a local rotation vector); the other dofs
        # integrate linearly, dq' = dq + h dv'
        self._rotation_dofs = [int(model.jnt_dofadr[j]) + (3 if t == _FREE else 0)
                               for j, t in enumerate(model.jnt_type) if t in (_FREE, _BALL)]
        self._dq_identity = np.ones(model.nv)
        for dadr in self._rotation_dofs:
            self._dq_identity[dadr:dadr + 3] = 0.0

    # ------------------------------------------------------------------ one step

    def _load(self, qpos, qvel, ctrl, qfrc_applied=None, xfrc_applied=None, act=None,
              mocap_pos=None, mocap_quat=None, scratch=None):
        (scratch or self._smooth).load(qpos, qvel, ctrl=ctrl, qfrc_applied=qfrc_applied,
                                       xfrc_applied=xfrc_applied, act=act, mocap_pos=mocap_pos,
                                       mocap_quat=mocap_quat)

    def _advance(self, scratch: UnconstrainedDynamics | None = None) -> SmoothStep:
        """One step from the state loaded in the scratch data (eqs. 14–17)."""
        sd = scratch or self._smooth
        m, d, h = sd.smooth_model, sd.data, self.timestep
        _, factor = sd.evaluate()
        v_free = d.qvel + h * sd.solve(d.qfrc_smooth, factor)
        space = contact_space(self.model, d, self.contact_model.w_max)
        if space.n:
            J = space.J
            Minv_JT = sd.solve(J.T, factor)
            A_diag = self.contact_model.row_scale(space, J @ Minv_JT)
            b = J @ v_free
            b[space.normal_rows()] += space.distance / h
            f = self.contact_model.impulses(space, b, A_diag)
            v_next = v_free + Minv_JT @ f
        else:
            b = A_diag = f = np.zeros(0)
            v_next = v_free
        q_next = d.qpos.copy()
        mujoco.mj_integratePos(m, q_next, v_next, h)
        return SmoothStep(q_next, v_next, SmoothImpulse(f, space, b, A_diag))

    def step(self, qpos, qvel, ctrl=None, *, qfrc_applied=None, xfrc_applied=None,
             mocap_pos=None, mocap_quat=None) -> SmoothStep:
        """One step ``(q, v, u) → (q', v', impulse)`` (module docstring).

        Args:
          qpos ``(nq,)``, qvel ``(nv,)``, ctrl ``(nu,)`` (zero if None; clamped by MuJoCo
          if ``ctrllimited``); optional ``qfrc_applied (nv,)``, ``xfrc_applied (nbody, 6)``,
          mocap poses.  Models with activations are stepped with ``act = 0``: use
          :meth:`step_data`.

        Returns:
          :class:`SmoothStep` ``(qpos, qvel, impulse)`` (new arrays).

        Raises:
          ShapeError / NonFiniteError: bad array;
          :class:`~contactopt.contact.smooth_dynamics.SingularInertiaError`: ``M`` not PD.
        """
        self._load(qpos, qvel, ctrl, qfrc_applied, xfrc_applied, None, mocap_pos, mocap_quat)
        return self._advance()

    def step_data(self, data: mujoco.MjData, *, forward: bool = False) -> SmoothImpulse:
        """Advance ``data`` in place by one step (``qpos``, ``qvel``, ``act``, ``time``).

        Reads ``qpos, qvel, ctrl, qfrc_applied, xfrc_applied, act`` and mocap poses.  With
        ``forward=False`` the derived quantities of ``data`` (positions, sensors) are not
        updated; ``forward=True`` recomputes them for the new state by ``mj_forward`` on the
        constraint-free copy (so ``data``'s contacts and constraint forces stay empty: the
        contacts are this model's).  Returns the impulse.
        """
        m = self.model
        if not isinstance(data, mujoco.MjData):
            raise ParameterError(f"data must be a mujoco.MjData, got {type(data).__name__}")
        if data.qpos.shape != (m.nq,) or data.qvel.shape != (m.nv,) or data.ctrl.shape != (m.nu,):
            raise ShapeError(f"data does not match the model (nq={m.nq}, nv={m.nv}, nu={m.nu})")
        self._load(data.qpos, data.qvel, data.ctrl, data.qfrc_applied, data.xfrc_applied,
                   data.act if m.na else None, data.mocap_pos if m.nmocap else None,
                   data.mocap_quat if m.nmocap else None)
        res = self._advance()
        if m.na:
            data.act[:] = self._smooth.integrate_activation()
        data.qpos[:] = res.qpos
        data.qvel[:] = res.qvel
        data.time += self.timestep
        if forward:
            mujoco.mj_forward(self._smooth.smooth_model, data)
        return res.impulse

    def _step_state(self, x: np.ndarray, u: np.ndarray, scratch=None) -> np.ndarray:
        """``x' = f(x, u)`` for a packed state ``x (nx,)`` → ``(nx,)``."""
        nq, nv = self.nq, self.nv
        sd = scratch or self._smooth
        sd.load(x[:nq], x[nq:nq + nv], ctrl=u, act=x[nq + nv:] if self.na else None)
        res = self._advance(sd)
        out = np.empty(self.nx)
        out[:nq], out[nq:nq + nv] = res.qpos, res.qvel
        if self.na:
            out[nq + nv:] = sd.integrate_activation()
        return out

    # ------------------------------------------------------------------ Dynamics: rollout

    def rollout(self, x0, U, *, X_ref=None, K=None, lower=None, upper=None) -> RolloutResult:
        """Simulate ``T`` steps: ``u_i = clip(U_i + K_i (x_i ⊖ X_ref_i), lower, upper)``, ``x_{i+1} = f(x_i, u_i)``.

        Args:
          x0: ``(nx,)``; U: ``(T, nu)``; X_ref: ``(≥T, nx)`` (required with ``K``);
          K: ``(T, nu, ndx)``; lower, upper: ``(nu,)`` (default :attr:`control_lower`/``upper``).

        Returns:
          :class:`~contactopt.dynamics.RolloutResult`; a step that fails (non-finite or huge
          state, singular inertia) sets ``diverged`` and fills the remaining rows with NaN.
        """
        x0, U, X_ref, K, lo, hi = self._rollout_inputs(x0, U, X_ref, K, lower, upper, max_abs=MAX_STATE_VALUE)
        T = U.shape[0]
        X = np.empty((T + 1, self.nx))
        Ua = np.empty((T, self.nu))
        X[0] = x0
        for i in range(T):
            u = U[i]
            if K is not None:
                u = u + K[i] @ self.state_difference(X_ref[i], X[i])
            Ua[i] = np.minimum(np.maximum(u, lo), hi)
            try:
                xi = self._step_state(X[i], Ua[i])
            except (NonFiniteError, SingularInertiaError, ParameterError):
                xi = None
            if xi is None or not np.all(np.abs(xi) <= MAX_STATE_VALUE):
                X[i + 1:] = np.nan
                Ua[i + 1:] = np.nan
                return RolloutResult(X, Ua, True, i)
            X[i + 1] = xi
        return RolloutResult(X, Ua)

    def rollout_batch(self, qpos0, qvel0, ctrls) -> SmoothRollout:
        """Open-loop rollouts of ``T`` steps from ``(qpos0, qvel0)`` under ``ctrls`` (``act = 0``).

        Args:
          qpos0 ``(nq,)`` or ``(B, nq)``; qvel0 ``(nv,)`` or ``(B, nv)`` (same leading shape);
          ctrls ``(T, nu)``, or ``(B, T, nu)`` for a batch (a ``(T, nu)`` array is shared by
          every batch member).

        Returns:
          :class:`SmoothRollout` with qpos ``([B,] T+1, nq)``, qvel ``([B,] T+1, nv)``,
          normal ``([B,] T)`` (sum of normal impulses per step).
        """
        m = self.model
        q0 = as_array("qpos0", qpos0)
        batched = q0.ndim == 2
        q0 = as_array("qpos0", q0, (None, m.nq) if batched else (m.nq,))
        v0 = as_array("qvel0", qvel0, (q0.shape[0], m.nv) if batched else (m.nv,))
        U = as_array("ctrls", ctrls)
        if batched and U.ndim == 3:
            U = as_array("ctrls", U, (q0.shape[0], None, m.nu))
        else:
            U = as_array("ctrls", U, (None, m.nu))
            if batched:
                U = np.broadcast_to(U, (q0.shape[0],) + U.shape)
        if not batched:
            q0, v0, U = q0[None], v0[None], U[None]
        B, T = q0.shape[0], U.shape[1]
        Q = np.empty((B, T + 1, m.nq))
        V = np.empty((B, T + 1, m.nv))
        lam = np.zeros((B, T))
        for k in range(B):
            Q[k, 0], V[k, 0] = q0[k], v0[k]
            for t in range(T):
                self._load(Q[k, t], V[k, t], U[k, t])
                res = self._advance()
                Q[k, t + 1], V[k, t + 1] = res.qpos, res.qvel
                lam[k, t] = res.impulse.normal.sum()
        if not batched:
            Q, V, lam = Q[0], V[0], lam[0]
        return SmoothRollout(Q, V, lam)

    # ------------------------------------------------------------------ Dynamics: derivatives

    def derivative_indices(self, T: int) -> np.ndarray:
        """Step indices that are differentiated for a horizon ``T`` (the rest are interpolated)."""
        return derivative_indices(T, self.derivative_stride)

    def derivatives(self, X, U, *, nthread: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Transition Jacobians ``A (T, ndx, ndx)``, ``B (T, ndx, nu)`` along a trajectory.

        Args:
          X: ``(T+1, nx)`` or ``(T, nx)`` states (row ``T`` is ignored); U: ``(T, nu)``.
          nthread: override of the thread count for this call.

        Each differentiated step is :meth:`linearize` (its mode: :attr:`derivative_mode`); with
        a stride ``k > 1`` the steps in between are interpolated linearly.
        """
        X, U, T = self._derivative_inputs(X, U)
        A = np.zeros((T, self.ndx, self.ndx))
        B = np.zeros((T, self.ndx, self.nu))
        idx = self.derivative_indices(T)
        nth = max(1, min(self.nthread if nthread is None else int(nthread), len(idx)))
        while len(self._workers) < nth:
            self._workers.append(UnconstrainedDynamics(self.model, implicit_damping=self._implicit_damping,
                                                       damping_in_armature=True))

        def work(j):
            sd = self._workers[j]
            for i in idx[j::nth]:
                A[i], B[i] = self.linearize(X[i], U[i], scratch=sd)

        if nth == 1:
            work(0)
        else:
            pool = self._ensure_pool(nth - 1)
            futures = [pool.submit(work, j) for j in range(1, nth)]
            try:
                work(0)
            finally:
                for f in futures:
                    f.result()
        if self.derivative_stride > 1:
            interpolate_skipped(A, B, idx)
        return A, B

    def linearize(self, x, u, *, mode: str | None = None, scratch=None) -> tuple[np.ndarray, np.ndarray]:
        """``A = ∂x'/∂x (ndx, ndx)``, ``B = ∂x'/∂u (ndx, nu)`` of one step at ``(x, u)``.

        ``mode="fd"``: forward differences of the whole step (each column re-runs collision
        detection and the contact model) — the readable reference.

        ``mode="analytic"`` (default): with ``M̃ = M + hD``, ``a = M̃⁻¹ r`` (``r = qfrc_smooth``),
        ``v_free = v + h a``, ``b = J v_free + φ/h`` (normal rows), ``f = f(b, φ)`` and
        ``v' = v_free + M̃⁻¹ Jᵀ f``, every column ``z`` of ``(dq, dv, dact, du)`` is::

            ∂v_free/∂z = [z = v] + h M̃⁻¹ (∂r/∂z − [z = q] ∂M/∂q a)     (MuJoCo, forward differences)
            ∂b/∂z      = J ∂v_free/∂z + [z = q] J_n / h                  (∂φ/∂q = J_n)
            ∂f/∂z      = F_b ∂b/∂z + [z = q] F_φ J_n                     (:meth:`SmoothContactModel.impulse_jacobian`)
            ∂v'/∂z     = ∂v_free/∂z + M̃⁻¹ Jᵀ ∂f/∂z

        which is exact in ``v``, ``act`` and ``u`` and neglects, in ``q``, the change of the
        contact frames, of ``J`` and of ``M̃⁻¹Jᵀ`` (curvature terms ``∝ f`` and ``∝ J̇``).  Then
        ``q' = q ⊕ h v'``: ``dq' = dq + h dv'`` for hinge, slide and translation dofs, and
        ``dθ' = R(hω')ᵀ dθ + J_r(hω') h dω'`` for the rotation of a free or ball joint (``J_r`` the
        right Jacobian of SO(3)); ``act' = act + h act_dot``.

        Args:
          x: ``(nx,)``; u: ``(nu,)``; mode: ``"analytic"``/``"fd"`` (default :attr:`derivative_mode`).
        """
        mode = self.derivative_mode if mode is None else mode
        x = as_array("x", x, (self.nx,), max_abs=MAX_STATE_VALUE)
        u = as_array("u", u, (self.nu,))
        sd = scratch or self._smooth
        if mode == "fd":
            return self._linearize_fd(x, u, sd)
        if mode != "analytic":
            raise ParameterError(f"mode must be 'analytic' or 'fd', got {mode!r}")
        return self._linearize_analytic(x, u, sd)

    def _fd_control_step(self, k: int, u: np.ndarray) -> float:
        """Forward-difference step of control ``k``, negative where ``u + eps`` passes the upper limit."""
        return -self.eps if u[k] + self.eps > self.control_upper[k] else self.eps

    def _linearize_fd(self, x, u, sd):
        ndx, nu, eps = self.ndx, self.nu, self.eps
        x0 = self._step_state(x, u, sd)
        A = np.empty((ndx, ndx))
        B = np.empty((ndx, nu))
        dx = np.zeros(ndx)
        for j in range(ndx):
            dx[j] = eps
            xj = self.state_integrate(x, dx)
            dx[j] = 0.0
            A[:, j] = self.state_difference(x0, self._step_state(xj, u, sd)) / eps
        for k in range(nu):
            e = self._fd_control_step(k, u)
            uk = u.copy()
            uk[k] += e
            B[:, k] = self.state_difference(x0, self._step_state(x, uk, sd)) / e
        return A, B

    def _linearize_analytic(self, x, u, sd):
        nq, nv, na, nu, h, eps = self.nq, self.nv, self.na, self.nu, self.timestep, self.eps
        ndx = self.ndx
        m, d = sd.smooth_model, sd.data
        q, v = x[:nq], x[nq:nq + nv]
        act = x[nq + nv:] if na else None
        sd.load(q, v, ctrl=u, act=act)
        _, factor = sd.evaluate()
        r0 = d.qfrc_smooth.copy()
        adot0 = d.act_dot.copy() if na else None
        a_free = sd.solve(r0, factor)
        v_free = v + h * a_free
        space = contact_space(self.model, d, self.contact_model.w_max)
        # columns z = (dq, dv, dact, du): dR = ∂r/∂z − [z = q] ∂M/∂q a, dAdot = ∂act_dot/∂z
        nz = ndx + nu
        dR = np.empty((nv, nz))
        dAdot = np.empty((na, nz)) if na else None
        Ma0 = np.empty(nv)
        mujoco.mj_mulM(m, d, Ma0, a_free)
        y0 = r0 - Ma0
        Ma = np.empty(nv)
        dq = np.zeros(nv)
        qj = np.empty(nq)
        skip_none, skip_pos, skip_vel = _STAGE_NONE, _STAGE_POS, _STAGE_VEL
        for j in range(nv):                                   # positions: everything changes
            dq[j] = eps
            qj[:] = q
            mujoco.mj_integratePos(m, qj, dq, 1.0)
            dq[j] = 0.0
            d.qpos[:] = qj
            mujoco.mj_forwardSkip(m, d, skip_none, 1)
            mujoco.mj_mulM(m, d, Ma, a_free)
            dR[:, j] = (d.qfrc_smooth - Ma - y0) / eps
            if na:
                dAdot[:, j] = (d.act_dot - adot0) / eps
        d.qpos[:] = q
        mujoco.mj_forwardSkip(m, d, skip_none, 1)             # back to the base positions
        for j in range(nv):                                   # velocities: skip the position stage
            d.qvel[j] = v[j] + eps
            mujoco.mj_forwardSkip(m, d, skip_pos, 1)
            d.qvel[j] = v[j]
            dR[:, nv + j] = (d.qfrc_smooth - r0) / eps
            if na:
                dAdot[:, nv + j] = (d.act_dot - adot0) / eps
        if na or nu:
            mujoco.mj_forwardSkip(m, d, skip_pos, 1)
        for k in range(na):                                   # activations and controls: skip both
            d.act[k] = act[k] + eps
            mujoco.mj_forwardSkip(m, d, skip_vel, 1)
            d.act[k] = act[k]
            dR[:, 2 * nv + k] = (d.qfrc_smooth - r0) / eps
            dAdot[:, 2 * nv + k] = (d.act_dot - adot0) / eps
        for k in range(nu):
            e = self._fd_control_step(k, u)
            d.ctrl[k] = u[k] + e
            mujoco.mj_forwardSkip(m, d, skip_vel, 1)
            d.ctrl[k] = u[k]
            dR[:, ndx + k] = (d.qfrc_smooth - r0) / e
            if na:
                dAdot[:, ndx + k] = (d.act_dot - adot0) / e
        Dv = h * sd.solve(dR, factor)                              # ∂v_free/∂z (nv, nz)
        Dv[np.arange(nv), nv + np.arange(nv)] += 1.0
        v_next = v_free
        if space.n:
            J = space.J
            Minv_JT = sd.solve(J.T, factor)
            A = J @ Minv_JT
            A_diag = self.contact_model.row_scale(space, A)
            nrm = space.normal_rows()
            b = J @ v_free
            b[nrm] += space.distance / h
            f = self.contact_model.impulses(space, b, A_diag)
            v_next = v_free + Minv_JT @ f
            F_b, F_phi = self.contact_model.impulse_jacobian(space, b, A_diag, A)
            Jn = J[nrm]
            Db = J @ Dv
            Db[nrm, :nv] += Jn / h
            Df = F_b @ Db
            Df[:, :nv] += F_phi @ Jn
            Dv = Dv + Minv_JT @ Df
        # positions q' = q ⊕ h v'
        Dq = h * Dv
        Dq[np.arange(nv), np.arange(nv)] += self._dq_identity
        for dadr in self._rotation_dofs:
            R, Jr = _so3_exp_and_right_jacobian(h * v_next[dadr:dadr + 3])
            rows = slice(dadr, dadr + 3)
            Dq[rows] = Jr @ Dq[rows]                          # h dω' through J_r
            Dq[rows, rows] += R.T                             # dθ, transported to the new frame
        out = np.empty((ndx, nz))
        out[:nv] = Dq
        out[nv:2 * nv] = Dv
        if na:
            Da = h * dAdot
            Da[np.arange(na), 2 * nv + np.arange(na)] += 1.0
            out[2 * nv:] = Da
        return out[:, :ndx].copy(), out[:, ndx:].copy()


_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_BALL = int(mujoco.mjtJoint.mjJNT_BALL)
_STAGE_NONE = int(mujoco.mjtStage.mjSTAGE_NONE)
_STAGE_POS = int(mujoco.mjtStage.mjSTAGE_POS)
_STAGE_VEL = int(mujoco.mjtStage.mjSTAGE_VEL)


def _so3_exp_and_right_jacobian(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``R = exp([w]ₓ)`` and the right Jacobian ``J_r(w)`` of SO(3) for a rotation vector ``w (3,)``.

    ``R = I + (sin θ/θ) W + ((1 − cos θ)/θ²) W²``, ``J_r = I − ((1 − cos θ)/θ²) W + ((θ − sin θ)/θ³) W²``
    with ``W = [w]ₓ``, ``θ = ‖w‖`` (series for small θ): ``exp(w + δ) ≈ exp(w) exp(J_r δ)``.
    """
    th = float(np.linalg.norm(w))
    W = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    W2 = W @ W
    if th < 1e-4:
        a, b, c = 1.0 - th * th / 6.0, 0.5 - th * th / 24.0, 1.0 / 6.0 - th * th / 120.0
    else:
        a, b, c = math.sin(th) / th, (1.0 - math.cos(th)) / th ** 2, (th - math.sin(th)) / th ** 3
    eye = np.eye(3)
    return eye + a * W + b * W2, eye - b * W + c * W2
