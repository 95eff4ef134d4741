"""Scripted goal-directed sessions: spatial goals dragged like a mouse (seed section VI).

In the seed's experiments a person picks a body segment and drags a spatial goal
for it with the mouse; goal-directed dynamics (GDD) then moves the model toward
the goal, and a damping term holds the pose in between.  A *session* scripts that
interaction:

* a :class:`Drag` moves the goal of one frame (a site or a body) from the frame's
  position at the start of the drag to ``position + offset`` along a minimum-jerk
  path (``drag`` seconds, like a mouse drag), keeps it there for ``hold`` seconds
  and then releases it;
* while a goal is held, an :class:`~contactopt.solvers.gdd.costs.EndEffectorAcceleration`
  term with a :class:`~contactopt.solvers.gdd.costs.SpringDamper` pulls the frame toward the
  dragged goal; between drags that term is switched off and the pose is held by the
  damping term ``(α/2)‖a + βv‖²_M`` and a posture term (a PD acceleration target
  toward the pose at the last release);
* a floating-base model keeps its centre of mass over its feet with a horizontal
  spring on the centre-of-mass acceleration (its height is only damped);
* every step is :func:`~contactopt.solvers.gdd.solver.gdd_step`: one MuJoCo evaluation,
  the GDD solve, the clamped controls applied and ``mj_step2``.

The session records the goal distance over time, falls (a monitored body below a
height), contacts of the support bodies, the per-step solver statistics and the
records a dataset needs (:mod:`contactopt.solvers.gdd.dataset`): ``(q, v, a, τ, ctrl)``
and the goal and posture reference of every step.

Presets: :func:`humanoid_reach_spec` (the humanoid stands with both feet on the
floor and reaches with its hands), :func:`hand_reach_spec` (fingertip goals on the
hand holding a ball) and :func:`auto_reach_spec` (any MJCF: goals on the 2–3 bodies
farthest along the kinematic tree).  :func:`run_session` runs a spec and can write an
MP4 (goal shown as a red sphere) and a PNG of the time series.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field

import mujoco
import numpy as np

from ...errors import ContactoptError, ParameterError, as_array, check_nonnegative, check_positive
from ...model import load_model, model_name, reset_to_keyframe
from ...progress import progress_bar
from .costs import (
    AccelerationTarget,
    CenterOfMassAcceleration,
    Cost,
    CostTerm,
    Damping,
    EndEffectorAcceleration,
    PostureTarget,
    SpringDamper,
)
from .solver import GDDSettings, GDDSolver, GDDStatus, gdd_step

__all__ = [
    "Drag",
    "ReachSpec",
    "ReachSession",
    "SessionResult",
    "humanoid_reach_spec",
    "hand_reach_spec",
    "auto_reach_spec",
    "choose_goal_frames",
    "run_session",
    "plot_session",
]

#: seconds before the first drag (the model settles into its contacts)
SETTLE = 0.2


# --------------------------------------------------------------------------- schedule


def _smooth(tau: float) -> float:
    """Minimum-jerk interpolation ``s(τ) = 10τ³ − 15τ⁴ + 6τ⁵`` on ``τ ∈ [0, 1]`` (clipped)."""
    tau = min(max(tau, 0.0), 1.0)
    return tau ** 3 * (10.0 - 15.0 * tau + 6.0 * tau ** 2)


@dataclass(frozen=True)
class Drag:
    """One scripted mouse drag of a spatial goal.

    Attributes:
      frame: name of a site or body of the model (a site is looked up first).
      offset: ``(3,)`` displacement of the goal in the world frame, m, relative to the
        frame's position when the drag starts.
      start: time the drag starts, s (≥ 0).
      drag: duration of the goal's motion from the frame to its final position, s (> 0).
      hold: time the goal stays at its final position before it is released, s (≥ 0).
    """

    frame: str
    offset: tuple
    start: float
    drag: float = 0.4
    hold: float = 1.0

    def __post_init__(self):
        if not isinstance(self.frame, str) or not self.frame:
            raise ParameterError(f"drag frame must be a site or body name, got {self.frame!r}")
        off = as_array(f"offset of the goal for {self.frame!r}", self.offset, (3,))
        object.__setattr__(self, "offset", tuple(float(x) for x in off))
        object.__setattr__(self, "start", check_nonnegative("drag start", self.start))
        object.__setattr__(self, "drag", check_positive("drag duration", self.drag))
        object.__setattr__(self, "hold", check_nonnegative("hold duration", self.hold))

    @property
    def end(self) -> float:
        """Release time ``start + drag + hold``, s."""
        return self.start + self.drag + self.hold

    def goal_at(self, t: float, origin: np.ndarray) -> np.ndarray:
        """Goal position ``(3,)`` (m) at time ``t`` for a drag that started at ``origin`` ``(3,)``."""
        s = _smooth((t - self.start) / self.drag)
        return origin + s * np.asarray(self.offset)

    def active(self, t: float) -> bool:
        """True while the goal is held (``start ≤ t < end``)."""
        return self.start <= t < self.end


def _schedule(goals, seconds: float, *, drag: float, hold: float, gap: float, settle: float = SETTLE):
    """Drags of ``goals`` (``(frame, offset)`` pairs, cycled) that fit into ``seconds``.

    Each drag takes ``drag + hold`` seconds followed by ``gap`` seconds of holding the
    pose.  When not even one full drag fits, the hold of the only drag is shortened
    (down to ``drag / 2``).

    Raises:
      ParameterError: ``seconds`` is too short for one drag.
    """
    seconds = check_positive("seconds", seconds)
    period = drag + hold + gap
    room = seconds - settle
    if room < drag + hold:
        short = room - drag
        if short < 0.5 * drag:
            raise ParameterError(f"a session needs at least {settle + 1.5 * drag:.2f} s "
                                 f"(one drag), got {seconds:g} s")
        hold = short
    n = max(1, int((room + gap + 1e-9) // period))
    drags = []
    for k in range(n):
        frame, offset = goals[k % len(goals)]
        drags.append(Drag(frame, tuple(offset), settle + k * period, drag, hold))
    return tuple(drags)


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class ReachSpec:
    """Everything that defines a scripted goal-directed session (JSON-serializable).

    Attributes:
      model: bundled model name or MJCF/URDF path.
      drags: the :class:`Drag` schedule (drags must not overlap in time).
      seconds: simulated duration, s.
      name: label (``"humanoid-reach"``, ...).
      keyframe: initial keyframe (``"home"`` falls back to ``qpos0``).
      lower_root: m to lower a free root joint at the start so the feet touch the floor.
      grasp: seconds of closing the fingers with ``grasp_ctrl`` before the session
        (the hand preset: its fingers touch the ball); 0 for none.
      grasp_ctrl: ``(nu,)`` controls used during ``grasp``.
      ee_weight: weight of the end-effector term, kg (the residual is m/s²).
      ee_stiffness: spring stiffness toward the dragged goal, 1/s² (critically damped).
      ee_max_acceleration: cap on the desired end-effector acceleration, m/s².
      posture_weight: weight of the posture PD acceleration target (mass metric, dimensionless).
      posture_kp: posture stiffness, 1/s² (damping ``2√kp``).
      posture_free_chain: while a goal is held, drop the posture spring (keep its damping)
        on the joints between the goal's frame and the nearest free joint or the world,
        so the posture term does not pull the dragged limb back.
      com_weight: weight of the horizontal centre-of-mass spring, kg (0: no term).
      com_stiffness: its stiffness, 1/s² (critically damped; vertical motion only damped).
      damping_alpha, damping_beta: the damping term α (dimensionless) and β (1/s).
      reach_tolerance: a goal counts as reached within this distance, m.
      fall_heights: ``(body, min height in m)``: the model has fallen when a body's origin is lower.
      drop_heights: ``(body, min height in m)`` of held objects: dropped when lower.
      support_bodies: bodies that should touch the floor (world geoms) throughout.
      solver: ``(name, value)`` overrides of :class:`~contactopt.solvers.gdd.solver.GDDSettings`.
    """

    model: str
    drags: tuple
    seconds: float
    name: str = "reach"
    keyframe: str | None = "home"
    lower_root: float = 0.0
    grasp: float = 0.0
    grasp_ctrl: tuple | None = None
    ee_weight: float = 200.0
    ee_stiffness: float = 40.0
    ee_max_acceleration: float = 10.0
    posture_weight: float = 60.0
    posture_kp: float = 10.0
    posture_free_chain: bool = False
    com_weight: float = 0.0
    com_stiffness: float = 100.0
    damping_alpha: float = 0.1
    damping_beta: float = 5.0
    reach_tolerance: float = 0.05
    fall_heights: tuple = ()
    drop_heights: tuple = ()
    support_bodies: tuple = ()
    solver: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "seconds", check_positive("seconds", self.seconds))
        drags = tuple(d if isinstance(d, Drag) else Drag(**d) for d in self.drags)
        order = sorted(drags, key=lambda d: d.start)
        for a, b in zip(order, order[1:]):
            if b.start < a.end - 1e-12:
                raise ParameterError(f"drags overlap: {a.frame!r} until {a.end:g} s and "
                                     f"{b.frame!r} from {b.start:g} s")
        object.__setattr__(self, "drags", tuple(order))
        for name in ("ee_weight", "posture_weight", "com_weight", "damping_alpha", "damping_beta",
                     "lower_root", "grasp"):
            check_nonnegative(name, getattr(self, name))
        for name in ("ee_stiffness", "ee_max_acceleration", "posture_kp", "com_stiffness",
                     "reach_tolerance"):
            check_positive(name, getattr(self, name))
        object.__setattr__(self, "fall_heights", tuple((str(b), float(h)) for b, h in self.fall_heights))
        object.__setattr__(self, "drop_heights", tuple((str(b), float(h)) for b, h in self.drop_heights))
        object.__setattr__(self, "support_bodies", tuple(str(b) for b in self.support_bodies))
        solver = self.solver.items() if isinstance(self.solver, dict) else self.solver
        object.__setattr__(self, "solver", tuple((str(k), v) for k, v in solver))
        if self.grasp_ctrl is not None:
            object.__setattr__(self, "grasp_ctrl", tuple(float(x) for x in as_array("grasp_ctrl", self.grasp_ctrl)))

    def to_json(self) -> str:
        """The spec as a JSON string (:meth:`from_json` inverts it)."""
        d = asdict(self)
        d["drags"] = [asdict(x) for x in self.drags]
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "ReachSpec":
        """Rebuild a spec from :meth:`to_json` output."""
        d = json.loads(text)
        d["drags"] = tuple(Drag(**x) for x in d["drags"])
        for key in ("fall_heights", "drop_heights", "solver"):
            d[key] = tuple(tuple(x) for x in d[key])
        return cls(**d)


# the two tasks of the seed's section VI --------------------------------------------------------

#: (frame, offset m) of the humanoid session: right hand up and forward, left hand likewise,
#: then both back down toward the body
HUMANOID_GOALS = (
    ("right_hand", (0.20, -0.10, 0.20)),
    ("left_hand", (0.15, 0.20, 0.15)),
    ("right_hand", (-0.10, 0.05, -0.15)),
    ("left_hand", (0.05, -0.10, -0.15)),
)

#: (frame, offset m) of the hand session: lift the index, curl the middle finger onto the
#: ball, lift the thumb, spread the ring finger
HAND_GOALS = (
    ("index_tip_site", (0.02, 0.0, 0.02)),
    ("middle_tip_site", (-0.015, 0.0, -0.02)),
    ("thumb_tip_site", (0.0, -0.02, 0.02)),
    ("ring_tip_site", (0.015, 0.015, 0.01)),
)


def _perturbed(goals, seed: int, scale: float):
    """The goals with offsets perturbed uniformly by ``±scale`` m (seed 0: unchanged)."""
    if not seed:
        return goals
    rng = np.random.default_rng(seed)
    return tuple((f, tuple(np.asarray(o) + rng.uniform(-scale, scale, 3))) for f, o in goals)


def humanoid_reach_spec(seconds: float | None = None, seed: int = 0) -> ReachSpec:
    """The humanoid standing on the floor, reaching with its hands (``humanoid-reach``).

    Goals move ±0.15–0.3 m from the hand; the centre of mass is held over the feet
    (horizontal spring, stiffness 100 1/s², weight 1e4 kg) and a posture term of
    weight 60 holds the pose.  A drag takes 0.4 s, the goal is held 1.0 s, then the
    pose is held 0.3 s.

    Args:
      seconds: simulated duration, s (default 6).
      seed: 0 for the standard schedule; other seeds perturb the offsets by ±5 cm.
    """
    seconds = 6.0 if seconds is None else seconds
    goals = _perturbed(HUMANOID_GOALS, seed, 0.05)
    return ReachSpec(
        model="humanoid", name="humanoid-reach",
        drags=_schedule(goals, seconds, drag=0.4, hold=1.0, gap=0.3),
        seconds=seconds, lower_root=0.003,
        ee_weight=200.0, ee_stiffness=40.0, ee_max_acceleration=10.0,
        posture_weight=60.0, posture_kp=10.0, com_weight=1e4, com_stiffness=100.0,
        damping_alpha=0.1, damping_beta=5.0, reach_tolerance=0.05,
        fall_heights=(("pelvis", 0.6), ("torso", 0.75)),
        support_bodies=("left_foot", "right_foot"),
    )


def hand_reach_spec(seconds: float | None = None, seed: int = 0) -> ReachSpec:
    """The hand holding the ball, fingertip goals 2–3 cm away (``hand-reach``).

    End-effector weight 100 kg (stiffness 100 1/s², capped at 5 m/s²); a posture term of
    weight 200 holds the light fingers against gravity (GDD's force cost would otherwise
    let them sag; its spring is released on the dragged finger while its goal is held);
    goals are reached within 1 cm.  The fingers first close on the ball (0.3 s of
    torque, as a grasp).  A drag takes
    0.3 s, the goal is held 0.6 s, then the pose is held 0.2 s.  The ball must stay in
    the hand (dropped below 0.15 m, 5 cm under the palm surface, counts as a fall).

    Args:
      seconds: simulated duration, s (default 5).
      seed: 0 for the standard schedule; other seeds perturb the offsets by ±5 mm.
    """
    seconds = 5.0 if seconds is None else seconds
    goals = _perturbed(HAND_GOALS, seed, 0.005)
    model = load_model("hand")
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in range(model.nu)]
    grasp = [0.0 if "abd" in n else 0.25 for n in names]
    grasp[names.index("thumb_rot")] = 0.2
    return ReachSpec(
        model="hand", name="hand-reach",
        drags=_schedule(goals, seconds, drag=0.3, hold=0.6, gap=0.2),
        seconds=seconds, grasp=0.3, grasp_ctrl=tuple(grasp),
        ee_weight=100.0, ee_stiffness=100.0, ee_max_acceleration=5.0,
        posture_weight=200.0, posture_kp=10.0, posture_free_chain=True, com_weight=0.0,
        damping_alpha=0.1, damping_beta=5.0, reach_tolerance=0.01,
        drop_heights=(("ball", 0.15),),
    )


# --------------------------------------------------------------------------- any model


def _tree_info(model: mujoco.MjModel):
    """``(actuated_body (nbody,) bool, depth (nbody,) int)``: whether a dof of the body or an
    ancestor is actuated, and the number of bodies from the world to the body."""
    from ...model import actuation_map

    act_dofs = set(actuation_map(model).actuated_dofs.tolist()) if model.nu else set()
    actuated = np.zeros(model.nbody, dtype=bool)
    depth = np.zeros(model.nbody, dtype=int)
    for b in range(1, model.nbody):
        p = int(model.body_parentid[b])
        depth[b] = depth[p] + 1
        own = set(np.flatnonzero(model.dof_bodyid == b).tolist())
        actuated[b] = actuated[p] or bool(own & act_dofs)
    return actuated, depth


def _world_contact_bodies(model, data) -> set[int]:
    """Bodies that touch a geom of the world body in ``data``'s current contacts."""
    out = set()
    for c in range(data.ncon):
        b1, b2 = (int(model.geom_bodyid[g]) for g in data.contact.geom[c])
        if b1 == 0 and b2 != 0:
            out.add(b2)
        elif b2 == 0 and b1 != 0:
            out.add(b1)
    return out


def choose_goal_frames(model: mujoco.MjModel, data: mujoco.MjData | None = None, count: int = 3) -> list[str]:
    """Up to ``count`` bodies to put goals on: the farthest along the kinematic tree.

    Candidates are bodies with an actuated dof among themselves and their ancestors,
    that do not touch the floor (world geoms) in ``data`` (the supports) and have a
    name.  Leaves come first, deepest first, ties broken by height above the floor
    (highest first) — so a humanoid gets its hands, a hand its fingertips.

    Raises:
      ParameterError: the model has no actuators or no such body.
    """
    if model.nu == 0:
        raise ParameterError(f"model {model_name(model)!r} has no actuators: goal-directed "
                             "dynamics needs at least one controllable actuator")
    if data is None:
        data = mujoco.MjData(model)
        reset_to_keyframe(model, data, "home")
        mujoco.mj_forward(model, data)
    actuated, depth = _tree_info(model)
    children = np.zeros(model.nbody, dtype=int)
    for b in range(1, model.nbody):
        children[model.body_parentid[b]] += 1
    support = _world_contact_bodies(model, data)
    cands = [b for b in range(1, model.nbody)
             if actuated[b] and b not in support and mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b)]
    if not cands:
        raise ParameterError(f"model {model_name(model)!r} has no named body moved by an actuator "
                             "to put a goal on")
    cands.sort(key=lambda b: (children[b] != 0, -depth[b], -float(data.xpos[b, 2])))
    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in cands[:count]]


def auto_reach_spec(model_path, seconds: float | None = None, seed: int = 0, *,
                    frames=None) -> ReachSpec:
    """A reach session for any model: goals on :func:`choose_goal_frames` (or ``frames``).

    Offsets have length ``clip(0.15 · extent, 2 cm, 20 cm)`` in a random upward
    direction (``seed``).  Weights scale with the mass of the actuated bodies; a
    model with a free root that is actuated below it (a floating base) gets the
    humanoid's balance terms (centre of mass over the supports, posture weight 60, fall
    when the root drops below half its height); otherwise a weak posture term.  Free
    bodies without actuators (held objects) are "dropped" when they sink by half their
    height (at least 5 cm).

    Args:
      model_path: bundled name or MJCF/URDF path (kept in the spec).
      seconds: simulated duration, s (default 5).
      seed: picks the offset directions.
      frames: site/body names to use instead of the automatic choice.

    Raises:
      ParameterError: no actuators, unknown frame, or no body to put a goal on.
    """
    seconds = 5.0 if seconds is None else seconds
    model = load_model(model_path)
    label = model_name(model)
    if model.nu == 0:
        raise ParameterError(f"model {label!r} has no actuators: goal-directed dynamics needs at "
                             "least one controllable actuator")
    data = mujoco.MjData(model)
    reset_to_keyframe(model, data, "home")
    mujoco.mj_forward(model, data)
    if frames is None:
        frames = choose_goal_frames(model, data)
    else:
        frames = list(frames)
        for f in frames:
            _resolve_frame(model, f)
    actuated, _ = _tree_info(model)
    mass = float(sum(model.body_mass[b] for b in range(1, model.nbody) if actuated[b]))
    mass = max(mass, 1e-3)
    free_roots = [int(model.jnt_bodyid[j]) for j in range(model.njnt)
                  if model.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_FREE)]
    floating = [b for b in free_roots
                if any(actuated[c] and _is_descendant(model, c, b) for c in range(1, model.nbody))]
    objects = [b for b in free_roots if b not in floating]
    bname = lambda b: mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) or ""
    extent = float(model.stat.extent)
    scale = float(np.clip(0.15 * extent, 0.02, 0.2))
    rng = np.random.default_rng(seed)
    goals = []
    for f in frames:
        direction = rng.normal(size=3)
        direction[2] = abs(direction[2]) + 0.5
        goals.append((f, tuple(scale * direction / np.linalg.norm(direction))))
    support = sorted(_world_contact_bodies(model, data))
    fall = tuple((bname(b), 0.5 * float(data.xpos[b, 2])) for b in floating
                 if bname(b) and data.xpos[b, 2] > 0.05)
    drop = tuple((bname(b), float(data.xpos[b, 2]) - max(0.05, 0.5 * float(data.xpos[b, 2])))
                 for b in objects if bname(b) and data.xpos[b, 2] > 0.05)
    return ReachSpec(
        model=str(model_path), name=f"{label}-reach",
        drags=_schedule(goals, seconds, drag=0.4, hold=1.0, gap=0.3),
        seconds=seconds,
        lower_root=0.0,
        ee_weight=4.0 * mass, ee_stiffness=40.0, ee_max_acceleration=10.0,
        posture_weight=60.0 if floating else 0.05, posture_kp=10.0,
        com_weight=180.0 * mass if floating else 0.0, com_stiffness=100.0,
        damping_alpha=0.1, damping_beta=5.0, reach_tolerance=max(0.25 * scale, 0.005),
        fall_heights=fall, drop_heights=drop,
        support_bodies=tuple(bname(b) for b in support if bname(b)) if floating else (),
    )


def _is_descendant(model, body: int, ancestor: int) -> bool:
    while body > 0:
        if body == ancestor:
            return True
        body = int(model.body_parentid[body])
    return False


def _resolve_frame(model, name: str) -> tuple[str, int]:
    """``("site", id)`` or ``("body", id)`` of ``name``; ParameterError names the candidates."""
    if not isinstance(name, str):
        raise ParameterError(f"goal frame must be a site or body name, got {name!r}")
    sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, name)
    if sid >= 0:
        return "site", sid
    bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
    if bid > 0:
        return "body", bid
    bodies = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in range(1, model.nbody)]
    sites = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SITE, s) for s in range(model.nsite)]
    known = [x for x in bodies + sites if x]
    shown = ", ".join(known[:24]) + (" ..." if len(known) > 24 else "")
    raise ParameterError(f"model {model_name(model)!r} has no site or body named {name!r} "
                         f"(it has: {shown or 'none'})")


# --------------------------------------------------------------------------- the session


_NO_DOFS = np.zeros(0, dtype=int)


class ReachSession:
    """A goal-directed session being run: model, data, cost terms, solver and schedule.

    Args:
      spec: the :class:`ReachSpec`.
      model: an already loaded model for ``spec.model`` (default: load it).
      extra_terms: additional :class:`~contactopt.solvers.gdd.costs.CostTerm` objects.

    Attributes:
      model, data, solver, cost: the simulation.
      qref: ``(nq,)`` posture reference (the pose at the last release).
      goal: ``(3,)`` current dragged goal, m (NaN without an active drag).
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
        # posture: PD toward qref (a view of the target's array, written in place)
        self.posture_target = PostureTarget(model, data.qpos, kp=spec.posture_kp)
        self.qref = self.posture_target.qref
        # dofs of trees without actuated dofs (free objects): no posture target
        actuated, _ = _tree_info(model)
        self._passive_dofs = np.flatnonzero(~actuated[model.dof_bodyid])
        self._kd = 2.0 * math.sqrt(spec.posture_kp)
        self._chain = {frame: _chain_dofs(model, kind, i) for frame, (kind, i) in self.frames.items()}
        self._free = _NO_DOFS
        self._gains_free = None
        self._update_posture_gains()
        self.ee_terms = {}
        for frame, (kind, _) in self.frames.items():
            target = SpringDamper(np.zeros(3), stiffness=spec.ee_stiffness,
                                  max_acceleration=spec.ee_max_acceleration)
            term = EndEffectorAcceleration(model, **{kind: frame}, target=target, weight=spec.ee_weight,
                                           name=f"goal({frame})")
            term.active = False
            self.ee_terms[frame] = term
        terms = list(self.ee_terms.values())
        self.posture = AccelerationTarget(model, self.posture_target, weight=spec.posture_weight,
                                          name="posture")
        terms.append(self.posture)
        self.com_anchor = data.subtree_com[0, :2].copy()
        self.com = None
        if spec.com_weight > 0:
            # horizontal spring to the anchor, damping on all three axes
            spring = SpringDamper(np.r_[self.com_anchor, 0.0], stiffness=spec.com_stiffness, axes=(1, 1, 0))
            self.com = CenterOfMassAcceleration(model, target=spring,
                                                weight=spec.com_weight, name="centre of mass")
            terms.append(self.com)
        self.damping = Damping(spec.damping_alpha, spec.damping_beta)
        terms.append(self.damping)
        for t in extra_terms:
            if not isinstance(t, CostTerm):
                raise ParameterError(f"extra term is not a CostTerm: {t!r}")
            terms.append(t)
        self.cost = Cost(*terms)
        self.active = -1
        self.goal = np.full(3, np.nan)
        self.origin = np.full(3, np.nan)

    def reset(self) -> None:
        """Initial state: keyframe, root lowered, optional grasp; forward kinematics computed."""
        m, d, spec = self.model, self.data, self.spec
        mujoco.mj_resetData(m, d)
        reset_to_keyframe(m, d, spec.keyframe)
        if spec.lower_root > 0:
            for j in range(m.njnt):
                if m.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_FREE) and m.body_parentid[m.jnt_bodyid[j]] == 0:
                    d.qpos[m.jnt_qposadr[j] + 2] -= spec.lower_root
                    break
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

    def _update_posture_gains(self) -> None:
        """Posture gains: ``kp (qref ⊖ q) − 2√kp v`` on every dof, damping only on the free
        chain of the dragged frame, nothing on the dofs of unactuated trees (free objects)."""
        if self._gains_free is self._free:
            return
        nv = self.model.nv
        kp = np.full(nv, self.spec.posture_kp)
        kd = np.full(nv, self._kd)
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
        set to the current pose (the damping and posture terms hold it).
        """
        t = self.data.time
        drags = self.spec.drags
        idx = -1
        for k, dr in enumerate(drags):
            if dr.active(t):
                idx = k
                break
        if idx != self.active:
            if self.active >= 0:
                self.ee_terms[drags[self.active].frame].active = False
                self.qref[:] = self.data.qpos
            self._free = _NO_DOFS
            if idx >= 0:
                self.origin = self.frame_position(drags[idx].frame)
                self.ee_terms[drags[idx].frame].active = True
                if self.spec.posture_free_chain:
                    self._free = self._chain[drags[idx].frame]
            self._update_posture_gains()
            if idx < 0:
                self.origin = np.full(3, np.nan)
                self.goal = np.full(3, np.nan)
            self.active = idx
        if idx >= 0:
            self.goal = drags[idx].goal_at(t, self.origin)
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


# --------------------------------------------------------------------------- results


@dataclass
class SessionResult:
    """Time series of a session (``N`` steps; per-step arrays hold the state *before* the step).

    Attributes:
      spec: the :class:`ReachSpec`.  model: model name.  timestep: h in s.
      time ``(N,)`` s; qpos ``(N, nq)``; qvel ``(N, nv)``; qacc ``(N, nv)`` the goal-directed
      acceleration a (m/s², rad/s²); qacc_forward ``(N, nv)``; ctrl ``(N, nu)`` applied controls;
      qfrc_actuator ``(N, nv)`` τ, the generalized actuator force (N, N·m);
      active ``(N,)`` index of the active drag (−1: none); goal ``(N, 3)`` dragged goal (NaN
      without one); qref ``(N, nq)`` posture reference; frame_pos ``(N, 3)`` position of the
      active frame; goal_distance ``(N,)`` m to the dragged goal; target_distance ``(N,)`` m
      to the drag's final position; heights ``(N, n_fall + n_drop)`` m of the monitored bodies;
      support ``(N, n_support)`` bool contacts of the support bodies.
      Solver statistics ``(N,)``: status, iterations, dual_updates, factorizations, nefc,
      ncon, physics_violation (m/s²), residual_gradient (N), solve_time (s), step_time (s).
      falls: ``[(time, body)]``; drops: ``[(time, body)]``.
      drag_origin ``(n_drags, 3)``: frame position when each drag started (NaN if never).
      error: message when the session stopped early on an error (the step was not taken).
      wall_time: s.  video_frames: frames written.
    """

    spec: ReachSpec
    model: str
    timestep: float
    arrays: dict
    falls: list = field(default_factory=list)
    drops: list = field(default_factory=list)
    drag_origin: np.ndarray | None = None
    error: str | None = None
    wall_time: float = 0.0
    video_frames: int = 0

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays")
        if arrays is not None and name in arrays:
            return arrays[name]
        raise AttributeError(name)

    @property
    def steps(self) -> int:
        """Number of steps taken."""
        return int(self.arrays["time"].shape[0])

    def goal_results(self) -> list[dict]:
        """Per drag: frame, start/end s, initial and final distance to the final target (m),
        the smallest distance, whether and when it came within ``reach_tolerance``."""
        out = []
        t = self.arrays["time"]
        dist = self.arrays["target_distance"]
        act = self.arrays["active"]
        tol = self.spec.reach_tolerance
        for k, dr in enumerate(self.spec.drags):
            sel = np.flatnonzero(act == k)
            row = {"frame": dr.frame, "offset": list(dr.offset), "start": dr.start, "end": dr.end,
                   "completed": bool(sel.size and t[sel[-1]] + self.timestep >= dr.end - 1e-9)}
            if sel.size:
                dd = dist[sel]
                hit = np.flatnonzero(dd <= tol)
                row.update(initial_distance=float(dd[0]), final_distance=float(dd[-1]),
                           min_distance=float(dd.min()), reached=bool(hit.size),
                           time_reached=float(t[sel[hit[0]]]) if hit.size else None)
            else:
                row.update(initial_distance=None, final_distance=None, min_distance=None,
                           reached=False, time_reached=None)
            out.append(row)
        return out

    def report(self, *, task: str | None = None, planner: str = "gdd", series_rate: float = 20.0) -> dict:
        """JSON-ready report (the task runner contract plus goal distances, falls and GDD stats).

        Keys: task, planner, model, success, time_to_success (s or None), seconds, steps,
        goals (per drag, see :meth:`goal_results`), goals_reached, goal_distance_{initial,final}_mean
        (m), falls, drops (lists of {time, body}), support_contact_fraction, gdd (iterations
        median/p95, dual updates, constraints, physics violation median/p95, residual gradient
        median/p95, converged fraction, µs per solve and per step), error, and a time series
        ``series`` (time, goal_distance, target_distance) sampled at ``series_rate`` Hz.
        """
        a = self.arrays
        goals = self.goal_results()
        completed = [g for g in goals if g["completed"]]
        ok = (self.error is None and not self.falls and not self.drops and bool(completed)
              and all(g["reached"] for g in completed))
        t_success = max(g["time_reached"] for g in completed) if ok else None
        n = self.steps
        stride = max(1, int(round(1.0 / (series_rate * self.timestep))))
        idx = np.arange(0, n, stride)

        def clean(x):
            return [None if not np.isfinite(v) else round(float(v), 6) for v in x]

        sup = a["support"]
        report = {
            "task": task or self.spec.name,
            "planner": planner,
            "model": self.model,
            "success": bool(ok),
            "time_to_success": t_success,
            "seconds": round(n * self.timestep, 9),
            "steps": n,
            "error": self.error,
            "goals_total": len(goals),
            "goals_completed": len(completed),
            "goals_reached": int(sum(g["reached"] for g in goals)),
            "goal_distance_initial_mean": _mean([g["initial_distance"] for g in completed]),
            "goal_distance_final_mean": _mean([g["final_distance"] for g in completed]),
            "goal_distance_min_mean": _mean([g["min_distance"] for g in completed]),
            "reach_tolerance": self.spec.reach_tolerance,
            "falls": [{"time": round(t, 6), "body": b} for t, b in self.falls],
            "drops": [{"time": round(t, 6), "body": b} for t, b in self.drops],
            "fell": bool(self.falls),
            "support_bodies": list(self.spec.support_bodies),
            "support_contact_fraction": (float(np.mean(np.all(sup, axis=1))) if sup.size and n else None),
            "gdd": gdd_statistics(a),
            "wall_time_s": self.wall_time,
            "realtime_factor": (n * self.timestep / self.wall_time) if self.wall_time > 0 else None,
            "goals": goals,
            "series": {"time": clean(a["time"][idx]), "goal_distance": clean(a["goal_distance"][idx]),
                       "target_distance": clean(a["target_distance"][idx]),
                       "active": [int(x) for x in a["active"][idx]]},
        }
        return report


def _mean(values):
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def gdd_statistics(a: dict) -> dict:
    """Median (and 95th percentile) solver statistics of per-step arrays (see :class:`SessionResult`).

    Returns keys ``iterations_median/p95``, ``dual_updates_median/p95``,
    ``constraints_median/p95`` (rows of J), ``physics_violation_median/p95`` (m/s²),
    ``residual_gradient_median/p95`` (N), ``converged_fraction``, ``solve_us_median/mean``
    and ``step_us_median/mean`` (µs of wall time: one solve, one whole :func:`gdd_step`; the
    first step, which loads the compiled kernels, is left out); empty for an empty session.
    """
    if a["time"].size == 0:
        return {}

    def pct(x, q):
        x = np.asarray(x, dtype=float)
        x = x[np.isfinite(x)]
        return float(np.percentile(x, q)) if x.size else None

    out = {}
    for key, name in (("iterations", "iterations"), ("dual_updates", "dual_updates"),
                      ("nefc", "constraints"), ("physics_violation", "physics_violation"),
                      ("residual_gradient", "residual_gradient")):
        out[f"{name}_median"] = pct(a[key], 50)
        out[f"{name}_p95"] = pct(a[key], 95)
    out["converged_fraction"] = float(np.mean(a["status"] == int(GDDStatus.CONVERGED)))
    # the first step loads the compiled kernels (a one-off cost): left out of the times
    first = 1 if a["time"].size > 1 else 0
    for key, name in (("solve_time", "solve_us"), ("step_time", "step_us")):
        x = a[key][first:]
        x = x[np.isfinite(x)]
        out[f"{name}_median"] = 1e6 * float(np.median(x)) if x.size else None
        out[f"{name}_mean"] = 1e6 * float(np.mean(x)) if x.size else None
    return out


# --------------------------------------------------------------------------- running


class _Recorder:
    """Preallocated per-step arrays of a session."""

    def __init__(self, model, n, n_mon, n_sup):
        nq, nv, nu = model.nq, model.nv, model.nu
        f = lambda *shape: np.full(shape, np.nan)
        self.a = {
            "time": np.zeros(n), "qpos": f(n, nq), "qvel": f(n, nv), "qacc": f(n, nv),
            "qacc_forward": f(n, nv), "ctrl": f(n, nu), "qfrc_actuator": f(n, nv),
            "active": np.full(n, -1, dtype=np.int32), "goal": f(n, 3), "qref": f(n, nq),
            "frame_pos": f(n, 3), "goal_distance": f(n), "target_distance": f(n),
            "heights": f(n, n_mon), "support": np.zeros((n, n_sup), dtype=bool),
            "status": np.zeros(n, dtype=np.int8), "iterations": np.zeros(n, dtype=np.int32),
            "dual_updates": np.zeros(n, dtype=np.int32), "factorizations": np.zeros(n, dtype=np.int32),
            "nefc": np.zeros(n, dtype=np.int32), "ncon": np.zeros(n, dtype=np.int32),
            "physics_violation": f(n), "residual_gradient": f(n), "solve_time": f(n), "step_time": f(n),
        }

    def trimmed(self, k):
        return {key: v[:k].copy() for key, v in self.a.items()}


def run_session(spec: ReachSpec, *, video=None, plot=None, progress: bool | None = None,
                model: mujoco.MjModel | None = None, extra_terms=(), width: int = 640,
                height: int = 480, fps: float = 30.0) -> SessionResult:
    """Run a scripted goal-directed session.

    Every step: activate/move/release the goals (:meth:`ReachSession.update_goals`),
    :func:`~contactopt.solvers.gdd.solver.gdd_step`, then check falls, drops and supports.  An
    error of the step (non-finite cost or state, a failed solve) stops the session
    *before* that step is taken — the simulation never steps with a non-finite control —
    and is reported in ``result.error``.

    Args:
      spec: the :class:`ReachSpec`.
      video: optional ``.mp4`` path: the model's ``video`` camera (else a tracking camera),
        the active goal drawn as a red sphere, ``fps`` frames per simulated second
        (written atomically).
      plot: optional ``.png`` path for :func:`plot_session`.
      progress: progress bar (None: only on a terminal).
      model: an already loaded model for ``spec.model``.
      extra_terms: additional cost terms.
      width, height: video frame size in pixels (even).

    Returns:
      :class:`SessionResult`.

    Raises:
      ParameterError: bad spec (unknown frame, no actuators, ...), bad output paths.
      RenderError: a video was asked for and no OpenGL backend works.
    """
    from ...simulate import frame_stride

    for flag, path, suffix in (("video", video, ".mp4"), ("plot", plot, ".png")):
        if path is not None:
            from pathlib import Path

            p = Path(path)
            if p.suffix.lower() != suffix:
                raise ParameterError(f"{flag} path must end in {suffix}, got {p}")
            if not p.parent.exists():
                raise ParameterError(f"{flag}: directory {p.parent} does not exist")
    session = ReachSession(spec, model=model, extra_terms=extra_terms)
    m, d = session.model, session.data
    h = float(m.opt.timestep)
    n = int(round(spec.seconds / h))
    if n < 1:
        raise ParameterError(f"session of {spec.seconds:g} s is shorter than one step of {h:g} s")
    rec = _Recorder(m, n, len(session.fall_ids) + len(session.drop_ids), len(session.support_ids))
    a = rec.a
    falls, drops = [], []
    fallen_seen, dropped_seen = set(), set()
    origins = np.full((len(spec.drags), 3), np.nan)
    error = None
    stride = frame_stride(h, fps) if video is not None else 0
    frames = 0
    writer = renderer = None
    k = 0
    start = time.perf_counter()
    try:
        if video is not None:
            from ...render import VideoWriter

            writer = VideoWriter(video, fps=1.0 / (stride * h)).__enter__()
            renderer = _GoalRenderer(m, width, height)
        with progress_bar(total=n, desc=spec.name, unit="step", enable=progress) as bar:
            for k in range(n):
                if k:  # positions of the new state (mj_step2 leaves those of the previous one)
                    mujoco.mj_kinematics(m, d)
                session.update_goals()
                act = session.active
                if act >= 0 and not np.isfinite(origins[act, 0]):
                    origins[act] = session.origin
                if stride and k % stride == 0:
                    writer.append(renderer.render(d, session.goal if act >= 0 else None))
                    frames += 1
                a["time"][k] = d.time
                a["qpos"][k] = d.qpos
                a["qvel"][k] = d.qvel
                a["active"][k] = act
                a["goal"][k] = session.goal
                a["qref"][k] = session.qref
                if act >= 0:
                    pos = session.frame_position(spec.drags[act].frame)
                    a["frame_pos"][k] = pos
                    a["goal_distance"][k] = np.linalg.norm(pos - session.goal)
                    final = origins[act] + np.asarray(spec.drags[act].offset)
                    a["target_distance"][k] = np.linalg.norm(pos - final)
                monitored = session.fall_ids + session.drop_ids
                if monitored:
                    a["heights"][k] = [d.xpos[i, 2] for _, i, _ in monitored]
                for b, i, hmin in session.fall_ids:
                    if d.xpos[i, 2] < hmin and b not in fallen_seen:
                        fallen_seen.add(b)
                        falls.append((float(d.time), b))
                for b, i, hmin in session.drop_ids:
                    if d.xpos[i, 2] < hmin and b not in dropped_seen:
                        dropped_seen.add(b)
                        drops.append((float(d.time), b))
                t0 = time.perf_counter()
                try:
                    res = gdd_step(m, d, session.cost, session.solver)
                except ContactoptError as exc:
                    error = f"t = {d.time:.4f} s: {exc}"
                    break
                a["step_time"][k] = time.perf_counter() - t0
                a["qacc"][k] = res.qacc
                a["qacc_forward"][k] = res.qacc_forward
                a["ctrl"][k] = d.ctrl
                a["qfrc_actuator"][k] = d.qfrc_actuator
                a["status"][k] = int(res.status)
                a["iterations"][k] = res.iterations
                a["dual_updates"][k] = res.dual_updates
                a["factorizations"][k] = res.factorizations
                a["nefc"][k] = res.nefc
                a["ncon"][k] = res.ncon
                a["physics_violation"][k] = res.physics_violation
                a["residual_gradient"][k] = res.residual_gradient
                a["solve_time"][k] = res.solve_time
                if session.support_ids:  # contacts of mj_step1: those of the state before the step
                    a["support"][k] = session.support_contacts()
                bar.update(1)
            else:
                k = n
            if stride and error is None and n % stride == 0:
                mujoco.mj_forward(m, d)
                writer.append(renderer.render(d, None))
                frames += 1
    except BaseException as exc:
        if writer is not None:
            writer.__exit__(type(exc), exc, None)
            writer = None
        raise
    finally:
        if renderer is not None:
            renderer.close()
    if writer is not None:
        writer.__exit__(None, None, None)
    result = SessionResult(spec=spec, model=model_name(m), timestep=h, arrays=rec.trimmed(k),
                           falls=falls, drops=drops, drag_origin=origins, error=error,
                           wall_time=time.perf_counter() - start, video_frames=frames)
    if plot is not None:
        plot_session(result, plot)
    return result


# --------------------------------------------------------------------------- video and plots


def _goal_renderer_class():
    from ...render import OffscreenRenderer

    class GoalRenderer(OffscreenRenderer):
        """:class:`~contactopt.render.OffscreenRenderer` that also draws the goal as a red sphere."""

        def render(self, data, goal=None):  # noqa: D401 - same contract as the base class
            if goal is None or not np.all(np.isfinite(goal)):
                return super().render(data)
            self._gl.make_current()
            if self._track_body >= 0:
                self.camera.lookat[:] = data.subtree_com[self._track_body]
            mujoco.mjv_updateScene(self.model, data, self._option, None, self.camera,
                                   mujoco.mjtCatBit.mjCAT_ALL, self._scene)
            scn = self._scene
            if scn.ngeom < scn.maxgeom:
                radius = max(0.01, 0.012 * float(self.model.stat.extent))
                mujoco.mjv_initGeom(scn.geoms[scn.ngeom], int(mujoco.mjtGeom.mjGEOM_SPHERE),
                                    np.array([radius, 0.0, 0.0]), np.asarray(goal, dtype=float),
                                    np.eye(3).reshape(9), np.array([0.9, 0.1, 0.1, 0.8], dtype=np.float32))
                scn.ngeom += 1
            mujoco.mjr_render(self._viewport, scn, self._context)
            mujoco.mjr_readPixels(self._rgb, None, self._viewport, self._context)
            return np.flipud(self._rgb).copy()

    return GoalRenderer


def _GoalRenderer(model, width, height):
    return _goal_renderer_class()(model, width, height, camera="video")


def plot_session(result: SessionResult, path) -> None:
    """PNG of a session: goal distance, monitored heights and support contacts, GDD
    iterations and constraints, physics violation and residual gradient, µs per solve.

    Shaded spans mark the drags (goal held); the dashed line is ``reach_tolerance``.
    """
    from ...plots import new_figure, save_figure

    a = result.arrays
    t = a["time"]
    fig, axes = new_figure(5, row_height=2.1)
    spec = result.spec
    title = f"{spec.name}: goal-directed dynamics, h = {result.timestep * 1e3:g} ms"
    if result.falls:
        title += f" — FELL at {result.falls[0][0]:.2f} s"
    axes[0, 0].set_title(title)
    ax = axes[0, 0]
    ax.plot(t, a["goal_distance"], lw=1.2, label="to dragged goal")
    ax.plot(t, a["target_distance"], lw=1.2, label="to final goal")
    ax.axhline(spec.reach_tolerance, color="gray", lw=0.8, ls="--", label="tolerance")
    ax.set_ylabel("goal distance [m]")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[1, 0]
    names = [b for b, _ in spec.fall_heights] + [b for b, _ in spec.drop_heights]
    lims = [hh for _, hh in spec.fall_heights] + [hh for _, hh in spec.drop_heights]
    for j, (b, lim) in enumerate(zip(names, lims)):
        line, = ax.plot(t, a["heights"][:, j], lw=1.2, label=f"{b} height")
        ax.axhline(lim, color=line.get_color(), lw=0.8, ls=":")
    if a["support"].shape[1]:
        ax2 = ax.twinx()
        ax2.step(t, a["support"].sum(axis=1), where="post", color="tab:purple", lw=0.8,
                 label="supports on floor")
        ax2.set_ylabel("supports in contact", fontsize=8)
        ax2.set_ylim(-0.1, a["support"].shape[1] + 0.5)
    ax.set_ylabel("height [m]")
    if names:
        ax.legend(loc="lower left", fontsize=7)
    ax = axes[2, 0]
    ax.plot(t, a["iterations"], lw=0.8, label="iterations")
    ax.plot(t, a["dual_updates"], lw=0.8, label="dual updates")
    ax.plot(t, a["nefc"], lw=0.8, label="constraints")
    ax.set_ylabel("count")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[3, 0]
    ax.semilogy(t, np.maximum(a["physics_violation"], 1e-17), lw=0.8, label="physics violation [m/s²]")
    ax.semilogy(t, np.maximum(a["residual_gradient"], 1e-17), lw=0.8, label="residual gradient [N]")
    ax.set_ylabel("error (floor 1e-17)")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[4, 0]
    ax.plot(t[1:], 1e6 * a["solve_time"][1:], lw=0.6, label="GDD solve")
    ax.plot(t[1:], 1e6 * a["step_time"][1:], lw=0.6, label="whole step")
    finite = a["step_time"][1:][np.isfinite(a["step_time"][1:])]
    if finite.size:  # the first step (loading the compiled kernels) is not shown
        ax.set_ylim(0.0, 1.5e6 * float(np.percentile(finite, 99.5)))
    ax.set_ylabel("µs per step")
    ax.set_xlabel("time [s]  (shaded: goal held)")
    ax.legend(loc="upper right", fontsize=7)
    for row in axes[:, 0]:
        row.grid(alpha=0.3)
        for dr in spec.drags:
            row.axvspan(dr.start, min(dr.end, spec.seconds), color="tab:orange", alpha=0.08)
    save_figure(fig, path)
