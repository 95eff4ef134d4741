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
from dataclasses import dataclass
from typing import NamedTuple

import mujoco
import numpy as np
import scipy.linalg

from ..errors import ParameterError, ShapeError, as_array, check_instance
from .geometry import ContactSpace, contact_space
from .smooth_dynamics import UnconstrainedDynamics

__all__ = [
    "smax",
    "smin",
    "SmoothContactModel",
    "SmoothContactDynamics",
    "SmoothImpulse",
    "SmoothStep",
    "SmoothRollout",
]


# --------------------------------------------------------------------------- smooth functions


def smax(x, beta):
    """The paper's smooth ``max(x, 0)``: ``(√(x² + β²) + x) / 2`` (Fig. 1).

    ``> max(x, 0)`` everywhere, ``= β/2`` at 0, error ``≤ β/2`` and ``→ 0`` as
    ``β → 0``; C∞ for ``β > 0``; derivative ``(x/√(x² + β²) + 1)/2 ∈ (0, 1)``.
    Evaluated without cancellation for ``x ≪ −β`` (``β² / (2(√(x²+β²) − x))``).
    """
    x = np.asarray(x, dtype=float)
    beta = np.asarray(beta, dtype=float)
    s = np.hypot(x, beta)
    with np.errstate(divide="ignore", invalid="ignore"):
        neg = 0.5 * beta * beta / (s - x)
    return np.where(x >= 0, 0.5 * (s + x), np.where(s - x > 0, neg, 0.0))


def smin(x, beta):
    """The paper's ``smin(x, β) = β − smax(−x, β)``, a smooth min (Sec. III-D).

    As written in the paper: ``→ min(x, 0) + β`` as ``|x|/β → ∞``, i.e. it
    approximates ``min(x, β)`` for ``x ≫ β`` and ``x + β`` for ``x ≪ −β``; it tends to
    ``min(x, 0)`` as ``β → 0``.  Not used by the friction clamp (module docstring).
    """
    return np.asarray(beta, dtype=float) - smax(-np.asarray(x, dtype=float), beta)


def _fade(phi, w0, w1):
    """``a(φ)``: 1 for φ ≤ w0, 0 for φ ≥ w1, quintic smoothstep (C²) in between."""
    t = np.clip((phi - w0) / (w1 - w0), 0.0, 1.0)
    return 1.0 - t * t * t * (10.0 + t * (-15.0 + 6.0 * t))


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class SmoothContactModel:
    """Parameters of the smooth diagonal contact model (module docstring).

    Attributes:
      eta: η ∈ (0, 1], fraction of the diagonal LCP impulse applied (eq. 17).  Paper:
        0.7 for its simulator, 0.4 for its MPC controller's model; default 0.7 (the
        stiffer, more physical value; use 0.4 for a softer planning model).
      beta: β > 0 [m/s], smoothing of smax in velocity units (β/A_ii as an impulse).
        The paper's β = 1 is unit-less and far too large for SI models; default 0.01.
      friction_sharpness: p ≥ 1 of the friction clamp ``c/(c^p + ‖ν̄‖^p)^(1/p)``;
        larger is closer to the hard clamp ``min(‖ν̄‖, μλ)``.  Not in the paper
        (which uses smin, see module docstring); default 2 (C∞).
      friction_scale: multiplies every contact's MuJoCo friction coefficient μ (≥ 0);
        0 gives frictionless contacts.  Default 1.
      w_max: activation distance > 0 [m; rad for hinge limits] passed to
        :func:`contact_space`.  Default 0.1 (as :class:`ConvexContactModel`).
      fade: fraction ∈ (0, 1] of ``[0, w_max]`` over which impulses fade out (C²):
        full impulse for ``φ ≤ (1 − fade)·w_max``.  Default 0.5.
    """

    eta: float = 0.7
    beta: float = 0.01
    friction_sharpness: float = 2.0
    friction_scale: float = 1.0
    w_max: float = 0.1
    fade: float = 0.5

    def __post_init__(self):
        for name in ("eta", "beta", "friction_sharpness", "friction_scale", "w_max", "fade"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ParameterError(f"SmoothContactModel.{name} must be a number, got {value!r}")
            v = float(value)
            if not math.isfinite(v):
                raise ParameterError(f"SmoothContactModel.{name} must be finite, got {value!r}")
            object.__setattr__(self, name, v)
        if not 0.0 < self.eta <= 1.0:
            raise ParameterError(f"SmoothContactModel.eta must be in (0, 1], got {self.eta}")
        if not self.beta > 0.0:
            raise ParameterError(f"SmoothContactModel.beta must be positive, got {self.beta}")
        if not self.friction_sharpness >= 1.0:
            raise ParameterError(f"SmoothContactModel.friction_sharpness must be >= 1, got {self.friction_sharpness}")
        if not self.friction_scale >= 0.0:
            raise ParameterError(f"SmoothContactModel.friction_scale must be >= 0, got {self.friction_scale}")
        if not self.w_max > 0.0:
            raise ParameterError(f"SmoothContactModel.w_max must be positive, got {self.w_max}")
        if not 0.0 < self.fade <= 1.0:
            raise ParameterError(f"SmoothContactModel.fade must be in (0, 1], got {self.fade}")

    def activation(self, distance) -> np.ndarray:
        """``a(φ)`` for normal distances ``φ`` (1 near contact, 0 at ``w_max``)."""
        return _fade(np.asarray(distance, dtype=float), (1.0 - self.fade) * self.w_max, self.w_max)

    def impulses(self, space: ContactSpace, b: np.ndarray, A_diag: np.ndarray) -> np.ndarray:
        """``(n,)`` impulses ``f`` (limits, then ``(t1, t2, n)`` per contact) from ``b`` and ``diag(A)``.

        ``b``: ``(n,)`` eq. 15b per row (normal rows with ``φ/h``, tangent rows without).
        """
        f = np.zeros(space.n)
        if not space.n:
            return f
        nrm = space.normal_rows()
        a = self.activation(space.distance)
        lam = a * smax(-self.eta * b[nrm], self.beta) / A_diag[nrm]
        f[nrm] = lam
        nc = space.n_contacts
        if nc:
            tan = space.tangent_rows()
            nu_bar = -b[tan] / A_diag[tan]                      # (nc, 2)
            c = self.friction_scale * space.friction * lam[space.n_limits:]
            r = np.hypot(nu_bar[:, 0], nu_bar[:, 1])
            p = self.friction_sharpness
            with np.errstate(divide="ignore", invalid="ignore"):
                if p == 2.0:
                    den = np.hypot(c, r)
                else:
                    big = np.maximum(c, r)
                    den = big * ((c / big) ** p + (r / big) ** p) ** (1.0 / p)
                g = np.where(den > 0, c / den, 0.0)
            f[tan] = nu_bar * g[:, None]
        return f


# --------------------------------------------------------------------------- dynamics


class SmoothImpulse(NamedTuple):
    """Contact impulses of one step.

    Attributes:
      f: ``(n,)`` impulse [N·s; N·m·s for hinge limits]: limits, then ``(t1, t2, n)`` per contact.
      space: the :class:`ContactSpace` at the start state (``J``, distances, frames, ...).
      b: ``(n,)`` eq. 15b per row [m/s]; A_diag: ``(n,)`` diagonal of ``J M⁻¹ Jᵀ``.
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


class SmoothContactDynamics:
    """Semi-implicit Euler with the paper's smooth diagonal contact model.

    Args:
      model: the ``MjModel``; its ``opt.timestep`` is h.  MuJoCo's smooth dynamics
        (``M``, ``qfrc_smooth``) are evaluated on a private copy with the constraint
        solver disabled (edits of ``model`` after construction other than the
        collision fields :func:`contact_space` re-syncs are not seen).  The user's
        ``opt.disableflags`` (contact/limit/constraint) still select which rows exist.
      contact_model: :class:`SmoothContactModel` (defaults if None).
      implicit_damping: ``M + h·diag(dof_damping)`` as in MuJoCo's Euler integrator.

    Not thread-safe (one scratch ``MjData``).  Activations (``na > 0``) are
    integrated by explicit Euler in :meth:`step_data`; :meth:`step` takes none.
    """

    def __init__(self, model: mujoco.MjModel, contact_model: SmoothContactModel | None = None, *,
                 implicit_damping: bool = True):
        self.model = check_instance("model", model, mujoco.MjModel)
        self.contact_model = check_instance("contact_model", contact_model, SmoothContactModel, SmoothContactModel)
        self._smooth = UnconstrainedDynamics(model, implicit_damping=implicit_damping)
        self.timestep = self._smooth.timestep

    def _load(self, qpos, qvel, ctrl, qfrc_applied=None, xfrc_applied=None, act=None,
              mocap_pos=None, mocap_quat=None):
        self._smooth.load(qpos, qvel, ctrl=ctrl, qfrc_applied=qfrc_applied, xfrc_applied=xfrc_applied,
                          act=act, mocap_pos=mocap_pos, mocap_quat=mocap_quat)

    def _advance(self) -> SmoothStep:
        """One step from the state loaded in the scratch data."""
        m, d, h = self._smooth.smooth_model, self._smooth.data, self.timestep
        _, factor = self._smooth.evaluate()
        v_free = d.qvel + h * scipy.linalg.cho_solve(factor, d.qfrc_smooth, check_finite=False)
        space = contact_space(self.model, d, self.contact_model.w_max)
        if space.n:
            J = space.J
            Minv_JT = scipy.linalg.cho_solve(factor, J.T, check_finite=False)
            A_diag = np.einsum("ij,ji->i", J, Minv_JT)
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

    def step_data(self, data: mujoco.MjData) -> SmoothImpulse:
        """Advance ``data`` in place by one step (``qpos``, ``qvel``, ``act``, ``time``).

        Reads ``qpos, qvel, ctrl, qfrc_applied, xfrc_applied, act`` and mocap poses.
        Derived quantities of ``data`` are not updated.  Returns the impulse.
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
        return res.impulse

    def rollout(self, qpos0, qvel0, ctrls) -> SmoothRollout:
        """Roll out ``T`` steps from ``(qpos0, qvel0)`` under ``ctrls``.

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
