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
  (the paper: "essential"), 10 Hz MPC (policy lag 0.1 s).  The planner's contact is
  restricted to pairs that involve the ball.  Reported: the ball's orientation error
  (degrees; initial, final, min and a 0.25 s-sampled series), whether the ball stayed in
  the hand, the update time.  Success: error below ``HAND_BALL_SUCCESS_DEG`` for 0.5 s
  with the ball in the hand.
* ``bimanual-box`` (model ``bimanual``, paper VI-A4 / VI-D4) — two 7-DoF arms move the
  550 g box through three target poses in sequence (:data:`BOX_TARGETS`): slide it
  along the table, lift it, put it down balanced on an edge.  The active target switches
  when it is reached (``BOX_TOL_POS`` m and ``BOX_TOL_DEG``° at an update) or after
  ``BOX_BUDGET`` s (:class:`TargetSchedule`).  The nominal moves the box from its
  measured pose toward the active target at bounded speed, the arms stay at home
  (Table II: no running cost on the arm positions).  Table I/II bimanual parameters (20
  steps of 0.05 s, k = 1000 N/m, σ = 5 mm, μ = 0.2, v_s = 0.05 m/s), penalty method,
  20 Hz MPC.  Reported per target: reached or not, when, and the pose error (m, °) at
  the end of its phase and the smallest during it.  Success: the last (edge) target
  reached and held for 0.5 s.

Status (measured 2026-11-21 on the shared 2-core machine, sync mode, seed 0 unless said;
``contactopt run hand-ball --planner idto --seconds 15 --json`` and
``contactopt run bimanual-box --planner idto --json``):

* ``hand-ball`` does **not** succeed.  The planner turns the ball about the palm normal
  (finger gaiting: the fingertips and the thumb push the ball's sides in turn), but the
  ball walks toward the open wrist side of the palm and rolls off it after 1.6–7 s in every
  configuration tried, before the 180° are done.  Seed 0, defaults: smallest error while
  in the hand 129° (``min_error_in_hand_deg``), ball lost at 2.4 s (it turns further while
  falling: ``min_error_deg`` 95°), final 161° after 15 s.  Seeds 0–2, 10 s: smallest
  in-hand error 95° / 106° / 132°, ball lost at 2.4 / 1.9 / 4.7 s.  Tried without a fix
  (3 seeds each): k = 300 and 1000 N/m, ball-position weight 100/1000, k_p = 3, two
  iterations per update, 20 Hz, spin 0.15–1 rad/s, rotation about x or y; the best single
  runs reached 44° (k_p = 3, seed 1) and 16° (2 iterations, a ball already falling).  Why:
  the one-iteration plans stay far from dynamically feasible — the sum of squared
  unactuated (ball) forces of the plan grows from 0.4 at the first plan to 10–20 N² as the
  ball moves, and a plan that expects the ball back at its home 0.1 s later while the
  plant's ball is 4 cm behind it is not one the plant can follow.  The
  MPC update takes ~30–60 ms median (18 Hz ≥ the paper's 10 Hz) when the machine is quiet.
* ``bimanual-box``: the slide is reached in ~0.6 s (the left arm pushes the box 7 cm; it
  stops 2.9 cm short of the 10 cm target, inside the 3 cm tolerance); the lift is **not**:
  the planner stays in a local minimum where the arms never squeeze (also open loop from
  the home state with 100 iterations, μ = 0.2–1.0, σ = 5 mm; with σ = 1 cm and μ = 1 the
  open-loop plan lifts 6.7 cm but the closed loop still does not); after the 4 s budget
  the box is tipped onto its edge (best 4.7 mm and 8.8°, not both at once) and held there
  ~3 s before it falls flat: the edge target is not reached (success False).  Seeds 1 and
  2 the same for slide and lift; seed 1 throws the box at the end.  Median update 60–140 ms
  (7–17 Hz, under the 20 Hz target) depending on the machine's load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import ParameterError, as_array
from . import register_task
from .idto_tasks import IDTOTask, idto_runner

__all__ = [
    "quat_multiply", "quat_conjugate", "quat_from_axis_angle", "orientation_error", "rotate_toward",
    "pose_ramp", "planner_rest_offset", "hand_ball_target", "hand_ball_error_deg", "ball_in_hand",
    "box_pose_error", "TargetSchedule", "BoxTarget", "replay_schedule",
    "HAND_BALL", "BIMANUAL_BOX", "BOX_TARGETS", "TASKS",
]


# =========================================================================== quaternions
# MuJoCo convention: q = (w, x, y, z), a free joint's qpos quaternion maps body to world.


def _quat(name: str, q) -> np.ndarray:
    q = as_array(name, q, (4,))
    n = float(np.linalg.norm(q))
    if not n > 0:
        raise ParameterError(f"{name}: a quaternion must be non-zero, got {q}")
    return q / n


def quat_multiply(a, b) -> np.ndarray:
    """Hamilton product ``a ⊗ b`` of two ``(4,)`` quaternions ``(w, x, y, z)`` (not normalized)."""
    a = as_array("a", a, (4,))
    b = as_array("b", b, (4,))
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
                     w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def quat_conjugate(q) -> np.ndarray:
    """Conjugate ``(w, −x, −y, −z)`` of a ``(4,)`` quaternion (the inverse of a unit one)."""
    q = as_array("q", q, (4,))
    return np.array([q[0], -q[1], -q[2], -q[3]])


def quat_from_axis_angle(axis, angle: float) -> np.ndarray:
    """Unit quaternion ``(4,)`` of a rotation by ``angle`` [rad] about ``axis`` ``(3,)`` (normalized here)."""
    axis = as_array("axis", axis, (3,))
    n = float(np.linalg.norm(axis))
    if not n > 0:
        raise ParameterError(f"axis must be non-zero, got {axis}")
    if not math.isfinite(angle):
        raise ParameterError(f"angle must be finite, got {angle!r}")
    return np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis / n])


def _relative(q, q_target):
    """``(angle [rad] in [0, π], unit axis (3,))`` of the world-frame rotation ``q_target ⊗ q⁻¹``."""
    r = quat_multiply(_quat("q_target", q_target), quat_conjugate(_quat("q", q)))
    if r[0] < 0:  # q and −q are the same rotation: take the short way
        r = -r
    s = float(np.linalg.norm(r[1:]))
    angle = 2.0 * math.atan2(s, r[0])
    axis = r[1:] / s if s > 1e-15 else np.array([1.0, 0.0, 0.0])
    return angle, axis


def orientation_error(q, q_target) -> float:
    """Angle [rad] in ``[0, π]`` of the rotation between two orientations ``(4,)`` (sign-invariant)."""
    return _relative(q, q_target)[0]


def rotate_toward(q, q_target, max_angle: float) -> np.ndarray:
    """``q (4,)`` turned toward ``q_target (4,)`` along the shortest arc by at most ``max_angle`` [rad] ≥ 0.

    Returns the unit quaternion ``exp(s · log(q_target ⊗ q⁻¹)) ⊗ q`` with the rotated angle
    ``s · angle = min(max_angle, angle)``; ``q_target`` itself (up to sign) once within reach.
    """
    if not (math.isfinite(max_angle) and max_angle >= 0):
        raise ParameterError(f"max_angle must be >= 0, got {max_angle!r}")
    q = _quat("q", q)
    angle, axis = _relative(q, q_target)
    step = min(max_angle, angle)
    out = quat_multiply(quat_from_axis_angle(axis, step), q)
    return out / np.linalg.norm(out)


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
    for k in range(T + 1):
        s = k * h
        q[k, qadr:qadr + 3] = pos + (d * min(1.0, speed * s / dist) if dist > 0 else 0.0)
        q[k, qadr + 3:qadr + 7] = rotate_toward(quat, target_quat, spin * s)
    v = np.zeros((T + 1, model.nv))
    for k in range(1, T + 1):
        mujoco.mj_differentiatePos(model, v[k], h, q[k - 1], q[k])
    v[0] = v[1]
    return q, v


# =========================================================================== hand-ball

#: axis (world frame) of the 180° rotation: x runs along the fingers, z is the palm normal
HAND_BALL_AXIS = np.array([0.0, 0.0, 1.0])
HAND_BALL_ANGLE = math.pi
HAND_BALL_SPIN = 0.3  # rad/s: the nominal's largest rotation rate (180° in ≥ 10.5 s)
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
    # 1 / 10 (ball); R 0.1; unactuated 1000 (unused: the constrained solver enforces Zᵀτ = 0)
    weights=dict(Qq=[0.01] * 16 + [10.0] * 6, Qf_q=[1.0] * 16 + [100.0] * 6,
                 Qv=[0.001] * 16 + [1.0] * 6, Qf_v=10.0, R=0.1, unactuated_penalty=1e3),
    contact=HAND_BALL_CONTACT,
    nominal=_hand_ball_nominal, initial_state=_hand_ball_initial, success=_hand_ball_success,
    metric=hand_ball_error_deg, success_hold=0.5, default_seconds=15.0, kp=1.0, kd=0.05,
    lag=0.1, update_period=0.1, rate_target_hz=10.0, initial_iterations=30, report=_hand_ball_report,
    # the paper: "the LM method was essential to obtaining good performance"
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
BOX_SPEED = 0.2  # m/s: the nominal's largest box speed
BOX_SPIN = 1.0  # rad/s: and rotation rate


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


def _bimanual_nominal(model, T, h):
    home = _home(model)
    qadr, _ = _free_joint(model, "box")

    def nominal(t, x):
        target = nominal.schedule.update(t, x[:model.nq])
        return pose_ramp(model, home, qadr, x[qadr:qadr + 3], x[qadr + 3:qadr + 7], target.pos, target.quat,
                         T, h, speed=BOX_SPEED, spin=BOX_SPIN)

    nominal.schedule = TargetSchedule(BOX_TARGETS, qadr)
    return nominal


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


BIMANUAL_BOX = IDTOTask(
    name="bimanual-box", model="bimanual",
    description="two arms slide, lift and balance a box on an edge (three targets) with IDTO MPC",
    horizon=20, time_step=0.05,
    # Table II (bi-manual): positions 0 / 0.1 (arms), 10 / 10 (box); velocities 0.1 / 1; R 0.001;
    # unactuated 1000 (penalty method: the paper found it as good as LM here, and cheaper)
    weights=dict(Qq=[0.0] * 14 + [10.0] * 6, Qf_q=[0.1] * 14 + [10.0] * 6, Qv=0.1, Qf_v=1.0, R=0.001,
                 unactuated_penalty=1e3),
    # Table I (bi-manual): k 1000 N/m, σ 0.5 cm, μ 0.2, v_s 0.05 m/s; only pairs with the box
    contact=dict(stiffness=1000.0, smoothing=0.005, friction=0.2, stiction_velocity=0.05,
                 dissipation_velocity=0.1, bodies=["box"]),
    nominal=_bimanual_nominal, initial_state=_bimanual_initial, success=_box_final_reached,
    metric=_box_height, success_hold=0.5, default_seconds=3 * BOX_BUDGET, kp=200.0, kd=20.0,
    lag=0.05, update_period=0.05, rate_target_hz=20.0, initial_iterations=30, report=_bimanual_report,
)

TASKS = (HAND_BALL, BIMANUAL_BOX)

for _task in TASKS:
    register_task(_task.name, "idto", idto_runner(_task), model=_task.model, description=_task.description,
                  default_seconds=_task.default_seconds)
