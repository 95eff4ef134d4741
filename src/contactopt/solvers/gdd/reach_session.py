"""The running state of a scripted GDD reaching session: :class:`ReachSession` (model, data,
cost terms, solver and schedule; see :mod:`contactopt.solvers.gdd.sessions`)."""

from __future__ import annotations

import bisect
import math

import mujoco
import numpy as np

from ...costs import CostTerm
from ...errors import ParameterError, as_array
from ...model import load_model, model_name, reset_to_keyframe
from .costs import (
    AccelerationTarget,
    AccelerationTerm,
    CenterOfMassAcceleration,
    Cost,
    Damping,
    EndEffectorAcceleration,
    PostureTarget,
    SpringDamper,
)
from .reach_spec import (
    ReachSpec,
    _actuated_trees,
    _resolve_frame,
    _world_contact_bodies,
    balance_stiffness,
    effort_scale,
    floating_root_dofs,
    limb_joints,
)
from .solver import GDDSettings, GDDSolver

__all__ = ["ReachSession", "reach_initial_state"]


# --------------------------------------------------------------------------- the session


def reach_initial_state(spec: ReachSpec, model: mujoco.MjModel, data: mujoco.MjData, perturb=None) -> None:
    """Put ``data`` in a session's initial state: the spec's keyframe, a free root lowered by
    ``spec.lower_root`` m, then ``spec.grasp`` s of the grasp controls (time reset to 0, at rest);
    forward kinematics computed.

    Args:
      perturb: optional ``perturb(model, data)`` applied after the keyframe and before the grasp
        (the planner-independent form draws a seeded initial pose with it).
    """
    m, d = model, data
    mujoco.mj_resetData(m, d)
    reset_to_keyframe(m, d, spec.keyframe)
    if spec.lower_root > 0:
        for j in range(m.njnt):
            if m.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_FREE) and m.body_parentid[m.jnt_bodyid[j]] == 0:
                d.qpos[m.jnt_qposadr[j] + 2] -= spec.lower_root
                break
    if perturb is not None:
        perturb(m, d)
    if spec.grasp > 0 and spec.grasp_ctrl is not None:
        d.ctrl[:] = as_array("grasp_ctrl", spec.grasp_ctrl, (m.nu,))
        for _ in range(int(round(spec.grasp / m.opt.timestep))):
            mujoco.mj_step(m, d)
        d.ctrl[:] = 0.0
        d.qvel[:] = 0.0
        d.time = 0.0
    # a cold forward solve: d.qacc (the first GDD solve's initial guess) then depends on
    # the state only, so a dataset replay starts from the same guess
    d.qacc_warmstart[:] = 0.0
    mujoco.mj_forward(m, d)


_NO_DOFS = np.zeros(0, dtype=int)


class ReachSession:
    """A goal-directed session being run: model, data, cost terms, solver and schedule.

    Args:
      spec: the :class:`ReachSpec`.
      model: an already loaded model for ``spec.model`` (default: load it).
      extra_terms: additional terms: :class:`~contactopt.costs.CostTerm` s whose residual is an
        :class:`~contactopt.solvers.gdd.costs.AccelerationTerm` (or such terms alone, weight 1).

    Attributes:
      model, data, solver, cost: the simulation (``cost`` the solver's
        :class:`~contactopt.solvers.gdd.Cost` of ``cost_terms``, the session's terms as shared
        :class:`~contactopt.costs.CostTerm` s).
      qref: ``(nq,)`` posture reference (the pose at the last release; with
        ``ReachSpec.posture_release="limb"`` only the released limb's joints, the rest the initial pose).
      goal: ``(3,)`` current dragged goal, m (NaN without an active drag).
      target: ``(3,)`` final position of the active drag's goal, m (NaN without one).
      home: ``{frame: (3,)}`` positions of the goal frames at the start, m (``Drag.anchor="home"``).
      active: index of the active drag in ``spec.drags`` (−1 when none).

    Raises:
      ParameterError: no actuators, unknown frame/body names, bad settings.
    """

    def __init__(self, spec: ReachSpec, model: mujoco.MjModel | None = None, extra_terms=()):
        self.spec = spec
        self.model = model = load_model(spec.model) if model is None else model
        label = model_name(model)
        if model.nu == 0:
            raise ParameterError(f"model {label!r} has no actuators: goal-directed dynamics needs "
                                 "at least one controllable actuator")
        self.frames = {}
        for d in spec.drags:
            self.frames.setdefault(d.frame, _resolve_frame(model, d.frame))
        self.fall_ids = [(b, _body_id(model, b), h) for b, h in spec.fall_heights]
        self.drop_ids = [(b, _body_id(model, b), h) for b, h in spec.drop_heights]
        self.support_ids = [_body_id(model, b) for b in spec.support_bodies]
        self.solver = GDDSolver(model, GDDSettings(**dict(spec.solver)))
        data = self.data = mujoco.MjData(model)
        self.reset()
        # every task weight against GDD's force cost (ReachSpec.effort_scale)
        scale = spec.effort_scale
        self.effort_scale = float(effort_scale(model, data, self.support_ids) if scale is None else scale)
        # posture: PD toward qref (a view of the target's array, written in place)
        self.posture_target = PostureTarget(model, data.qpos, kp=spec.posture_kp)
        self.qref = self.posture_target.qref
        # dofs of trees without actuated dofs (free objects): no posture target.  The
        # unactuated root of an actuated tree (a humanoid's floating base) keeps its PD target:
        # with a zero target there (the mass metric still weighs the root's acceleration) the
        # posture term would resist any correction of the trunk's attitude, which a floating
        # base can only make by accelerating its root (see docs/experiments/gdd-unseen-humanoid.md)
        self._passive_dofs = np.flatnonzero(~_actuated_trees(model)[model.dof_bodyid])
        self._kd = 2.0 * math.sqrt(spec.posture_kp)
        # the floating base's PD is as fast as its balance needs (ReachSpec.posture_root_kp)
        self._root_dofs = floating_root_dofs(model)
        root_kp = spec.posture_root_kp
        if root_kp is None:
            root_kp = max(spec.posture_kp, balance_stiffness(model, data) or 0.0)
        self.root_kp = float(root_kp)
        self._chain = {frame: _chain_dofs(model, kind, i) for frame, (kind, i) in self.frames.items()}
        self._free = _NO_DOFS
        self._gains_free = None
        self._update_posture_gains()
        self.ee_terms = {}
        for frame, (kind, _) in self.frames.items():
            target = SpringDamper(np.zeros(3), stiffness=spec.ee_stiffness,
                                  max_acceleration=spec.ee_max_acceleration)
            term = EndEffectorAcceleration(model, **{kind: frame}, target=target, name=f"goal({frame})")
            term.active = False
            self.ee_terms[frame] = term
        # the session's cost in the shared cost language: goal-directed terms as CostTerm residuals
        terms = [CostTerm(t, weight=self.effort_scale * spec.ee_weight) for t in self.ee_terms.values()]
        self.posture = AccelerationTarget(model, self.posture_target, name="posture")
        terms.append(CostTerm(self.posture, weight=self.effort_scale * spec.posture_weight))
        self.com_anchor = data.subtree_com[0, :2].copy()
        self.com = None
        if spec.com_weight > 0:
            # horizontal spring to the anchor, damping on all three axes
            spring = SpringDamper(np.r_[self.com_anchor, 0.0], stiffness=spec.com_stiffness, axes=(1, 1, 0))
            self.com = CenterOfMassAcceleration(model, target=spring, name="centre of mass")
            terms.append(CostTerm(self.com, weight=self.effort_scale * spec.com_weight))
        self.damping = Damping(1.0, spec.damping_beta)
        terms.append(CostTerm(self.damping, weight=self.effort_scale * spec.damping_alpha))
        for t in extra_terms:
            if not (isinstance(t, AccelerationTerm)
                    or (isinstance(t, CostTerm) and isinstance(t.residual, AccelerationTerm))):
                raise ParameterError(f"extra term is neither an AccelerationTerm nor a CostTerm of one: {t!r}")
            terms.append(t)
        #: the cost as shared CostTerms (what a Task's cost function would return)
        self.cost_terms = terms
        self.cost = Cost(*terms)
        self.active = -1
        self.goal = np.full(3, np.nan)
        self.origin = np.full(3, np.nan)
        self.target = np.full(3, np.nan)
        self._starts = [dr.start for dr in spec.drags]
        self.home = {frame: self.frame_position(frame) for frame in self.frames}
        # qpos addresses of each goal frame's limb (ReachSpec.posture_release == "limb")
        others = [int(model.site_bodyid[i]) if kind == "site" else int(i) for kind, i in self.frames.values()]
        others += [i for i in self.support_ids]
        self._limb_qpos = {}
        for frame, (kind, i) in self.frames.items():
            body = int(model.site_bodyid[i]) if kind == "site" else int(i)
            adr = []
            for j in limb_joints(model, body, others):
                n = {int(mujoco.mjtJoint.mjJNT_BALL): 4, int(mujoco.mjtJoint.mjJNT_FREE): 7}.get(int(model.jnt_type[j]), 1)
                adr.extend(range(int(model.jnt_qposadr[j]), int(model.jnt_qposadr[j]) + n))
            self._limb_qpos[frame] = np.array(sorted(adr), dtype=int)

    def reset(self) -> None:
        """Initial state: keyframe, root lowered, optional grasp; forward kinematics computed
        (:func:`reach_initial_state`)."""
        reach_initial_state(self.spec, self.model, self.data)

    def free_goal_chains(self) -> None:
        """Drop the posture spring (keep its damping) on the chains of every goal frame for good:
        for a cost whose goal terms hold their limbs throughout (the planner-independent form,
        :mod:`contactopt.tasks.gdd_form`), not only while a drag is held."""
        if self._chain:
            self._free = np.unique(np.concatenate(list(self._chain.values())))
            self._update_posture_gains()

    def _update_posture_gains(self) -> None:
        """Posture gains: ``kp (qref ⊖ q) − 2√kp v`` on every dof (``root_kp`` on a floating
        base), damping only on the free chain of the dragged frame, nothing on the dofs of
        unactuated trees (free objects)."""
        if self._gains_free is self._free:
            return
        nv = self.model.nv
        kp = np.full(nv, self.spec.posture_kp)
        kd = np.full(nv, self._kd)
        kp[self._root_dofs] = self.root_kp
        kd[self._root_dofs] = 2.0 * math.sqrt(self.root_kp)
        kp[self._free] = 0.0
        kp[self._passive_dofs] = 0.0
        kd[self._passive_dofs] = 0.0
        self.posture_target.set_gains(kp, kd)
        self._gains_free = self._free

    def _posture_target(self, problem) -> np.ndarray:
        """PD acceleration toward ``qref`` ``(nv,)`` (see :meth:`_update_posture_gains`)."""
        return self.posture_target(problem)

    def frame_position(self, frame: str) -> np.ndarray:
        """World position ``(3,)`` of a goal frame in the current data, m."""
        kind, i = self.frames[frame]
        return (self.data.site_xpos[i] if kind == "site" else self.data.xpos[i]).copy()

    def update_goals(self) -> None:
        """Activate/release drags for the current time and move the active goal.

        On release the end-effector term is switched off and the posture reference is
        set to the current pose (the damping and posture terms hold it) — of the whole model, or
        only of the released limb (``ReachSpec.posture_release``).
        """
        t = self.data.time
        drags = self.spec.drags
        # drags are sorted by start and do not overlap: only the last one started can be active
        # (a bisection, so a long session's many drags cost nothing per step)
        k = bisect.bisect_right(self._starts, t) - 1
        idx = k if k >= 0 and drags[k].active(t) else -1
        if idx != self.active:
            if self.active >= 0:
                released = drags[self.active].frame
                self.ee_terms[released].active = False
                if self.spec.posture_release == "limb":
                    limb = self._limb_qpos[released]
                    self.qref[limb] = self.data.qpos[limb]
                else:
                    self.qref[:] = self.data.qpos
            self._free = _NO_DOFS
            if idx >= 0:
                frame = drags[idx].frame
                self.origin = self.frame_position(frame)
                self.target = drags[idx].final(self.origin, self.home[frame])
                self.ee_terms[frame].active = True
                if self.spec.posture_free_chain:
                    self._free = self._chain[drags[idx].frame]
            self._update_posture_gains()
            if idx < 0:
                self.origin = np.full(3, np.nan)
                self.goal = np.full(3, np.nan)
                self.target = np.full(3, np.nan)
            self.active = idx
        if idx >= 0:
            self.goal = drags[idx].goal_at(t, self.origin, self.home[drags[idx].frame])
            self.ee_terms[drags[idx].frame].target.position[:] = self.goal

    def set_targets(self, active: int, goal, qref) -> None:
        """Set the cost's targets directly (dataset replay): active drag, goal ``(3,)``, ``qref (nq,)``."""
        drags = self.spec.drags
        for term in self.ee_terms.values():
            term.active = False
        self.active = int(active)
        self._free = _NO_DOFS
        if self.active >= 0:
            if self.spec.posture_free_chain:
                self._free = self._chain[drags[self.active].frame]
            term = self.ee_terms[drags[self.active].frame]
            term.active = True
            term.target.position[:] = goal
            self.goal = np.array(goal, dtype=float)
        self.qref[:] = qref
        self._update_posture_gains()

    def fallen(self) -> list[str]:
        """Names of the monitored bodies below their fall height (current data)."""
        return [b for b, i, h in self.fall_ids if self.data.xpos[i, 2] < h]

    def dropped(self) -> list[str]:
        """Names of the monitored objects below their drop height (current data)."""
        return [b for b, i, h in self.drop_ids if self.data.xpos[i, 2] < h]

    def support_contacts(self) -> np.ndarray:
        """``(len(support_bodies),)`` bool: which support bodies touch the world now."""
        touching = _world_contact_bodies(self.model, self.data)
        return np.array([i in touching for i in self.support_ids], dtype=bool)


def _chain_dofs(model, kind: str, i: int) -> np.ndarray:
    """Dofs of the joints from a frame's body up to (not including) the nearest free joint."""
    body = int(model.site_bodyid[i]) if kind == "site" else int(i)
    dofs = []
    while body > 0:
        jnts = [j for j in range(model.body_jntadr[body], model.body_jntadr[body] + model.body_jntnum[body])]
        if any(model.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_FREE) for j in jnts):
            break
        dofs.extend(np.flatnonzero(model.dof_bodyid == body).tolist())
        body = int(model.body_parentid[body])
    return np.array(sorted(dofs), dtype=int)


def _body_id(model, name: str) -> int:
    i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
    if i < 0:
        raise ParameterError(f"model {model_name(model)!r} has no body named {name!r}")
    return i
