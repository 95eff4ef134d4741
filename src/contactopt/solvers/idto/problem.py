"""The IDTO trajectory-optimization problem: residuals and their block-banded Jacobian.

Decision variables are the configurations ``q_1 … q_T`` (``q_0 = q_init`` and
``v_0 = v_init`` are fixed).  With time step ``h``:

* ``v_t = (q_t ⊖ q_{t−1}) / h`` for ``t ≥ 1`` (MuJoCo's ``mj_differentiatePos``:
  exact for quaternions of free/ball joints), ``v_0 = v_init``;
* ``a_t = (v_{t+1} − v_t) / h`` for ``t = 0 … T−1``;
* implicit inverse dynamics, every term at the *next* state::

      τ_t = M(q_{t+1}) a_t + c(q_{t+1}, v_{t+1}) − F_passive(q_{t+1}, v_{t+1})
            − F_contact(q_{t+1}, v_{t+1}),

  with ``c`` MuJoCo's bias (Coriolis, centrifugal, gravity), ``F_passive``
  its passive forces (joint damping, springs) and ``F_contact`` the compliant
  contact force of :class:`~contactopt.contact.compliant.CompliantContactModel`.

Cost (no ½; diagonal weights on tangent-space errors ``q̃_t = q_t ⊖ q_nom,t``, wrapped into
``(−π, π]`` on the hinge dofs ``wrap_dofs``, and ``ṽ_t = v_t − v_nom,t``)::

    L = h Σ_{t<T} [q̃_tᵀQ_q q̃_t + ṽ_tᵀQ_v ṽ_t + τ_tᵀ R τ_t + w_u ‖Zᵀ τ_t‖²]
        + q̃_Tᵀ Q_f,q q̃_T + ṽ_Tᵀ Q_f,v ṽ_T

where ``Z`` spans the unactuated directions (``actuation_map``) and ``w_u`` is
the quadratic penalty on unactuated forces.  It is written ``L = ½‖r(q)‖²`` with
the residual ``r`` of :meth:`IDTOProblem.residuals`.

Optional soft actuator limits (``actuator_limit_weight = w_lim > 0``, off by default) add

    h w_lim Σ_{t<T} Σ_i [max(u_t,i − hi_i, 0)² + max(lo_i − u_t,i, 0)²]

with ``u_t = B⁺ τ_t`` the actuator forces that produce the actuated part of ``τ_t``
(``B`` the actuation map, ``τ = B u``) and ``[lo_i, hi_i]`` actuator ``i``'s force range:
``actuator_forcerange`` where force-limited, else ``gain · actuator_ctrlrange`` for a
ctrl-limited actuator whose force is ``gain · ctrl`` (fixed gain, no bias, no activation
dynamics); other actuators get no limit rows.  The one-sided quadratic is C¹; its residual
rows ``√(2h w_lim)·(max(u − hi, 0) − max(lo − u, 0))`` have the Jacobian
``√(2h w_lim)·1[u ∉ [lo, hi]]·B⁺ ∂τ/∂q``.

Optional soft joint limits (``joint_limit_weight = w_jnt > 0``, off by default) add, for every
limited hinge and slide joint ``j`` (``jnt_limited``, range ``[lo_j, hi_j]`` = ``jnt_range``
[rad or m]),

    h w_jnt Σ_{t=1…T} Σ_j [max(q_t,j − hi_j, 0)² + max(lo_j − q_t,j, 0)²]

(``q_0`` is fixed and not penalized).  The rows of ``q_{t+1}`` go in step ``t``'s τ block:
``√(2h w_jnt)·(max(q − hi, 0) − max(lo − q, 0))``, Jacobian ``√(2h w_jnt)·1[q ∉ [lo, hi]]``
on the joint's dof in the ``q_{t+1}`` slot.  The plant enforces the range with a constraint the
planner's inverse dynamics does not have (its rigid-body copy has constraints disabled), so
without these rows plans may drive a joint through its stop.  Limited ball joints are not
penalized.

Inverse-dynamics backends (``backend=``):

* ``"compliant"`` (default): the formula above, rigid-body terms from a
  constraint-free model copy plus :class:`~contactopt.contact.compliant.CompliantContactModel`;
* ``"mujoco"``: MuJoCo's analytic inverse dynamics with its own soft contacts,
  ``mj_inverse`` with ``mjENBL_INVDISCRETE`` on a copy whose integrator is
  Euler with time step ``h``: ``τ_t = qfrc_inverse(q_t, v_t, a_t)``, the
  generalized force that makes one ``mj_step`` go from ``(q_t, v_t)`` to
  ``(q_{t+1}, v_{t+1})`` (semi-implicit Euler, implicit joint damping);
* ``"convex"``: the convex invertible contact model,
  ``τ_t = ConvexDynamics(copy with timestep h).inverse(q_t, v_t, v_{t+1}).qfrc``,
  the force that makes ``ConvexDynamics.forward`` go from ``(q_t, v_t)`` to
  ``v_{t+1}`` (and ``q_{t+1} = q_t ⊕ h v_{t+1}``).

The last two evaluate the dynamics at the *current* state ``(q_t, v_t)``
(explicit-in-position time stepping, as the simulators that they invert) rather
than at ``(q_{t+1}, v_{t+1})``; the stencil ``q_{t−1}, q_t, q_{t+1}`` is the same.

Each ``τ_t`` depends on ``q_{t−1}, q_t, q_{t+1}``, so the Gauss–Newton Hessian
``JᵀJ`` is block-pentadiagonal with ``nv × nv`` blocks.  Derivatives are taken
with respect to tangent-space perturbations ``q_t ⊕ δ`` (``δ ∈ R^nv``).

Evaluation (compliant backend), vectorized over the time steps: the rigid-body terms are
one ``mj_inverse`` per step on the constraint-free copy; the contact forces of all steps
come from one :class:`~contactopt.contact.compliant_batch.CompliantContactBatch` call (a lean loop of MuJoCo
collision calls, then the force law for all contacts at once).  The Jacobian uses the chain
rule of :meth:`IDTOProblem._tau_jac_compliant` with ``∂ρ/∂(q', v')`` from ``mjd_inverseFD``
(one C call per step), ``∂ρ/∂a = M``, the exact ``∂F/∂v``, ``∂F/∂q`` by batched forward
differences (``contact_derivatives="fd"``, only the dofs that move a body in contact), in
closed form (``"analytic"``) or closed form where exact and differences elsewhere
(``"auto"``, the default), and the exact difference Jacobians
``∂v/∂q`` (``±I/h``; ``mjd_subQuat`` for quaternions).  ``workers > 1`` splits the steps
over threads (MuJoCo releases the GIL).
"""

from __future__ import annotations

import copy
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np

from ... import native
from ...contact.compliant import CompliantContactModel
from ...contact.compliant_batch import CompliantContactBatch
from ...errors import ParameterError, as_array, check_positive
from ...model import actuation_map, actuator_force_ranges
from .evaluation import _EvaluationMixin
from .knot_cost import KnotCost
from .linearize import _LinearizationMixin
from .trajectory import Linearization, Trajectory

__all__ = ["IDTOProblem", "Trajectory", "Linearization"]

#: run the per-step MuJoCo loops of the rigid-body terms (``mj_inverse``, ``mj_fullM``,
#: ``mjd_inverseFD``), of the velocities (``mj_differentiatePos``) and of the retraction as compiled loops (numba kernels calling the C
#: functions of the bindings' ``libmujoco``, without the GIL; see :mod:`contactopt.native`)
#: where available.  False: the Python loops (the reference; the same results bit for bit).
NATIVE_STEPS = True


def _native() -> bool:
    return NATIVE_STEPS and native.NATIVE


def _weights(name, value, nv, *, allow_zero=True) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(nv, float(arr))
    arr = as_array(name, arr, (nv,))
    if np.any(arr < 0):
        raise ParameterError(f"{name}: weights must be non-negative, got {arr}")
    return arr


class IDTOProblem(_EvaluationMixin, _LinearizationMixin):
    """Inverse-dynamics trajectory optimization problem (selectable inverse-dynamics backend).

    Args:
      model: ``MjModel`` (not modified; a private copy with constraints
        disabled evaluates the rigid-body terms).
      num_steps: ``T ≥ 1``.
      time_step: ``h`` [s], > 0.
      q_init: ``(nq,)`` fixed ``q_0``; v_init: ``(nv,)`` fixed ``v_0`` (default 0).
      q_nom: nominal configurations ``(T+1, nq)`` or one ``(nq,)`` for all steps
        (default ``q_init``).
      v_nom: nominal velocities ``(T+1, nv)`` or ``(nv,)`` (default 0).
      Qq, Qv, R: running weights (scalar or ``(nv,)`` diagonal, ≥ 0).
      Qf_q, Qf_v: terminal weights (scalar or ``(nv,)``, ≥ 0).
      unactuated_penalty: ``w_u ≥ 0`` on ``‖Zᵀτ_t‖²`` (default 1e3·max(R, 1)).
      contact: a :class:`CompliantContactModel` of ``model`` or None (no contact forces).
      workers: threads for the Jacobian (time steps in parallel); 1 = serial.
      backend: inverse dynamics, ``"compliant"`` (default), ``"mujoco"`` or
        ``"convex"`` (module docstring).  ``contact`` must be None for the latter two.
      convex_contact: :class:`~contactopt.contact.ConvexContactModel` for the
        ``"convex"`` backend (default parameters if None).
      penalize_unactuated: include the ``w_u ‖Zᵀτ‖²`` rows in the residual
        (False: cost without them, for the equality-constrained solver).
      chain_rule: compliant backend only — build ∂τ_t/∂q by the chain rule through
        ``v_t, v_{t+1}`` with the exact ``∂F_contact/∂v`` (batched, see the module docstring and
        :meth:`_tau_jac_compliant`) instead of forward differences of the whole inverse
        dynamics in ``q_t`` and ``q_{t+1}`` per step (``2 nv + 1`` evaluations, slow).  Same
        derivatives up to finite-difference error.
      contact_derivatives: compliant backend, how ``∂F_contact/∂q`` is computed:
        ``"auto"`` (default): the closed form of :class:`~contactopt.contact.compliant_batch.CompliantContactBatch`
        where it is exact (every contact of the step between spheres, capsules, planes, boxes in
        supported configurations, or with a negligible force), forward differences at the other
        steps — exact everywhere, no extra contact queries for such models; ``"fd"``: forward differences
        at every step with a pair in range (one batched contact query per perturbed dof);
        ``"analytic"``: the closed form everywhere (for other geometry only its signed-distance
        term, a Gauss–Newton-style approximation; see :mod:`contactopt.contact.compliant_batch`).
      actuator_limit_weight: ``w_lim ≥ 0`` of the soft actuator-force limits (module
        docstring); 0 (default) adds no rows, the problem is then exactly the one without limits.
      actuator_limit_margin: fraction in ``[0, 1)`` by which each force range shrinks about its
        centre before it enters the cost (``[lo, hi] → c ± (1 − margin)(hi − lo)/2``), so that
        plans keep some authority in reserve for feedback (default 0).
      wrap_dofs: hinge dofs whose position error ``q̃ = q − q_nom`` is wrapped into ``(−π, π]``
        (the shortest angular difference: ``θ`` and ``θ + 2π`` are one configuration of a hinge
        without range; :class:`~contactopt.costs.Qpos`'s ``wrap``).  The Jacobian is unchanged
        (the wrap has slope 1 wherever it is smooth).  Default none.
      joint_limit_weight: ``w_jnt ≥ 0`` of the soft joint limits of the limited hinge and slide
        joints (module docstring); 0 (default) adds no rows.
      cost: optional :class:`~contactopt.costs.TrajectoryCost` on ``model`` at time step ``h``:
        the shared cost language evaluated at the knots, added to the diagonal tracking
        terms as extra rows of each step's τ block (:mod:`~contactopt.solvers.idto.knot_cost`).

    Raises:
      ShapeError / NonFiniteError: bad array shapes or values.
      ParameterError: non-positive time step or steps, negative weights, a
        contact model of another model.
      ModelError: the model would make the compiled loops hit a MuJoCo fatal error (which ends
        the process): an integrator ``mjd_inverseFD`` rejects (RK4, compliant and convex
        backends: plan on :func:`contactopt.model.planner_model_copy`) or a ``<size memory>`` too
        small for the position pass (collisions) / ``mj_inverse`` / ``mjd_inverseFD`` at ``qpos0``,
        the keyframes or ``q_init`` (:func:`contactopt.native.check_compiled_loops`, run here);
        a horizon whose solve would not fit in memory (:func:`contactopt.native.check_horizon_memory`).
    """

    def __init__(self, model: mujoco.MjModel, num_steps: int, time_step: float, q_init, v_init=None, *,
                 q_nom=None, v_nom=None, Qq=0.0, Qv=0.0, R=1e-3, Qf_q=0.0, Qf_v=0.0,
                 unactuated_penalty: float | None = None, contact: CompliantContactModel | None = None,
                 workers: int = 1, backend: str = "compliant", convex_contact=None,
                 penalize_unactuated: bool = True, chain_rule: bool = True,
                 contact_derivatives: str = "auto", actuator_limit_weight: float = 0.0,
                 actuator_limit_margin: float = 0.0, cost=None, joint_limit_weight: float = 0.0,
                 wrap_dofs=None):
        if not isinstance(model, mujoco.MjModel):
            raise ParameterError(f"IDTOProblem: model must be a mujoco.MjModel, got {type(model).__name__}")
        # the constructor's arguments, for :meth:`with_backend`
        self._init_args = dict(
            model=model, num_steps=num_steps, time_step=time_step, q_init=q_init, v_init=v_init, q_nom=q_nom,
            v_nom=v_nom, Qq=Qq, Qv=Qv, R=R, Qf_q=Qf_q, Qf_v=Qf_v, unactuated_penalty=unactuated_penalty,
            contact=contact, workers=workers, backend=backend, convex_contact=convex_contact,
            penalize_unactuated=penalize_unactuated, chain_rule=chain_rule,
            contact_derivatives=contact_derivatives, actuator_limit_weight=actuator_limit_weight,
            actuator_limit_margin=actuator_limit_margin, cost=cost, joint_limit_weight=joint_limit_weight,
            wrap_dofs=wrap_dofs)
        if isinstance(num_steps, (bool, np.bool_)) or int(num_steps) != num_steps or num_steps < 1:
            raise ParameterError(f"num_steps must be a positive integer, got {num_steps!r}")
        # the position pass (kinematics, collision: the actuation map here, the contact pass of the
        # compiled loops) at qpos0, the keyframes and q_init, probed once through the bindings
        native.check_compiled_loops(model, ("position",), what="IDTOProblem", qpos=[q_init])
        self.model = model
        self.T = int(num_steps)
        self.h = check_positive("time_step", time_step)
        nq, nv = model.nq, model.nv
        self.nq, self.nv = nq, nv
        self.Qq = _weights("Qq", Qq, nv)
        self.Qv = _weights("Qv", Qv, nv)
        self.R = _weights("R", R, nv)
        self.Qf_q = _weights("Qf_q", Qf_q, nv)
        self.Qf_v = _weights("Qf_v", Qf_v, nv)
        amap = actuation_map(model, q_init)
        self.actuation = amap
        self.Z = amap.unactuated_basis  # (nv, nz)
        if unactuated_penalty is None:
            unactuated_penalty = 1e3 * max(float(self.R.max(initial=0.0)), 1.0)
        try:
            wu = float(unactuated_penalty)
        except (TypeError, ValueError):
            raise ParameterError(f"unactuated_penalty must be a number, got {unactuated_penalty!r}") from None
        if not (math.isfinite(wu) and wu >= 0):
            raise ParameterError(f"unactuated_penalty must be non-negative and finite, got {unactuated_penalty!r}")
        self.unactuated_penalty = wu
        if contact is not None:
            if not isinstance(contact, CompliantContactModel):
                raise ParameterError(f"contact must be a CompliantContactModel or None, got {type(contact).__name__}")
            if contact.model is not model:
                raise ParameterError("contact: the CompliantContactModel was built for a different MjModel")
        self.contact = contact
        if backend not in ("compliant", "mujoco", "convex"):
            raise ParameterError(f"backend must be 'compliant', 'mujoco' or 'convex', got {backend!r}")
        if backend != "compliant" and contact is not None:
            raise ParameterError(f"contact: the {backend!r} backend has its own contact model; pass contact=None")
        self.backend = backend
        self.analytic_chain_rule = bool(chain_rule)
        if contact_derivatives not in ("auto", "fd", "analytic"):
            raise ParameterError(
                f"contact_derivatives must be 'auto', 'fd' or 'analytic', got {contact_derivatives!r}")
        self.contact_derivatives = contact_derivatives
        self._cbatch = CompliantContactBatch(contact) if contact is not None else None
        if isinstance(workers, (bool, np.bool_)) or int(workers) != workers or workers < 1:
            raise ParameterError(f"workers must be a positive integer, got {workers!r}")
        self.workers = int(workers)
        self._pool = ThreadPoolExecutor(self.workers) if self.workers > 1 else None

        # Private copy for rigid-body terms: no constraints, so qfrc_constraint never enters.
        self._m = copy.deepcopy(model)
        self._m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
        # mj_inverse of the rigid-body terms must be the continuous-time M a + c − F_passive
        self._m.opt.enableflags &= ~int(mujoco.mjtEnableBit.mjENBL_INVDISCRETE)
        self._local = threading.local()
        self._convex_contact = convex_contact
        if backend == "mujoco":
            # Full model (MuJoCo soft constraints on), semi-implicit Euler with step h, discrete inverse.
            self._m = copy.deepcopy(model)
            self._m.opt.timestep = self.h
            self._m.opt.integrator = int(mujoco.mjtIntegrator.mjINT_EULER)
            self._m.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_INVDISCRETE)
        elif backend == "convex":
            from ...contact import ConvexContactModel
            if convex_contact is not None and not isinstance(convex_contact, ConvexContactModel):
                raise ParameterError(
                    f"convex_contact must be a ConvexContactModel or None, got {type(convex_contact).__name__}")
            self._convex_contact = ConvexContactModel() if convex_contact is None else convex_contact
            self._mh = copy.deepcopy(model)
            self._mh.opt.timestep = self.h
        # what the compiled loops call: the rigid-body terms and their derivatives on the private
        # copy (the position pass of the model, as the contact pass, is probed above)
        native.check_compiled_loops(self._m, ("inverse", "inverse_fd"), what="IDTOProblem", qpos=[q_init])

        # Per-dof magnitude source for finite-difference steps (−1: rotational dof of a quaternion joint).
        self._dof_qadr = np.full(nv, -1, dtype=np.intp)
        self._quat_joints = []  # (qpos address of the quaternion, first rotational dof)
        for j in range(model.njnt):
            jt, qa, da = int(model.jnt_type[j]), int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j])
            if jt in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
                self._dof_qadr[da] = qa
            elif jt == int(mujoco.mjtJoint.mjJNT_FREE):
                self._dof_qadr[da:da + 3] = qa + np.arange(3)
                self._quat_joints.append((int(qa) + 3, int(da) + 3))
            else:  # ball
                self._quat_joints.append((int(qa), int(da)))
        # q ⊖ q' is a plain difference when there is no quaternion (qpos and qvel coincide)
        self._euclidean = not self._quat_joints and nq == nv
        # tangent dof i ↔ qpos index (non-quaternion dofs), for vectorized differences
        self._lin_dofs = np.flatnonzero(self._dof_qadr >= 0)

        # Residual scalings: cost = ½‖r‖²
        self._wq = np.sqrt(2 * self.h * self.Qq)
        self._wv = np.sqrt(2 * self.h * self.Qv)
        self._wqf = np.sqrt(2 * self.Qf_q)
        self._wvf = np.sqrt(2 * self.Qf_v)
        W = np.diag(np.sqrt(2 * self.h * self.R))
        self.penalize_unactuated = bool(penalize_unactuated)
        if wu > 0 and self.Z.shape[1] and self.penalize_unactuated:
            W = np.vstack([W, math.sqrt(2 * self.h * wu) * self.Z.T])
        self._Wtau = W  # (mτ0, nv): R rows and unactuated-penalty rows
        self.num_penalty_rows = W.shape[0] - nv
        self._setup_actuator_limits(actuator_limit_weight, actuator_limit_margin)
        self._setup_joint_limits(joint_limit_weight)
        wrap = np.unique(np.asarray([] if wrap_dofs is None else wrap_dofs, dtype=np.intp).ravel())
        if wrap.size and (wrap.min() < 0 or wrap.max() >= nv or np.any(
                model.jnt_type[model.dof_jntid[wrap]] != int(mujoco.mjtJoint.mjJNT_HINGE))):
            raise ParameterError(f"wrap_dofs must be dofs of hinge joints, got {wrap_dofs!r}")
        self.wrap_dofs = wrap
        self.knot_cost = None
        if cost is not None:
            if cost.model is not model:
                raise ParameterError("cost: the TrajectoryCost was built for a different MjModel")
            if not math.isclose(cost.timestep, self.h, rel_tol=1e-12):
                raise ParameterError(f"cost: its time step {cost.timestep} s is not the problem's {self.h} s")
            self.knot_cost = KnotCost(cost, np.linalg.pinv(amap.control_gain), self.T)
        self.num_cost_rows = 0 if self.knot_cost is None else self.knot_cost.num_rows
        self.m_tau = W.shape[0] + self.num_limit_rows + self.num_joint_limit_rows + self.num_cost_rows
        # a solve holds ~17 doubles per step and entry of the (nv + m_tau) × nv Jacobian and
        # Hessian blocks (measured peak, humanoid and quadruped); refuse what cannot fit
        native.check_horizon_memory(
            "IDTOProblem", self.T, 8 * 24 * nv * (nv + self.m_tau),
            fix="shorten the horizon or coarsen the time step (fewer knots), or plan on a smaller model")

        self.set_initial_state(q_init, v_init)
        self.set_nominal(q_nom, v_nom)

    # ------------------------------------------------------------------ setup

    @staticmethod
    def _check_scalar(name, value, *, upper=None) -> float:
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ParameterError(f"{name} must be a number, got {value!r}") from None
        if isinstance(value, (bool, np.bool_)) or not (math.isfinite(x) and x >= 0) or (
                upper is not None and x >= upper):
            bound = "non-negative and finite" if upper is None else f"in [0, {upper:g})"
            raise ParameterError(f"{name} must be {bound}, got {value!r}")
        return x

    @staticmethod
    def actuator_force_ranges(model: mujoco.MjModel):
        """:func:`contactopt.model.actuator_force_ranges` (kept as the problem's own name)."""
        return actuator_force_ranges(model)

    def _setup_actuator_limits(self, weight, margin) -> None:
        """Soft actuator-limit rows: which actuators, their (shrunk) ranges and ``u = B⁺τ``."""
        w = self._check_scalar("actuator_limit_weight", weight)
        mg = self._check_scalar("actuator_limit_margin", margin, upper=1.0)
        self.actuator_limit_weight = w
        self.actuator_limit_margin = mg
        # u = B⁺ τ: actuator forces producing the actuated part of τ (B⁺ Z = 0)
        B = self.actuation.B
        self._force_map = np.linalg.pinv(B) if B.shape[1] else np.zeros((0, self.nv))  # (nu, nv)
        lo, hi = self.actuator_force_ranges(self.model)
        finite = np.isfinite(lo) | np.isfinite(hi)
        both = np.isfinite(lo) & np.isfinite(hi)
        c = np.zeros(lo.shape)
        c[both] = 0.5 * (lo[both] + hi[both])
        self.actuator_force_lower = np.where(np.isfinite(lo), c + (1.0 - mg) * (lo - c), lo)
        self.actuator_force_upper = np.where(np.isfinite(hi), c + (1.0 - mg) * (hi - c), hi)
        idx = np.flatnonzero(finite) if w > 0 else np.zeros(0, dtype=np.intp)
        self._limit_idx = idx
        self._limit_P = self._force_map[idx]  # (nl, nv)
        self._limit_lo = self.actuator_force_lower[idx]
        self._limit_hi = self.actuator_force_upper[idx]
        self._limit_scale = math.sqrt(2 * self.h * w)
        self.num_limit_rows = int(idx.size)

    def _setup_joint_limits(self, weight) -> None:
        """Soft joint-limit rows: the limited hinge and slide joints, their qpos and dof addresses."""
        w = self._check_scalar("joint_limit_weight", weight)
        self.joint_limit_weight = w
        m = self.model
        scalar = np.isin(m.jnt_type, (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)))
        jnt = np.flatnonzero(scalar & (m.jnt_limited != 0)) if w > 0 else np.zeros(0, dtype=np.intp)
        self._jlim_joints = jnt
        self._jlim_qadr = m.jnt_qposadr[jnt].astype(np.intp)
        self._jlim_dof = m.jnt_dofadr[jnt].astype(np.intp)
        self._jlim_lo = m.jnt_range[jnt, 0].astype(float)
        self._jlim_hi = m.jnt_range[jnt, 1].astype(float)
        self._jlim_scale = math.sqrt(2 * self.h * w)
        self.num_joint_limit_rows = int(jnt.size)

    def joint_limit_excess(self, q) -> np.ndarray:
        """``(n, nj)`` signed excess of the limited hinge and slide joints of ``q (n, nq)`` over
        their ranges: ``q − hi`` above, ``q − lo`` below, 0 inside; one column per penalized joint
        (the limited hinge and slide joints in index order; none with ``joint_limit_weight`` 0)."""
        x = np.asarray(q, dtype=float)[:, self._jlim_qadr]
        return np.maximum(x - self._jlim_hi, 0.0) - np.maximum(self._jlim_lo - x, 0.0)

    def _joint_limit_jacobian(self, q) -> np.ndarray:
        """``(T, nj, nv)`` Jacobian of the joint-limit rows of step ``t`` w.r.t. ``q_{t+1}``."""
        x = q[1:, self._jlim_qadr]
        active = (x > self._jlim_hi) | (x < self._jlim_lo)
        J = np.zeros((self.T, self.num_joint_limit_rows, self.nv))
        J[:, np.arange(self.num_joint_limit_rows), self._jlim_dof] = self._jlim_scale * active
        return J

    def actuator_forces(self, tau) -> np.ndarray:
        """Actuator forces ``u_t = B⁺ τ_t`` of ``tau (T, nv)``: ``(T, nu)``."""
        return np.asarray(tau, dtype=float) @ self._force_map.T

    def actuator_limit_excess(self, tau) -> np.ndarray:
        """``(T, nu)`` signed excess of ``u = B⁺τ`` over the (shrunk) force range: ``u − hi`` above,
        ``u − lo`` below, 0 inside."""
        u = self.actuator_forces(tau)
        lo, hi = self.actuator_force_lower, self.actuator_force_upper
        return np.maximum(u - hi, 0.0) - np.maximum(lo - u, 0.0)

    def _limit_residuals(self, tau) -> np.ndarray:
        """``(T, nl)`` actuator-limit rows of ``tau (T, nv)``."""
        u = tau @ self._limit_P.T
        ex = np.maximum(u - self._limit_hi, 0.0) - np.maximum(self._limit_lo - u, 0.0)
        return self._limit_scale * ex

    def _weighted_tau_jacobian(self, tau, dtau) -> np.ndarray:
        """``Jtau (T, 3, mτ, nv)`` from ``dtau (T, 3, nv, nv)``: ``W dtau`` and the limit rows."""
        Jtau = np.matmul(self._Wtau, dtau)
        if not self.num_limit_rows:
            return Jtau
        u = tau @ self._limit_P.T  # (T, nl)
        active = (u > self._limit_hi) | (u < self._limit_lo)
        Jl = np.matmul(self._limit_P, dtau) * (self._limit_scale * active)[:, None, :, None]
        return np.concatenate([Jtau, Jl], axis=2)

    def _tau_block_jacobian(self, tr: "Trajectory", dtau, dvdq_cur, dvdq_back) -> np.ndarray:
        """``Jtau (T, 3, mτ, nv)``: :meth:`_weighted_tau_jacobian`, the joint-limit rows' and the
        knot-cost rows' Jacobians."""
        Jtau = self._weighted_tau_jacobian(tr.tau, dtau)
        if self.num_joint_limit_rows:
            Jj = np.zeros((self.T, 3, self.num_joint_limit_rows, self.nv))
            Jj[:, 2] = self._joint_limit_jacobian(tr.q)
            Jtau = np.concatenate([Jtau, Jj], axis=2)
        if self.knot_cost is None:
            return Jtau
        _, Jc = self.knot_cost.jacobian(tr.q, tr.v, tr.tau, dtau, dvdq_cur, dvdq_back)
        return np.concatenate([Jtau, Jc], axis=2)

    def task_cost(self, tr: "Trajectory") -> float:
        """The shared cost of trajectory ``tr``: the knot cost ``J`` (module
        :mod:`~contactopt.solvers.idto.knot_cost`) plus the diagonal tracking terms, without
        the unactuated penalty, the actuator-limit and the joint-limit rows."""
        r = self._residuals(tr)
        T, nv, mt = self.T, self.nv, self.m_tau
        off = 2 * (T + 1) * nv
        rt = r[off:].reshape(T, mt)
        keep = np.r_[0:nv, mt - self.num_cost_rows:mt]
        return 0.5 * float(r[:off] @ r[:off] + np.sum(rt[:, keep] ** 2))

    def tau_cost_rows(self, constrained: bool = False) -> np.ndarray | slice:
        """Rows of each step's ``mτ`` τ-block that make the cost: all of them, or with
        ``constrained`` (the equality-constrained solver) all but the unactuated-penalty rows
        (the ``R`` rows, the actuator- and joint-limit rows and the knot-cost rows)."""
        nv, npen = self.nv, self.num_penalty_rows
        if not constrained or npen == 0:
            return slice(0, self.m_tau)
        if nv + npen == self.m_tau:
            return slice(0, nv)
        return np.r_[0:nv, nv + npen:self.m_tau]

    def close(self) -> None:
        """Shut down the Jacobian thread pool (``workers > 1``); the problem then runs serially."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def set_initial_state(self, q_init, v_init=None) -> None:
        """Set the fixed ``q_0 (nq,)`` and ``v_0 (nv,)`` (e.g. the measured state in MPC)."""
        q = as_array("q_init", q_init, (self.nq,)).copy()
        mujoco.mj_normalizeQuat(self.model, q)
        self.q_init = q
        self.v_init = np.zeros(self.nv) if v_init is None else as_array("v_init", v_init, (self.nv,)).copy()

    def set_nominal(self, q_nom=None, v_nom=None) -> None:
        """Set the nominal trajectories (``(T+1, nq)``/``(nq,)`` and ``(T+1, nv)``/``(nv,)``).

        May be called between solves (e.g. to re-anchor a target in MPC).
        """
        T, nq, nv = self.T, self.nq, self.nv
        if q_nom is None:
            q_nom = self.q_init
        q_nom = np.asarray(q_nom, dtype=float)
        if q_nom.ndim == 1:
            q_nom = np.broadcast_to(as_array("q_nom", q_nom, (nq,)), (T + 1, nq))
        self.q_nom = as_array("q_nom", q_nom, (T + 1, nq)).copy()
        if v_nom is None:
            v_nom = np.zeros(nv)
        v_nom = np.asarray(v_nom, dtype=float)
        if v_nom.ndim == 1:
            v_nom = np.broadcast_to(as_array("v_nom", v_nom, (nv,)), (T + 1, nv))
        self.v_nom = as_array("v_nom", v_nom, (T + 1, nv)).copy()

    def check_trajectory(self, q, *, name: str = "q_guess", tol: float = 1e-8) -> np.ndarray:
        """Validate a trajectory ``(T+1, nq)`` whose first row equals ``q_init``; returns a normalized copy.

        Raises:
          ShapeError, NonFiniteError: wrong shape or non-finite values.
          ParameterError: ``q[0]`` differs from ``q_init`` (max-abs > ``tol``).
        """
        q = as_array(name, q, (self.T + 1, self.nq)).copy()
        err = float(np.max(np.abs(q[0] - self.q_init)))
        if err > tol:
            raise ParameterError(
                f"{name}[0] must equal q_init (the fixed initial configuration); max difference {err:.3g}"
            )
        q[0] = self.q_init
        if self._quat_joints:
            for t in range(1, self.T + 1):
                mujoco.mj_normalizeQuat(self.model, q[t])
        return q

    @property
    def num_variables(self) -> int:
        """Tangent-space dimension of the decision variables: ``T·nv``."""
        return self.T * self.nv

    @property
    def num_residuals(self) -> int:
        """Length of :meth:`residuals`: ``2 (T+1) nv + T mτ``."""
        return 2 * (self.T + 1) * self.nv + self.T * self.m_tau

    @property
    def convex_contact(self):
        """The :class:`~contactopt.contact.ConvexContactModel` of the ``"convex"`` backend (None otherwise)."""
        return self._convex_contact if self.backend == "convex" else None

    def set_convex_contact(self, contact_model) -> None:
        """Replace the convex backend's contact model (e.g. a new κ in a continuation) between solves.

        Every thread's :class:`~contactopt.contact.ConvexDynamics` picks the new parameters up at its
        next evaluation; the rest of the problem (weights, nominal, initial state) is unchanged.

        Raises:
          ParameterError: the problem's backend is not ``"convex"``, or ``contact_model`` is not a
            :class:`~contactopt.contact.ConvexContactModel`.
        """
        from ...contact import ConvexContactModel
        if self.backend != "convex":
            raise ParameterError(f"set_convex_contact: the problem's backend is {self.backend!r}, not 'convex'")
        if not isinstance(contact_model, ConvexContactModel):
            raise ParameterError(
                f"set_convex_contact: expected a ConvexContactModel, got {type(contact_model).__name__}")
        self._convex_contact = contact_model

    def with_backend(self, backend: str, *, convex_contact=None, workers: int | None = None) -> "IDTOProblem":
        """A new problem with the same arguments, current initial state and nominal, on another backend.

        Args:
          backend: ``"compliant"``, ``"mujoco"`` or ``"convex"``.  The compliant contact model is kept
            only for ``"compliant"`` (the other two bring their own contact).
          convex_contact: the :class:`~contactopt.contact.ConvexContactModel` of ``"convex"`` (default
            parameters if None).
          workers: threads of the new problem (default: this problem's).

        Returns:
          the new :class:`IDTOProblem` (this one is unchanged).
        """
        args = dict(self._init_args)
        if backend != "compliant":
            args["contact"] = None
        args.update(backend=backend, convex_contact=convex_contact if backend == "convex" else None,
                    q_init=self.q_init, v_init=self.v_init, q_nom=self.q_nom, v_nom=self.v_nom)
        if workers is not None:
            args["workers"] = workers
        return IDTOProblem(**args)
