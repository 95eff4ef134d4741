"""The scripted goal-directed reaching sessions as planner-independent :class:`~contactopt.Task` s.

:func:`as_task` turns a :class:`~contactopt.solvers.gdd.sessions.ReachSpec` (``humanoid-reach``,
``hand-reach`` or :func:`~contactopt.solvers.gdd.sessions.auto_reach_spec` of any model) into a
task that the generic runner, the GUI, ``bench tasks`` and the policy server run:

* **cost**: the session's own terms, as shared :class:`~contactopt.costs.CostTerm` s over
  accelerations (built by :class:`~contactopt.solvers.gdd.sessions.ReachSession` on the planner's
  model, so every weight and gain derived from the model is the session's): one end-effector
  spring per goal frame whose goal follows the scripted drags
  (:meth:`~contactopt.solvers.gdd.EndEffectorAcceleration.with_reference`), the posture PD term,
  the centre-of-mass spring where the spec has one, and damping;
* **initial state**: the session's (keyframe, root lowered, grasp) from a seeded pose: every
  actuated hinge or slide joint is moved by ``U(−0.02, 0.02)`` (rad or m) before the grasp;
* **success**: every drag's final goal reached within ``reach_tolerance`` while it is held
  (the session's test), latched from the time the last one is reached; **failure**: a monitored
  body below its fall height or a held object below its drop height;
* **metric**: the largest distance [m] of a goal frame from its current goal.

The session runner and its form differ in two ways, on purpose: the form's goals persist after
their release (a dragged goal stays where it was left, held by its spring, where the session
switches the term off and holds the limb with the posture term), and the goals are the standard
schedule for every seed (the seed draws the initial pose instead of moving the goals).  Only
``gdd`` consumes these terms: ``ilqg`` and ``idto`` refuse the forms in one line.
"""

from __future__ import annotations

import mujoco
import numpy as np

from ..task import Task

__all__ = ["as_task", "goal_schedule"]

#: half-width of the seeded perturbation of the actuated joints, rad or m
POSE_NOISE = 0.02


def goal_schedule(spec, home: dict):
    """``goal(frame, t) -> (3,)``: the scripted goal of ``frame`` at time ``t`` [s], m (world).

    Before a frame's first drag its goal is its home position (``home[frame]``, the frame's
    position in the initial state); during a drag the goal moves from where the last drag left
    it along the drag's minimum-jerk path; afterwards it stays at the drag's final position.
    """
    by_frame = {f: sorted((d for d in spec.drags if d.frame == f), key=lambda d: d.start) for f in home}

    def goal(frame: str, t: float) -> np.ndarray:
        origin = np.asarray(home[frame], dtype=float)
        for d in by_frame[frame]:
            if t < d.start:
                break
            final = d.final(origin, home[frame])
            if t < d.start + d.drag:
                return d.goal_at(t, origin, home[frame])
            origin = final
        return origin.copy()

    return goal


class _ReachProgress:
    """The session's success test over a run: each drag's final goal within the tolerance while
    it is held, latched.  State is per plant ``MjData`` and starts over when time goes back."""

    def __init__(self, spec, frames: dict, targets: list):
        self.spec = spec
        self.frames = frames  # name -> ("site" | "body", id)
        self._targets = targets  # per drag: its final goal (3,), m
        self._key = None
        self._t = -np.inf
        self._reached = np.zeros(len(spec.drags), dtype=bool)

    def _position(self, data, frame):
        kind, i = self.frames[frame]
        return data.site_xpos[i] if kind == "site" else data.xpos[i]

    def __call__(self, model, data) -> bool:
        t = float(data.time)
        if self._key != id(data) or t < self._t:
            self._key, self._reached[:] = id(data), False
        self._t = t
        for k, d in enumerate(self.spec.drags):
            if not self._reached[k] and d.active(t):
                target = self._targets[k]
                if np.linalg.norm(self._position(data, d.frame) - target) <= self.spec.reach_tolerance:
                    self._reached[k] = True
        return bool(self._reached.all())


def _perturbed_pose(rng):
    """``perturb(model, data)`` moving every actuated hinge/slide joint by ``U(±POSE_NOISE)``."""

    def perturb(model, data):
        joints = set(int(model.actuator_trnid[i, 0]) for i in range(model.nu)
                     if int(model.actuator_trntype[i]) == int(mujoco.mjtTrn.mjTRN_JOINT))
        moving = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
        for j in sorted(joints):
            if int(model.jnt_type[j]) in moving:
                adr = int(model.jnt_qposadr[j])
                q = data.qpos[adr] + rng.uniform(-POSE_NOISE, POSE_NOISE)
                if model.jnt_limited[j]:
                    q = float(np.clip(q, *model.jnt_range[j]))
                data.qpos[adr] = q

    return perturb


def as_task(spec, *, name: str | None = None, description: str = "") -> Task:
    """The planner-independent form of the scripted reach session ``spec`` (module docstring).

    Args:
      spec: a :class:`~contactopt.solvers.gdd.sessions.ReachSpec`.
      name: task name (default ``spec.name``).
      description: one line for listings.
    """
    from ..model import load_model
    from ..solvers.gdd.reach_session import ReachSession, reach_initial_state

    nominal = ReachSession(spec, model=load_model(spec.model))  # home positions of the goal frames
    home = {f: nominal.frame_position(f) for f in nominal.frames}
    schedule = goal_schedule(spec, home)
    # each drag's final goal: where the schedule has it when the drag's motion ends
    targets = [schedule(d.frame, d.start + d.drag) for d in spec.drags]
    frames = dict(nominal.frames)
    progress = _ReachProgress(spec, frames, targets)

    def cost(model):
        session = ReachSession(spec, model=model)
        if spec.posture_free_chain:
            # the goal frames' limbs are held by their springs throughout: no posture spring there
            session.free_goal_chains()
        for frame, term in session.ee_terms.items():
            term.active = True
            term.with_reference(lambda t, t0, x0, frame=frame: schedule(frame, t))
        return list(session.cost_terms)

    def initial_state(model, data, rng):
        reach_initial_state(spec, model, data, perturb=_perturbed_pose(rng))

    falls = [(b, h) for b, h in spec.fall_heights] + [(b, h) for b, h in spec.drop_heights]

    def failure(model, data):
        return any(data.body(b).xpos[2] < h for b, h in falls)

    def metric(model, data):
        t = float(data.time)
        return max(float(np.linalg.norm(progress._position(data, f) - schedule(f, t))) for f in frames)

    gdd_options = {"max_iterations": int(dict(spec.solver).get("max_iterations", 50))}
    return Task(name=name or spec.name, model=spec.model, cost=cost, initial_state=initial_state,
                success=progress, success_hold=0.0, failure=failure if falls else None,
                duration=spec.seconds, planner_options={"gdd": gdd_options}, metric=metric,
                description=description or f"{spec.name}: scripted goals for "
                                           f"{', '.join(sorted(home))} (goal-directed terms)")
