"""IDTO contact-implicit MPC manipulation tasks of the seed paper: ``hand-ball`` and ``bimanual-box``.

Both are :class:`~contactopt.tasks.idto_tasks.IDTOTask` s run by
:func:`~contactopt.tasks.idto_tasks.run_idto_task` (``contactopt run TASK --planner idto``):
the plant is the bundled MuJoCo model with MuJoCo's own contact, the compliant contact
model (Table I) is only the planner's.

* ``hand-ball`` (model ``hand``, paper VI-A3 / VI-D3) — rotate the free 50 g ball 180°
  about ``HAND_BALL_AXIS`` in the Allegro-like hand.  The nominal trajectory is the ball
  turning from its measured orientation toward the target at ``HAND_BALL_SPIN`` rad/s
  (re-anchored at every update) while its centre stays at the home position — lowered by
  the depth at which the planner's compliant palm carries the ball (:func:`planner_rest_offset`,
  4.9 mm; at the plant's resting height the nominal would ask the fingers to lift the ball)
  — and the hand stays in its holding pose (keyframe ``home``).  Table I/II Allegro parameters (40 steps
  of 0.05 s, k = 100 N/m, σ = 1 mm, μ = 1, v_s = 0.1 m/s), the Lagrange-multiplier solver
  (the paper: "essential"), 10 Hz MPC (policy lag 0.1 s), with four documented changes: the
  ball's position weight ``HAND_BALL_POS_WEIGHT`` = 3000 running / 30000 terminal
  (Table II: 10 / 100; its orientation keeps 10 / 100), the hand's running velocity weight
  ``HAND_BALL_HAND_VEL_WEIGHT`` = 0.1 (0.001), 4 solver iterations per update (the paper: 1)
  and ``HAND_BALL_SPIN`` = 0.5 rad/s.  The planner's contact is
  restricted to pairs that involve the ball.  Reported: the ball's orientation error
  (degrees; initial, final, min and a 0.25 s-sampled series), whether the ball stayed in
  the hand, the update time.  Success: error below ``HAND_BALL_SUCCESS_DEG`` for 0.5 s
  with the ball in the hand.  Status: succeeds on 7 of seeds 0–15 (20 s runs).
* ``bimanual-box`` (model ``bimanual``, paper VI-A4 / VI-D4) — two 7-DoF arms move the
  550 g box through three target poses in sequence (:data:`BOX_TARGETS`): slide it
  along the table, lift it, put it down balanced on an edge.  The active target switches
  when it is reached (``BOX_TOL_POS`` m and ``BOX_TOL_DEG``° at an update) or after
  ``BOX_BUDGET`` s (:class:`TargetSchedule`).  The nominal (:func:`make_bimanual_nominal`) moves
  the box from its measured pose toward the active target at ``BOX_GRASP_SPEED`` / ``BOX_SPIN``;
  during the slide and the lift the arms' nominal holds the box in a squeezing grasp that
  follows that ramp (:func:`grasp_ik`: the end-effector spheres ``BOX_SQUEEZE`` inside the ±x
  faces, the left flange 45° down, the right one level, ``BOX_GRASP_PITCH``), during the edge
  phase the left hand presses on the upper part of the box's left face, following the ramp,
  while the right hand waits on the table to its right as a stop (``BOX_TIP_*``): the box is
  tipped over its lower right edge.  The first plan starts from the hands closing on the box
  (:func:`bimanual_grasp_guess`).  Table I/II bimanual parameters (20 steps of 0.05 s,
  k = 1000 N/m, σ = 5 mm, v_s = 0.05 m/s, penalty method, 20 Hz MPC) with two documented
  changes: the arm joint positions are weighted ``BOX_ARM_WEIGHT`` = 100 running and terminal
  (Table II: 0 / 0.1 — with no running cost no arm nominal can ask for a grasp) and the
  planner's μ is ``BOX_PLANNER_FRICTION`` = 0.3 (Table I: 0.2).  The paper's settings (arms'
  nominal at home, Table I/II as printed, box speed ``BOX_SPEED``) are
  :func:`box_paper_overrides`.  The plant's end effectors are soft fingertips (torsional
  friction, model ``bimanual``).  Reported per target: reached or not, when, and
  the pose error (m, °) at the end of its phase and the smallest during it.  Success
  (:func:`box_success_factory`): the plant's box has been at the slide and then at the lift
  target (within the tolerances, at any plant step) and the last (edge) target is reached and
  held for 0.5 s.  Status: succeeds on 6 of seeds 0–7 (12 s runs).

Experiment logs: docs/experiments/hand-ball-idto.md, docs/experiments/bimanual-box-idto.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import ParameterError, as_array
from ..rotations import orientation_error, quat_conjugate, quat_from_axis_angle, quat_multiply, rotate_toward
from ..rotations import relative_rotation as _relative
from ..rotations import turn as _turn
from ..rotations import unit_quat as _quat
from . import register_task
from .idto_tasks import IDTOTask, idto_runner

__all__ = [
    "quat_multiply", "quat_conjugate", "quat_from_axis_angle", "orientation_error", "rotate_toward",
    "pose_ramp", "planner_rest_offset", "hand_ball_target", "hand_ball_error_deg", "ball_in_hand",
    "box_pose_error", "box_success_factory", "arm_qpos_indices", "grasp_ik",
    "make_bimanual_nominal",
    "bimanual_grasp_guess",
    "box_grasp_overrides", "box_paper_overrides", "TargetSchedule", "BoxTarget", "replay_schedule",
    "HAND_BALL", "BIMANUAL_BOX", "BOX_TARGETS", "TASKS",
]


# =========================================================================== nominal trajectories


def _free_joint(model: mujoco.MjModel, name: str) -> tuple[int, int]:
    """``(qpos address, dof address)`` of the free joint ``name``."""
    j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if j < 0 or model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE:
        raise ParameterError(f"model has no free joint named {name!r}")
    return int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j])


def _home(model: mujoco.MjModel) -> np.ndarray:
    k = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home")
    if k < 0:
        raise ParameterError("model has no 'home' keyframe")
    return model.key_qpos[k].copy()


def pose_ramp(model: mujoco.MjModel, q_rest, qadr: int, pos, quat, target_pos, target_quat, T: int, h: float,
              speed: float, spin: float):
    """Nominal ``(q (T+1, nq), v (T+1, nv))``: a free body moving from ``(pos, quat)`` toward a target pose.

    Args:
      model: the model (its ``nq``/``nv`` and configuration arithmetic).
      q_rest: ``(nq,)`` configuration of every other joint (held).
      qadr: qpos address of the free joint (position 3, quaternion 4).
      pos, quat: ``(3,)`` [m] and ``(4,)`` start pose (the measured one).
      target_pos, target_quat: ``(3,)`` [m] and ``(4,)`` target pose.
      T, h: knots ``0 … T`` spaced ``h`` [s].
      speed: [m/s] and spin: [rad/s] — the largest translation / rotation rate of the ramp
        (knot ``k`` is ``min(speed·k·h, distance)`` along the straight line and likewise on
        the shortest arc).

    Returns:
      ``q`` with the free joint on the ramp and ``v`` its finite-difference velocity
      (``v_k = (q_k ⊖ q_{k−1})/h`` as the planner defines it, ``v_0 = v_1``); zero on the
      other joints.
    """
    pos, target_pos = as_array("pos", pos, (3,)), as_array("target_pos", target_pos, (3,))
    q_rest = as_array("q_rest", q_rest, (model.nq,))
    d = target_pos - pos
    dist = float(np.linalg.norm(d))
    q = np.tile(q_rest, (T + 1, 1))
    quat = _quat("quat", quat)
    angle, axis = _relative(quat, target_quat)  # once: the arc is the same for every knot
    for k in range(T + 1):
        s = k * h
        q[k, qadr:qadr + 3] = pos + (d * min(1.0, speed * s / dist) if dist > 0 else 0.0)
        q[k, qadr + 3:qadr + 7] = _turn(quat, axis, min(spin * s, angle))
    return q, _finite_velocity(model, q, h)


# =========================================================================== hand-ball

#: axis (world frame) of the 180° rotation: x runs along the fingers, z is the palm normal
HAND_BALL_AXIS = np.array([0.0, 0.0, 1.0])
HAND_BALL_ANGLE = math.pi
HAND_BALL_SPIN = 0.5  # rad/s: the nominal's largest rotation rate (180° in ≥ 6.3 s)
#: running weight on the ball's centre position (terminal: 10×); Table II has 10 / 100 — at that
#: weight a 1 cm drift costs as much as a 0.01 rad orientation error and the plans let the ball roll off
HAND_BALL_POS_WEIGHT = 3e3
#: running weight on the hand's joint velocities (Table II: 0.001): slower, gentler finger motions
HAND_BALL_HAND_VEL_WEIGHT = 0.1
HAND_BALL_SUCCESS_DEG = 30.0
BALL_IN_HAND_RADIUS = 0.06  # m (the palm is 9.5 x 11.3 cm; home centre 3 cm ahead of its middle)
HAND_BALL_REPORT_PERIOD = 0.25  # s between the samples of the reported error series
#: Table I (Allegro): k 100 N/m, σ 0.1 cm, μ 1.0, v_s 0.1 m/s; only pairs with the ball
HAND_BALL_CONTACT = dict(stiffness=100.0, smoothing=0.001, friction=1.0, stiction_velocity=0.1,
                         dissipation_velocity=0.1, bodies=["ball"])


def hand_ball_target(axis=None, angle: float = HAND_BALL_ANGLE) -> np.ndarray:
    """Target orientation ``(4,)`` of the ball: its home orientation (identity) turned by
    ``angle`` [rad] about ``axis`` ``(3,)`` (default ``HAND_BALL_AXIS``)."""
    return quat_from_axis_angle(HAND_BALL_AXIS if axis is None else axis, angle)


def planner_rest_offset(weight: float, stiffness: float, smoothing: float) -> float:
    """Depth [m] (≥ 0 into the surface; negative: above it) at which the planner's compliant
    contact carries ``weight`` [N] (stiffness ``k`` [N/m], smoothing ``σ`` [m]):
    ``φ = −σ log(exp(W/(σk)) − 1)`` solves ``σ k log(1 + exp(−φ/σ)) = W`` (one contact; ``−φ``
    is returned).

    Raises:
      ParameterError: a non-positive or non-finite argument.
    """
    for name, v in (("weight", weight), ("stiffness", stiffness), ("smoothing", smoothing)):
        if not (isinstance(v, (int, float, np.floating)) and math.isfinite(v) and v > 0):
            raise ParameterError(f"{name} must be positive and finite, got {v!r}")
    x = weight / (smoothing * stiffness)
    # log(expm1(x)) = x + log(1 − exp(−x)) without overflow for large x
    return float(smoothing * (x + math.log(-math.expm1(-x))))


def _hand_ball_nominal(model, T, h):
    home = _home(model)
    qadr, _ = _free_joint(model, "ball")
    target = hand_ball_target()
    ball_home = home[qadr:qadr + 3].copy()
    # the planner's ball rests this much deeper in its compliant palm than the plant's on MuJoCo's
    # contact: a nominal at the plant's resting height would ask the fingers to lift it
    c = HAND_BALL_CONTACT
    bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "ball")
    weight = float(model.body_subtreemass[bid] * np.linalg.norm(model.opt.gravity))
    ball_home[2] -= planner_rest_offset(weight, c["stiffness"], c["smoothing"])

    def nominal(t, x):
        return pose_ramp(model, home, qadr, ball_home, x[qadr + 3:qadr + 7], ball_home, target, T, h,
                         speed=0.0, spin=HAND_BALL_SPIN)

    return nominal


def _hand_ball_initial(model, data, rng):
    mujoco.mj_resetDataKeyframe(model, data, mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home"))
    qadr, _ = _free_joint(model, "ball")
    data.qpos[:qadr] += rng.uniform(-0.02, 0.02, qadr)  # the 16 hand joints come first
    data.qvel[:] = 0.0


def hand_ball_error_deg(model, data) -> float:
    """The ball's orientation error [deg] to the ``hand-ball`` target on the plant state ``data``."""
    qadr, _ = _free_joint(model, "ball")
    return math.degrees(orientation_error(data.qpos[qadr + 3:qadr + 7], hand_ball_target()))


def ball_in_hand(model, qpos) -> bool:
    """Whether the ball ``qpos (nq,)`` is still in the hand: centre within ``BALL_IN_HAND_RADIUS``
    (horizontally) of its home position and above 0.23 m (the palm surface is at 0.2 m, the radius
    0.06 m: a ball that leaves the palm falls to the floor, 0.2 m lower)."""
    qadr, _ = _free_joint(model, "ball")
    home = _home(model)[qadr:qadr + 3]
    p = np.asarray(qpos)[qadr:qadr + 3]
    return bool(np.linalg.norm(p[:2] - home[:2]) < BALL_IN_HAND_RADIUS and p[2] > 0.23)


def _hand_ball_success(model, data):
    return hand_ball_error_deg(model, data) < HAND_BALL_SUCCESS_DEG and ball_in_hand(model, data.qpos)


def _hand_ball_report(task, model, result, x0):
    err = np.asarray(result.metric, dtype=float)
    t = np.asarray(result.time)
    qadr, _ = _free_joint(model, "ball")
    home = _home(model)[qadr:qadr + 3]
    drift = np.linalg.norm(result.qpos[:, qadr:qadr + 3] - home, axis=1) if t.size else np.zeros(0)
    in_hand = [ball_in_hand(model, q) for q in result.qpos]
    stride = max(1, int(round(HAND_BALL_REPORT_PERIOD / np.median(np.diff(t))))) if t.size > 1 else 1
    first_drop = next((float(t[i]) for i, ok in enumerate(in_hand) if not ok), None)
    held = t < first_drop if first_drop is not None else np.ones(t.size, dtype=bool)
    return {
        "target_axis": HAND_BALL_AXIS.tolist(), "target_angle_deg": math.degrees(HAND_BALL_ANGLE),
        "initial_error_deg": float(err[0]) if err.size else None,
        "final_error_deg": float(err[-1]) if err.size else None,
        "min_error_deg": float(np.min(err)) if err.size else None,
        # the smallest error while the ball was still in the hand (a falling ball turns too)
        "min_error_in_hand_deg": float(np.min(err[held])) if held.any() else None,
        "success_error_deg": HAND_BALL_SUCCESS_DEG,
        "error_deg_series": [[round(float(t[i]), 3), round(float(err[i]), 2)]
                             for i in range(0, t.size, stride)],
        "ball_in_hand_at_end": bool(in_hand[-1]) if in_hand else None,
        "ball_left_hand_at": first_drop,
        "ball_max_drift_m": float(drift.max()) if drift.size else None,
    }


HAND_BALL = IDTOTask(
    name="hand-ball", model="hand",
    description="rotate the ball 180 deg in the Allegro-like hand with IDTO contact-implicit MPC",
    horizon=40, time_step=0.05,
    # Table II (Allegro): positions 0.01 / 1 (hand), 10 / 100 (ball); velocities 0.001 / 10 (hand),
    # 1 / 10 (ball); R 0.1; unactuated 1000 (unused: the constrained solver enforces Zᵀτ = 0).
    # Changed (module docstring): the ball's position HAND_BALL_POS_WEIGHT / 10× (its orientation
    # keeps 10 / 100), the hand's running velocity weight HAND_BALL_HAND_VEL_WEIGHT.
    weights=dict(Qq=[0.01] * 16 + [HAND_BALL_POS_WEIGHT] * 3 + [10.0] * 3,
                 Qf_q=[1.0] * 16 + [10.0 * HAND_BALL_POS_WEIGHT] * 3 + [100.0] * 3,
                 Qv=[HAND_BALL_HAND_VEL_WEIGHT] * 16 + [1.0] * 6, Qf_v=10.0, R=0.1, unactuated_penalty=1e3),
    contact=HAND_BALL_CONTACT,
    nominal=_hand_ball_nominal, initial_state=_hand_ball_initial, success=_hand_ball_success,
    metric=hand_ball_error_deg, success_hold=0.5, default_seconds=15.0, kp=1.0, kd=0.05,
    lag=0.1, update_period=0.1, rate_target_hz=10.0, initial_iterations=30, report=_hand_ball_report,
    # 4 iterations per update (the paper: 1): one leaves the plans' phantom ball forces at ~0.4 N
    # (the ball weighs 0.49 N) and their predicted ball motion uncorrelated with the plant's
    # (3 and 5 iterations compared in docs/experiments/hand-ball-idto.md)
    iterations_per_update=4,
    # the paper: "the LM method was essential to obtaining good performance".  Δ_0 stays at the
    # notes' 0.1 (10 was worse: docs/experiments/hand-ball-idto.md)
    solver=dict(underactuation="constrained"),
)


# =========================================================================== bimanual-box


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
#: (left, right) flange pitch [rad] of the grasps: the right hand level — at the 45° of home the right
#: elbow (J4) is at its limit before the hand reaches the box's right face for box x ≳ 0.05 m
BOX_GRASP_PITCH = (math.radians(-45.0), 0.0)
BOX_GRASP_HEIGHT = 0.0  # m: the hands' grasp height relative to the box centre
BOX_GRASP_KNOT_STRIDE = 5  # knots between the grasp solutions of a turning box's nominal
BOX_GUESS_CLOSE_STEPS = 5  # knots over which the first guess closes the hands
#: targets whose arm nominal tips the box (:func:`make_bimanual_nominal`): the left hand pushes on the
#: upper part of the left face, following the box ramp, the right hand waits as a stop at
#: ``BOX_TIP_STOP`` (its sphere's centre, on the table) for the box's lower right side
BOX_TIP_TARGETS = ("edge",)
BOX_TIP_SQUEEZE = 0.03  # m: the left hand's nominal this far inside the left face while tipping
BOX_TIP_LEFT_HEIGHT = 0.04  # m: and this far above the box centre (along the box's z axis)
BOX_TIP_STOP = (0.225, 0.0, _TABLE_TOP + 0.05)
#: weight on the arm joint positions, running and terminal (Table II: 0 / 0.1), and the planner's
#: μ (Table I: 0.2; the plant's box: 0.5): the task's settings (:func:`box_paper_overrides`: Table II)
BOX_ARM_WEIGHT = 100.0
BOX_PLANNER_FRICTION = 0.3


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


def _finite_velocity(model, q, h):
    v = np.zeros((q.shape[0], model.nv))
    for k in range(1, q.shape[0]):
        mujoco.mj_differentiatePos(model, v[k], h, q[k - 1], q[k])
    v[0] = v[1]
    return v


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
      the centre; grasps every ``BOX_GRASP_KNOT_STRIDE`` knots), the right hand's sphere waits
      centred at ``BOX_TIP_STOP``, on the table to the right of the box: a stop for its lower right
      side while the left hand tips it over that side.

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
        home = _home(model)
        qadr, _ = _free_joint(model, "box")
        left, right = arm_qpos_indices(model, "left"), arm_qpos_indices(model, "right")
        arms = np.concatenate([left, right])
        scratch = mujoco.MjData(model)
        cache = {"q": home.copy()}
        knots = np.unique(np.r_[np.arange(0, T, BOX_GRASP_KNOT_STRIDE), T])
        stop_box = np.asarray(BOX_TIP_STOP, dtype=float) - [_BOX_HALF + _EE_RADIUS, 0.0, 0.0]

        def solve(pos, quat, sq, height, iterations=20):
            cache["q"] = grasp_ik(model, pos, sq, cache["q"], iterations=iterations, height=height,
                                  data=scratch, box_quat=quat, pitch=BOX_GRASP_PITCH)
            return cache["q"]

        def along_knots(box, cols, sq, height):
            """``cols`` of the grasps of the ramp ``box (T+1, 7)`` at ``knots``, interpolated."""
            sols = np.array([solve(box[k, :3], box[k, 3:], sq, height, 20 if i == 0 else 8)[cols]
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
                v = _finite_velocity(model, q, h)
            elif target.name in tip_targets:
                q[:, left] = along_knots(box, left, BOX_TIP_SQUEEZE, BOX_TIP_LEFT_HEIGHT)
                q[:, right] = grasp_ik(model, stop_box, 0.0, cache["q"], iterations=20, data=scratch,
                                       pitch=BOX_GRASP_PITCH)[right]
                v = _finite_velocity(model, q, h)
            return q, v

        nominal.schedule = TargetSchedule(targets, qadr)
        return nominal

    return factory


#: the paper's nominal (:func:`box_paper_overrides`): box ramps, arms at home (Table II: no running
#: cost on the arms)
_bimanual_nominal = make_bimanual_nominal()
#: the task's nominal: slide and lift in a squeezing grasp, tip the box onto its edge
_bimanual_grasp_nominal = make_bimanual_nominal(BOX_GRASP_TARGETS, tip_targets=BOX_TIP_TARGETS,
                                                speed=BOX_GRASP_SPEED)


def bimanual_grasp_guess(model, T, h):
    """``initial_guess`` factory ``(model, T, h) -> guess(t, x) -> q (T+1, nq)``: the box held
    where it is measured and the arms closing, over ``BOX_GUESS_CLOSE_STEPS`` knots, on a
    ``BOX_SQUEEZE`` grasp of it (:func:`grasp_ik`)."""
    qadr, _ = _free_joint(model, "box")
    arms = np.concatenate([arm_qpos_indices(model, s) for s, _ in _ARMS])

    def guess(t, x):
        q0 = np.asarray(x[:model.nq], dtype=float)
        g = grasp_ik(model, q0[qadr:qadr + 3], BOX_SQUEEZE, q0, height=BOX_GRASP_HEIGHT,
                     pitch=BOX_GRASP_PITCH)
        q = np.tile(q0, (T + 1, 1))
        ramp = np.minimum(1.0, np.arange(T + 1) / BOX_GUESS_CLOSE_STEPS)[:, None]
        q[:, arms] = q0[arms] + ramp * (g[arms] - q0[arms])
        return q

    return guess


def replay_schedule(model, result, x0) -> TargetSchedule:
    """Rebuild the planner's :class:`TargetSchedule` of a ``bimanual-box`` run.

    The nominal advanced the schedule at the first plan (state ``x0`` at ``result.time[0]``)
    and at every update ``u.t_state`` of ``result.updates``; the plant records the state at
    those times (update times are multiples of the record period), which are fed again here.
    """
    qadr, _ = _free_joint(model, "box")
    sched = TargetSchedule(BOX_TARGETS, qadr)
    t = np.asarray(result.time)
    if t.size == 0:
        return sched
    sched.update(float(t[0]), np.asarray(x0)[:model.nq])
    for u in result.updates:
        i = int(np.clip(np.searchsorted(t, u.t_state - 1e-9), 0, t.size - 1))
        sched.update(u.t_state, result.qpos[i])
    return sched


def _bimanual_initial(model, data, rng):
    mujoco.mj_resetDataKeyframe(model, data, mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home"))
    qadr, _ = _free_joint(model, "box")
    data.qpos[:qadr] += rng.uniform(-0.01, 0.01, qadr)  # the 14 arm joints come first
    data.qpos[qadr:qadr + 2] += rng.uniform(-0.005, 0.005, 2)
    data.qvel[:] = 0.0


def _box_final_reached(model, data):
    qadr, _ = _free_joint(model, "box")
    ep, eo = box_pose_error(data.qpos, BOX_TARGETS[-1], qadr)
    return ep < BOX_TOL_POS and eo < BOX_TOL_DEG


def box_success_factory(x0, seconds):
    """``success(model, data) -> bool`` of ``bimanual-box`` for one run (``x0``, ``seconds`` unused).

    True once the plant's box has reached every target of :data:`BOX_TARGETS` *in order*
    (each within ``BOX_TOL_POS`` / ``BOX_TOL_DEG``, checked at every call, i.e. at every
    recorded plant state) and is now at the last one: a box that was never lifted cannot
    succeed by being tipped onto its edge.  (The runner then asks for ``success_hold`` s.)
    """
    state = {"next": 0}

    def success(model, data):
        qadr, _ = _free_joint(model, "box")
        last = len(BOX_TARGETS) - 1
        while state["next"] < last:
            ep, eo = box_pose_error(data.qpos, BOX_TARGETS[state["next"]], qadr)
            if not (ep < BOX_TOL_POS and eo < BOX_TOL_DEG):
                break
            state["next"] += 1
        return state["next"] == last and _box_final_reached(model, data)

    return success


def _box_height(model, data):
    """Height [m] of the box centre above the table top."""
    qadr, _ = _free_joint(model, "box")
    return float(data.qpos[qadr + 2] - _TABLE_TOP)


def _bimanual_report(task, model, result, x0):
    sched = replay_schedule(model, result, x0)
    qadr, _ = _free_joint(model, "box")
    t = np.asarray(result.time)
    bounds = [float(t[0]) if t.size else 0.0] + [s[1] for s in sched.switches]
    ends = bounds[1:] + [float(t[-1]) + 1e-9 if t.size else 0.0]
    out = []
    for i, target in enumerate(BOX_TARGETS):
        row = {"name": target.name, "pos": list(target.pos), "quat": [round(c, 6) for c in target.quat],
               "active_from": None, "active_until": None, "reached": False, "reached_at": None,
               "switched_by": None, "end_error_m": None, "end_error_deg": None,
               "min_error_m": None, "min_error_deg": None}
        if i < len(bounds):
            # a phase includes the state at its switch (the one that was judged)
            sel = np.flatnonzero((t >= bounds[i] - 1e-9) & (t <= ends[i] + 1e-9)) if t.size else []
            if len(sel) == 0 and t.size:
                sel = [int(np.clip(np.searchsorted(t, bounds[i] - 1e-9), 0, t.size - 1))]
            errs = np.array([box_pose_error(result.qpos[j], target, qadr) for j in sel])
            ok = (errs[:, 0] < BOX_TOL_POS) & (errs[:, 1] < BOX_TOL_DEG)
            row.update(active_from=bounds[i], active_until=ends[i] if i < len(sched.switches) else None,
                       reached=bool(ok.any()),
                       reached_at=float(t[sel[int(np.argmax(ok))]]) if ok.any() else None,
                       switched_by=sched.switches[i][2] if i < len(sched.switches) else None,
                       end_error_m=float(errs[-1, 0]), end_error_deg=float(errs[-1, 1]),
                       min_error_m=float(errs[:, 0].min()), min_error_deg=float(errs[:, 1].min()))
        out.append(row)
    return {"targets": out, "targets_reached": int(sum(r["reached"] for r in out)),
            "tolerance_m": BOX_TOL_POS, "tolerance_deg": BOX_TOL_DEG, "budget_s": BOX_BUDGET,
            "final_box_pos": result.qpos[-1, qadr:qadr + 3].tolist() if t.size else None}


#: Table II (bi-manual): positions 0 / 0.1 (arms), 10 / 10 (box); velocities 0.1 / 1; R 0.001;
#: unactuated 1000 (penalty method: the paper found it as good as LM here, and cheaper)
_BOX_PAPER_WEIGHTS = dict(Qq=[0.0] * 14 + [10.0] * 6, Qf_q=[0.1] * 14 + [10.0] * 6, Qv=0.1, Qf_v=1.0,
                          R=0.001, unactuated_penalty=1e3)
#: Table I (bi-manual): k 1000 N/m, σ 0.5 cm, μ 0.2, v_s 0.05 m/s; only pairs with the box
_BOX_PAPER_CONTACT = dict(stiffness=1000.0, smoothing=0.005, friction=0.2, stiction_velocity=0.05,
                          dissipation_velocity=0.1, bodies=["box"])

BIMANUAL_BOX = IDTOTask(
    name="bimanual-box", model="bimanual",
    description="two arms slide, lift and balance a box on an edge (three targets) with IDTO MPC",
    horizon=20, time_step=0.05,
    # Table II, except the arm joint positions: BOX_ARM_WEIGHT running and terminal (module docstring).
    # ∂F/∂q in closed form only: the pairs it is not exact for are the box spheres against the
    # flanges' cylinder rims, 2–5 cm away (forces < 0.1 N); finite differences there (the default
    # "auto") made every iteration 2.8× slower for the same convergence
    # (docs/experiments/bimanual-box-idto.md)
    weights={**_BOX_PAPER_WEIGHTS, "Qq": [BOX_ARM_WEIGHT] * 14 + [10.0] * 6,
             "Qf_q": [BOX_ARM_WEIGHT] * 14 + [10.0] * 6, "contact_derivatives": "analytic"},
    # Table I, except μ = BOX_PLANNER_FRICTION
    contact={**_BOX_PAPER_CONTACT, "friction": BOX_PLANNER_FRICTION},
    nominal=_bimanual_grasp_nominal, initial_guess=bimanual_grasp_guess,
    initial_state=_bimanual_initial, success=_box_final_reached, success_factory=box_success_factory,
    metric=_box_height, success_hold=0.5, default_seconds=3 * BOX_BUDGET, kp=200.0, kd=20.0,
    lag=0.05, update_period=0.05, rate_target_hz=20.0, initial_iterations=30, report=_bimanual_report,
)


def box_paper_overrides() -> dict:
    """:func:`~contactopt.tasks.idto_tasks.run_idto_task` / ``build_idto_planner`` overrides of
    ``bimanual-box`` with the paper's settings: Table II weights (no running cost on the arms),
    Table I contact (μ 0.2), the arms' nominal at home, the default first guess (``q`` held)."""
    return dict(nominal=_bimanual_nominal, initial_guess=None, weights=dict(_BOX_PAPER_WEIGHTS),
                contact=dict(_BOX_PAPER_CONTACT))


def box_grasp_overrides(targets=None, grasp_targets=None, tip_targets=None) -> dict:
    """:func:`~contactopt.tasks.idto_tasks.run_idto_task` overrides of ``bimanual-box`` with the task's
    grasp settings on other ``targets`` (default :data:`BOX_TARGETS`; the schedule of the nominal
    only — the success test keeps :data:`BOX_TARGETS`): the nominal of
    :func:`make_bimanual_nominal` with ``grasp_targets`` (default ``BOX_GRASP_TARGETS``) and
    ``tip_targets`` (default ``BOX_TIP_TARGETS`` where ``targets`` is None, else none), the closing
    first guess (:func:`bimanual_grasp_guess`), arm position weights ``BOX_ARM_WEIGHT`` and the
    planner's μ = ``BOX_PLANNER_FRICTION``, box speed ``BOX_GRASP_SPEED`` (the defaults of the task)."""
    grasp_targets = BOX_GRASP_TARGETS if grasp_targets is None else grasp_targets
    if tip_targets is None:
        tip_targets = BOX_TIP_TARGETS if targets is None else ()
    return dict(
        nominal=make_bimanual_nominal(grasp_targets, targets=targets, tip_targets=tip_targets,
                                      speed=BOX_GRASP_SPEED),
        initial_guess=bimanual_grasp_guess, weights=dict(BIMANUAL_BOX.weights),
        contact=dict(BIMANUAL_BOX.contact))


TASKS = (HAND_BALL, BIMANUAL_BOX)

for _task in TASKS:
    register_task(_task.name, "idto", idto_runner(_task), model=_task.model, description=_task.description,
                  default_seconds=_task.default_seconds)
