"""Shared cost terms (:mod:`contactopt.costs`) as goal-directed acceleration features.

Goal-directed dynamics minimizes a cost over the acceleration ``a`` at the current state.
A residual ``r(q, v)`` of the shared cost language becomes the paper's *feature-based*
term: the residual should evolve like a critically damped spring, so its acceleration
``r̈`` (position-level residuals) or its rate ``ṙ`` (velocity-level residuals) is asked to
follow a PD law, and the term is the weighted squared miss::

    position level (∂r/∂v = 0):  ℓ(a) = (w/2) ‖J_q a + J̇_q v + k_p r + k_d J_q v‖²
    velocity level (∂r/∂v ≠ 0):  ℓ(a) = (w/2) ‖J_v a + J_q v + k_v r‖²

for the quadratic norm, with ``J_q = ∂r/∂q`` (tangent space), ``J_v = ∂r/∂v`` and
``J̇_q v = d²r(q ⊕ s v)/ds²`` (a central second difference along the velocity).  Gains: ``k_p = ω²``, ``k_d = 2ω`` (critical
damping), ``k_v = ω``, with ``ω`` [1/s] the planner's ``bandwidth``.

A non-quadratic norm ``n`` (smooth-abs, cosh, L2, one-sided) enters in its Gauss-Newton form,
as in the other planners: its least-squares residual ``ρ(r)`` (``½‖ρ‖² = n(r)``,
:meth:`~contactopt.costs.Norm.least_squares`) with ``P = ∂ρ/∂r`` at the current state is the
quantity that follows the PD law, its derivatives taken through ``P`` (``ρ̇ = P ṙ``,
``ρ̈ ≈ P r̈``)::

    position level:  ℓ(a) = (w/2) ‖P (J_q a + J̇_q v) + k_p ρ + k_d P J_q v‖²
    velocity level:  ℓ(a) = (w/2) ‖P (J_v a + J_q v) + k_v ρ‖²

For :class:`~contactopt.costs.Quadratic` ``ρ = r``, ``P = I`` (the plain feature); a one-sided
bound on its allowed side has ``ρ = 0``, ``P = 0`` and asks nothing; a smooth-abs term far from
its target pulls with a bounded ``ρ`` (``|ρ| ≈ √(2|r|)``) instead of one that grows with ``r``.

A :class:`~contactopt.costs.Control` residual ``u − u*`` is exact at the acceleration level:
the controls are affine in the inverse dynamics ``g(a) = M a + c − Jᵀ f(a)``, ``u = G⁺ g``,
so its rows are ``G⁺M a − G⁺Jᵀ f(a) + G⁺c − u*`` (:class:`ControlFeature`); with a non-quadratic
norm, ``ρ`` is linearized at the control last applied (``data.ctrl``):
``ρ(r) ≈ ρ(r₀) + P (r − r₀)``.  A user residual
that reads the control cannot be written over accelerations: :func:`acceleration_terms`
refuses it, before any run starts.

A zero-horizon planner only descends its cost; it cannot build momentum first.
:func:`quasi_static_path_check` refuses a task whose configuration target cannot be reached
that way: somewhere on the way to it the robot cannot even *hold* still within its
actuators' force range (a torque-limited pendulum or an acrobot swinging up).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from ...costs import Control, CostTerm, Qpos, Quadratic
from ...errors import ParameterError
from ...model import actuation_map
from .costs import AccelerationTerm
from .problem import GDDProblem

__all__ = ["ControlFeature", "ResidualFeature", "acceleration_terms"]


class ResidualFeature(AccelerationTerm):
    """A shared :class:`~contactopt.costs.CostTerm` ``w·n(r(q, v))`` as an acceleration feature.

    Args:
      term: the shared term (any norm with a least-squares form; its residual must not read
        the control).
      bandwidth: ``ω`` [1/s] of the PD law (module docstring).
      step: second-difference step [s] along the velocity for ``J̇_q v``.
    """

    kind = "rows"

    def __init__(self, term: CostTerm, *, bandwidth: float, step: float = 1e-4):
        res = term.residual
        if res.uses_control:
            raise ParameterError(f"cost term {term.name}: a residual of the control has no acceleration feature")
        _check_least_squares(term)
        self.term = term
        self.residual = res
        self.rows = res.size
        self.omega = float(bandwidth)
        self.step = float(step)
        self._data = mujoco.MjData(res.model)
        self._q = np.empty(res.model.nq)
        super().__init__(term.weight, name=term.name)
        self.model = term.residual.model

    def _eval(self, qpos, qvel, jacobian):
        m, d = self.residual.model, self._data
        d.qpos[:] = qpos
        d.qvel[:] = qvel
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        x = np.concatenate([qpos, qvel, d.act])
        return self.residual.evaluate(d, x, None, jacobian)

    def fill(self, problem: GDDProblem, out) -> None:
        m = self.residual.model
        nv = m.nv
        q0 = problem.data.qpos.copy()
        v = np.asarray(problem.qvel, dtype=float).copy()
        r, jx, _ = self._eval(q0, v, True)
        Jq = np.zeros((self.rows, nv)) if jx is None else jx[:, :nv]
        Jv = np.zeros((self.rows, nv)) if jx is None else jx[:, nv:2 * nv]
        w = self.omega
        rho, P = _gauss_newton_norm(self.term.norm, r)
        if np.any(Jv):
            out.Ka[:] = Jv if P is None else P @ Jv
            out.e[:] = (Jq @ v if P is None else P @ (Jq @ v)) + w * rho
            return
        # J̇_q v = d²/ds² r(q ⊕ s v) at s = 0, central second difference
        s = self.step
        qp, qm = q0.copy(), q0.copy()
        mujoco.mj_integratePos(m, qp, v, s)
        mujoco.mj_integratePos(m, qm, v, -s)
        rp = self._eval(qp, v, False)[0]
        rm = self._eval(qm, v, False)[0]
        jdot_v = (rp - 2.0 * r + rm) / (s * s)
        if P is None:
            out.Ka[:] = Jq
            out.e[:] = jdot_v + w * w * r + 2.0 * w * (Jq @ v)
        else:
            out.Ka[:] = P @ Jq
            out.e[:] = P @ (jdot_v + 2.0 * w * (Jq @ v)) + w * w * rho


class ControlFeature(AccelerationTerm):
    """``w·n(u(a) − u*)`` of a shared :class:`~contactopt.costs.Control` term, with the controls
    ``u(a) = G⁺ g(a) = G⁺(M a + c − Jᵀ f(a))`` of the goal-directed inverse dynamics; a
    non-quadratic norm is linearized at the control last applied (module docstring)."""

    kind = "force_rows"

    def __init__(self, term: CostTerm):
        res = term.residual
        if not isinstance(res, Control):
            raise ParameterError(f"cost term {term.name}: ControlFeature needs a Control term")
        _check_least_squares(term)
        self.term = term
        self.rows = res.size
        self._P = np.linalg.pinv(actuation_map(res.model).control_gain)[res.actuators]  # (k, nv)
        super().__init__(term.weight, name=term.name)
        self.model = term.residual.model

    def fill(self, problem: GDDProblem, out) -> None:
        P = self._P
        norm = self.term.norm
        target = self.term.residual.current_target()  # the fixed target, or the scheduled one of now
        if type(norm) is not Quadratic:  # ρ(r) ≈ ρ(r₀) + D (r − r₀) at the last applied control
            r0 = problem.data.ctrl[self.term.residual.actuators] - target
            rho0, D = _gauss_newton_norm(norm, r0)
            P = D @ P
            offset = rho0 - D @ r0 - D @ target
        else:
            offset = -target
        out.Ka[:] = P @ problem.M
        if problem.nefc:
            out.Kf[:] = -(P @ problem.J.T)
        out.e[:] = P @ problem.c + offset


def _check_least_squares(term: CostTerm) -> None:
    """Refuse (before any run) a term whose norm has no least-squares form."""
    if type(term.norm) is Quadratic:
        return
    try:
        term.norm.least_squares(np.zeros(max(term.residual.size, 1)))
    except ParameterError as exc:
        raise ParameterError(f"cost term {term.name}: goal-directed dynamics needs the norm's "
                             f"Gauss-Newton form: {exc}") from None


def _gauss_newton_norm(norm, r):
    """``(ρ, P)`` of ``norm`` at ``r`` (module docstring); ``(r, None)`` for the quadratic norm."""
    if type(norm) is Quadratic:
        return r, None
    rho, P = norm.least_squares(r)
    return np.asarray(rho, dtype=float), np.asarray(P, dtype=float)


def acceleration_terms(terms, *, bandwidth: float) -> list:
    """The goal-directed terms of shared cost ``terms`` (module docstring).

    A term whose residual is already over accelerations (goal-directed dynamics' own
    :class:`~contactopt.solvers.gdd.AccelerationTerm`: end effector, damping, centre of mass or
    pressure, contact force, posture) is taken as it is, with its ``cost_weight`` set to the
    :class:`~contactopt.costs.CostTerm`'s weight.

    Raises:
      ParameterError: a term that has no acceleration form (names it and says why).
    """
    if not math.isfinite(bandwidth) or bandwidth <= 0:
        raise ParameterError(f"bandwidth must be a positive number of 1/s, got {bandwidth!r}")
    out = []
    for t in terms:
        if isinstance(t.residual, AccelerationTerm):
            # goal-directed dynamics' own term: already over accelerations
            t.residual.cost_weight = t.weight
            out.append(t.residual)
        elif isinstance(t.residual, Control):
            out.append(ControlFeature(t))
        else:
            out.append(ResidualFeature(t, bandwidth=bandwidth))
    return out


def quasi_static_path_check(model: mujoco.MjModel, q0, terms, *, points: int = 21) -> str | None:
    """Why a zero-horizon planner cannot reach the configuration targets of ``terms``, or None.

    For every :class:`~contactopt.costs.Qpos` term, the path ``q(s) = q0 ⊕ s (q* ⊖ q0)`` over its
    dofs (``s ∈ [0, 1]``, ``points`` samples; hinge errors wrapped as the term wraps them) is held
    at rest: ``τ(s) = mj_inverse(q(s), v = 0, a = 0)``, the generalized force that holds it
    (gravity, springs and the soft contacts at that pose included).  The path is refused when
    the actuators cannot give ``τ``: an actuator force ``B⁺τ`` beyond its force range, or — on a
    model without a free joint, where nothing else can push — a force on an unactuated
    direction (``Zᵀτ ≠ 0``).  Models with a floating base — a free joint, or an unactuated slide
    joint as planar robots have — are checked on their actuators only (contact can carry them).

    Returns:
      a one-sentence reason, or None when every path can be held.
    """
    from ...model import actuation_map, actuator_force_ranges

    amap = actuation_map(model, q0)
    B_pinv = np.linalg.pinv(amap.B) if amap.B.shape[1] else np.zeros((0, model.nv))
    lo, hi = actuator_force_ranges(model)
    # a floating base: a free joint, or (planar robots: hopper, walker) an unactuated slide joint;
    # the ground can carry its weight, so only the actuators are checked
    Z = amap.unactuated_basis
    slides = [int(model.jnt_dofadr[j]) for j in range(model.njnt)
              if model.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_SLIDE)]
    floating = bool(np.any(model.jnt_type == int(mujoco.mjtJoint.mjJNT_FREE))
                    or (Z.shape[1] and slides and np.abs(Z[slides]).max() > 1e-9))
    d = mujoco.MjData(model)
    for t in terms:
        res = t.residual
        if not isinstance(res, Qpos) or t.weight == 0.0:
            continue
        x = np.concatenate([q0, np.zeros(model.nv + model.na)])
        err = np.zeros(model.nv)
        err[res.dofs] = -res(x)  # q* ⊖ q0 on the term's dofs (wrapped as the term wraps)
        for s in np.linspace(0.0, 1.0, points):
            d.qpos[:] = q0
            mujoco.mj_integratePos(model, d.qpos, err, s)
            d.qvel[:] = 0.0
            d.qacc[:] = 0.0
            mujoco.mj_inverse(model, d)
            tau = d.qfrc_inverse.copy()
            force = B_pinv @ tau
            scale = max(1.0, float(np.abs(tau).max()))
            over = np.flatnonzero((force > hi + 1e-9 * scale) | (force < lo - 1e-9 * scale))
            if over.size:
                i = int(over[0])
                name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) or f"#{i}"
                return (f"holding still on the way to the {res.name} target (at s = {s:.2f} of the way) "
                        f"needs {force[i]:.3g} from actuator {name}, beyond its range "
                        f"[{lo[i]:.3g}, {hi[i]:.3g}]")
            if not floating and amap.unactuated_basis.shape[1]:
                z = amap.unactuated_basis.T @ tau
                if np.abs(z).max() > 1e-6 * scale:
                    return (f"holding still on the way to the {res.name} target (at s = {s:.2f} of the "
                            f"way) needs {np.abs(z).max():.3g} on an unactuated direction")
    return None
