"""The nominal trajectories of ``bimanual-box`` (:mod:`.bimanual_box`) and what they are made of.

* :data:`BOX_TARGETS` — the box's three target poses (slide, lift, edge);
  :class:`TargetSchedule` — the active one, switched when it is reached (``BOX_TOL_POS`` m and
  ``BOX_TOL_DEG``° at an update) or after ``BOX_BUDGET`` s; :func:`box_pose_error`.
* :func:`grasp_ik` — the ``bimanual`` model's two arms (joints ``{side}_j1 … {side}_j7``,
  end-effector sites ``{side}_ee``) with their end-effector spheres on the box's ±x faces.
* :func:`make_bimanual_nominal` — the box ramping from its measured pose toward the active
  target (:func:`~contactopt.nominal.pose_ramp`), the arms holding it in a squeezing grasp or
  tipping it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import ParameterError, as_array
from ..nominal import finite_velocity, free_joint, home_qpos, pose_ramp
from ..rotations import orientation_error, quat_from_axis_angle
from ..rotations import unit_quat as _quat

__all__ = ["BoxTarget", "BOX_TARGETS", "box_pose_error", "TargetSchedule", "arm_qpos_indices",
           "grasp_ik", "make_bimanual_nominal"]


@dataclass(frozen=True)
class BoxTarget:
    """A target pose of the box: ``name``, centre ``pos (3,)`` [m] and orientation ``quat (4,)``."""

    name: str
    pos: tuple
    quat: tuple


_TABLE_TOP = 0.75
_BOX_HALF = 0.075
_BOX_HOME = np.array([0.0, 0.0, _TABLE_TOP + _BOX_HALF])

#: slide 10 cm along the table (toward the right arm), lift 10 cm, set down balanced on an
#: edge (45° about y: the centre is then ``half·√2`` above the table)
BOX_TARGETS = (
    BoxTarget("slide", tuple((_BOX_HOME + [0.10, 0.0, 0.0]).tolist()), (1.0, 0.0, 0.0, 0.0)),
    BoxTarget("lift", tuple((_BOX_HOME + [0.10, 0.0, 0.10]).tolist()), (1.0, 0.0, 0.0, 0.0)),
    BoxTarget("edge", (0.10, 0.0, _TABLE_TOP + _BOX_HALF * math.sqrt(2.0)),
              tuple(quat_from_axis_angle([0.0, 1.0, 0.0], math.pi / 4).tolist())),
)
BOX_TOL_POS = 0.03  # m
BOX_TOL_DEG = 10.0  # deg
BOX_BUDGET = 4.0  # s per target
BOX_SPEED = 0.2  # m/s: the nominal's largest box speed (the paper's settings, box_paper_overrides)
BOX_GRASP_SPEED = 0.15  # m/s: and the task's (grasp, tip)
BOX_SPIN = 1.0  # rad/s: and rotation rate
BOX_SQUEEZE = 0.05  # m: the hands' nominal centres this far inside the box faces (grasp)
BOX_GRASP_TARGETS = ("slide", "lift")  # targets whose arm nominal holds the box in a squeezing grasp
#: (left, right) flange pitch [rad] of the grasps (slide, lift): the right hand level — at the 45°
#: of home the right elbow (J4) is at its limit before the hand reaches the box's right face for
#: box x ≳ 0.05 m; the left one 0.4 rad (23°) down — at home's 45° its hand drifted sideways from
#: its plan in the lift and the squeezed box turned in the grasp
#: (docs/experiments/bimanual-box-idto.md, "The left hand's pitch")
BOX_GRASP_PITCH = (-0.4, 0.0)
BOX_GRASP_HEIGHT = 0.0  # m: the hands' grasp height relative to the box centre
BOX_GRASP_KNOT_STRIDE = 5  # knots between the grasp solutions of a turning box's nominal
#: targets whose arm nominal tips the box (:func:`make_bimanual_nominal`): the left hand pushes on the
#: upper part of the left face, following the box ramp, the right hand waits as a stop at
#: ``BOX_TIP_STOP`` (its sphere's centre, on the table) for the box's lower right side
BOX_TIP_TARGETS = ("edge",)
BOX_TIP_SQUEEZE = 0.03  # m: the left hand's nominal this far inside the left face while tipping
BOX_TIP_LEFT_HEIGHT = 0.04  # m: and this far above the box centre (along the box's z axis)
#: (left, right) flange pitch [rad] while tipping: the left hand pressing 45° down (as at home), the
#: right one level, a stop
BOX_TIP_PITCH = (math.radians(-45.0), 0.0)
BOX_TIP_STOP = (0.225, 0.0, _TABLE_TOP + 0.05)


def box_pose_error(qpos, target: BoxTarget, qadr: int) -> tuple[float, float]:
    """``(position error [m], orientation error [deg])`` of the box in ``qpos (nq,)`` to ``target``
    (the box's free joint at qpos address ``qadr``)."""
    q = np.asarray(qpos, dtype=float)
    return (float(np.linalg.norm(q[qadr:qadr + 3] - np.asarray(target.pos))),
            math.degrees(orientation_error(q[qadr + 3:qadr + 7], target.quat)))


class TargetSchedule:
    """Which target is active: the next one once the active one is reached or its time budget is spent.

    Args:
      targets: :class:`BoxTarget` sequence (≥ 1).
      qadr: qpos address of the box's free joint.
      tol_pos, tol_deg: "reached" = position error < ``tol_pos`` [m] and orientation error
        < ``tol_deg`` [deg].
      budget: seconds [s] a target may stay active (the last one: no limit).

    :meth:`update` is called with the planner's measured state at every MPC update (it is the
    planner's nominal that calls it), so :func:`replay_schedule` can rebuild the same switches
    from a run's update times and recorded states.
    """

    def __init__(self, targets, qadr: int, tol_pos: float = BOX_TOL_POS, tol_deg: float = BOX_TOL_DEG,
                 budget: float = BOX_BUDGET):
        self.targets = tuple(targets)
        if not self.targets:
            raise ParameterError("TargetSchedule needs at least one target")
        for name, v in (("tol_pos", tol_pos), ("tol_deg", tol_deg), ("budget", budget)):
            if not (math.isfinite(v) and v > 0):
                raise ParameterError(f"{name} must be positive, got {v!r}")
        self.qadr, self.tol_pos = int(qadr), float(tol_pos)
        self.tol_deg, self.budget = float(tol_deg), float(budget)
        self.index = 0
        self.t_start: float | None = None
        #: one entry per switch: (target index left, time [s], "reached" | "budget")
        self.switches: list[tuple[int, float, str]] = []

    @property
    def target(self) -> BoxTarget:
        """The active target."""
        return self.targets[self.index]

    def update(self, t: float, qpos) -> BoxTarget:
        """Advance the schedule with the state ``qpos (nq,)`` measured at time ``t`` [s].

        Returns the active :class:`BoxTarget` (the next one if this state reached the active
        one or its budget is spent; at most one switch per call)."""
        if self.t_start is None:
            self.t_start = float(t)
        if self.index < len(self.targets) - 1:
            ep, eo = box_pose_error(qpos, self.target, self.qadr)
            why = ("reached" if ep < self.tol_pos and eo < self.tol_deg
                   else "budget" if t - self.t_start >= self.budget - 1e-9 else None)
            if why is not None:
                self.switches.append((self.index, float(t), why))
                self.index += 1
                self.t_start = float(t)
        return self.target


_ARMS = (("left", 1.0), ("right", -1.0))  # (name prefix, side: the left arm is at −x)
_EE_RADIUS = 0.05  # m: the end-effector spheres
_EE_PITCH = math.radians(-45.0)  # the end effectors point 45° down toward the box (as at home)


def arm_qpos_indices(model: mujoco.MjModel, side: str) -> np.ndarray:
    """qpos addresses ``(7,)`` of the joints ``{side}_j1 … {side}_j7`` of one arm (``side``:
    "left" or "right").  Raises ParameterError if the model lacks one."""
    out = []
    for i in range(1, 8):
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, f"{side}_j{i}")
        if j < 0:
            raise ParameterError(f"model has no joint {side}_j{i}")
        out.append(int(model.jnt_qposadr[j]))
    return np.array(out)


def grasp_ik(model: mujoco.MjModel, box_pos, squeeze: float, q_start, *, iterations: int = 60,
             height: float = 0.0, data: mujoco.MjData | None = None, box_quat=None,
             pitch=None) -> np.ndarray:
    """Arm joint positions ``q (nq,)`` with both end-effector spheres on the box's ±x faces.

    Each sphere's centre is placed at ``box_pos + R (∓(half + r − squeeze), 0, height)``
    (``R``: the box orientation ``box_quat (4,)``, default identity; ``squeeze`` [m] ≥ 0: how
    far the sphere is pushed into the face, the arms must then press to hold it there;
    ``height`` [m]: above (+) or below (−) the box centre along its z axis), its flange
    axis pointing 45° down toward the box (in the world frame, whatever ``R``), by damped
    least squares on both arms' site Jacobians (``iterations`` Gauss–Newton steps from
    ``q_start (nq,)``; the other coordinates of ``q_start`` are returned unchanged).  Joint
    limits are clipped at 98 %.
    """
    box_pos = as_array("box_pos", box_pos, (3,))
    if not (math.isfinite(squeeze) and 0 <= squeeze < _BOX_HALF):
        raise ParameterError(f"squeeze must be in [0, {_BOX_HALF}) m, got {squeeze!r}")
    rot = np.eye(3)
    if box_quat is not None:
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, _quat("box_quat", box_quat))
        rot = rot.reshape(3, 3)
    d = mujoco.MjData(model) if data is None else data
    d.qpos[:] = as_array("q_start", q_start, (model.nq,))
    jp, jr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    pitch = _EE_PITCH if pitch is None else pitch
    pitches = dict(zip([a for a, _ in _ARMS], np.broadcast_to(np.asarray(pitch, dtype=float), (2,))))
    heights = dict(zip([a for a, _ in _ARMS], np.broadcast_to(np.asarray(height, dtype=float), (2,))))
    for side, sgn in _ARMS:
        site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, f"{side}_ee")
        body = int(model.site_bodyid[site])
        qa = arm_qpos_indices(model, side)
        dofs = np.array([model.jnt_dofadr[model.jnt_qposadr.tolist().index(a)] for a in qa])
        lo = model.jnt_range[[model.jnt_qposadr.tolist().index(a) for a in qa]]
        target = box_pos + rot @ np.array([-sgn * (_BOX_HALF + _EE_RADIUS - squeeze), 0.0, heights[side]])
        zdir = np.array([sgn * math.cos(pitches[side]), 0.0, math.sin(pitches[side])])
        for _ in range(iterations):
            mujoco.mj_kinematics(model, d)
            mujoco.mj_comPos(model, d)
            mujoco.mj_jacSite(model, d, jp, jr, site)
            z = d.xmat[body].reshape(3, 3)[:, 2]
            e = np.concatenate([target - d.site_xpos[site], np.cross(z, zdir)])
            J = np.vstack([jp[:, dofs], jr[:, dofs]])
            d.qpos[qa] += J.T @ np.linalg.solve(J @ J.T + 1e-4 * np.eye(6), e)
            d.qpos[qa] = np.clip(d.qpos[qa], 0.98 * lo[:, 0], 0.98 * lo[:, 1])
    return d.qpos.copy()


def make_bimanual_nominal(grasp_targets=(), squeeze: float | None = None, targets=None, tip_targets=(),
                          speed: float | None = None):
    """Nominal factory ``(model, T, h) -> nominal(t, x) -> (q (T+1, nq), v (T+1, nv))`` of ``bimanual-box``.

    The box ramps from its measured pose toward the active target of a :class:`TargetSchedule`
    over ``targets`` (default :data:`BOX_TARGETS`) at ``speed`` [m/s] (default ``BOX_SPEED``) /
    ``BOX_SPIN`` (:func:`pose_ramp`).  The arms: at home, except

    * while a target named in ``grasp_targets`` is active: they follow the box's ramp in a
      squeezing grasp (:func:`grasp_ik` with ``squeeze`` [m], default ``BOX_SQUEEZE``, at
      ``BOX_GRASP_HEIGHT`` and ``BOX_GRASP_PITCH``; joints interpolated between the grasps at the
      ramp's two ends, or, on a turning ramp, every ``BOX_GRASP_KNOT_STRIDE`` knots);
    * while a target named in ``tip_targets`` is active: the left hand follows the ramp pressed on
      the upper part of the box's left face (``BOX_TIP_SQUEEZE`` deep, ``BOX_TIP_LEFT_HEIGHT`` above
      the centre, at ``BOX_TIP_PITCH``; grasps every ``BOX_GRASP_KNOT_STRIDE`` knots), the right
      hand's sphere waits centred at ``BOX_TIP_STOP``, on the table to the right of the box: a stop
      for its lower right side while the left hand tips it over that side.

    The returned nominal carries its schedule as ``nominal.schedule``.
    """
    grasp_targets, tip_targets = tuple(grasp_targets), tuple(tip_targets)
    squeeze = BOX_SQUEEZE if squeeze is None else float(squeeze)
    speed = BOX_SPEED if speed is None else float(speed)
    if not (math.isfinite(speed) and speed > 0):
        raise ParameterError(f"speed must be positive, got {speed!r}")
    targets = BOX_TARGETS if targets is None else tuple(targets)
    for what, names in (("grasp_targets", grasp_targets), ("tip_targets", tip_targets)):
        unknown = set(names) - {t.name for t in targets}
        if unknown:
            raise ParameterError(f"{what}: no target named {sorted(unknown)}")
    both = set(grasp_targets) & set(tip_targets)
    if both:
        raise ParameterError(f"targets both grasped and tipped: {sorted(both)}")

    def factory(model, T, h):
        home = home_qpos(model)
        qadr, _ = free_joint(model, "box")
        left, right = arm_qpos_indices(model, "left"), arm_qpos_indices(model, "right")
        arms = np.concatenate([left, right])
        scratch = mujoco.MjData(model)
        cache = {"q": home.copy()}
        knots = np.unique(np.r_[np.arange(0, T, BOX_GRASP_KNOT_STRIDE), T])
        stop_box = np.asarray(BOX_TIP_STOP, dtype=float) - [_BOX_HALF + _EE_RADIUS, 0.0, 0.0]

        def solve(pos, quat, sq, height, iterations=20, pitch=BOX_GRASP_PITCH):
            cache["q"] = grasp_ik(model, pos, sq, cache["q"], iterations=iterations, height=height,
                                  data=scratch, box_quat=quat, pitch=pitch)
            return cache["q"]

        def along_knots(box, cols, sq, height, pitch=BOX_GRASP_PITCH):
            """``cols`` of the grasps of the ramp ``box (T+1, 7)`` at ``knots``, interpolated."""
            sols = np.array([solve(box[k, :3], box[k, 3:], sq, height, 20 if i == 0 else 8, pitch)[cols]
                             for i, k in enumerate(knots)])
            steps = np.arange(T + 1)
            return np.stack([np.interp(steps, knots, sols[:, j]) for j in range(len(cols))], axis=1)

        def nominal(t, x):
            target = nominal.schedule.update(t, x[:model.nq])
            q, v = pose_ramp(model, home, qadr, x[qadr:qadr + 3], x[qadr + 3:qadr + 7], target.pos,
                             target.quat, T, h, speed=speed, spin=BOX_SPIN)
            box = q[:, qadr:qadr + 7]
            if target.name in grasp_targets:
                if orientation_error(box[0, 3:], box[-1, 3:]) > math.radians(1.0):
                    q[:, arms] = along_knots(box, arms, squeeze, BOX_GRASP_HEIGHT)  # the hands swing
                else:
                    p0, p1 = box[0, :3], box[-1, :3]
                    a0 = solve(p0, box[0, 3:], squeeze, BOX_GRASP_HEIGHT)[arms]
                    a1 = solve(p1, box[-1, 3:], squeeze, BOX_GRASP_HEIGHT)[arms]
                    span = float(np.linalg.norm(p1 - p0))
                    frac = (np.linalg.norm(box[:, :3] - p0, axis=1) / span if span > 1e-9
                            else np.zeros(T + 1))
                    q[:, arms] = a0 + frac[:, None] * (a1 - a0)
                v = finite_velocity(model, q, h)
            elif target.name in tip_targets:
                q[:, left] = along_knots(box, left, BOX_TIP_SQUEEZE, BOX_TIP_LEFT_HEIGHT, BOX_TIP_PITCH)
                q[:, right] = grasp_ik(model, stop_box, 0.0, cache["q"], iterations=20, data=scratch,
                                       pitch=BOX_TIP_PITCH)[right]
                v = finite_velocity(model, q, h)
            return q, v

        nominal.schedule = TargetSchedule(targets, qadr)
        return nominal

    return factory
