"""Goal scripting and session specs of the scripted GDD reaching sessions
(see :mod:`contactopt.solvers.gdd.sessions`).

:class:`Drag` (one scripted mouse drag of a spatial goal and its minimum-jerk schedule),
:class:`ReachSpec` (a whole session), the presets :func:`humanoid_reach_spec` and
:func:`hand_reach_spec`, and :func:`auto_reach_spec` / :func:`choose_goal_frames` for any model.
The model analysis they use (limbs and their reach, floating bases, support price, goal frames)
lives in :mod:`~contactopt.solvers.gdd.reach_model` and is re-exported here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import mujoco
import numpy as np

from ...errors import ParameterError, as_array, check_nonnegative, check_positive
from ...model import load_model, model_name, reset_to_keyframe
from .reach_model import (  # noqa: F401  (re-exported: their users import them from here)
    BALANCE_FACTOR,
    FLOOR_PENETRATION,
    REACH_FRACTION,
    SUPPORT_PRICE_REF,
    _actuated_trees,
    _composite_inertia,
    _floor_gap,
    _frame_body,
    _frame_pos,
    _is_descendant,
    _lower_root,
    _resolve_frame,
    _root_free_joint,
    _tree_info,
    _world_contact_bodies,
    balance_stiffness,
    choose_goal_frames,
    effective_mass,
    effort_scale,
    floating_root_dofs,
    limb_joints,
    limb_reach,
    reachable_goals,
    reachable_offset,
    support_price,
)

__all__ = [
    "Drag",
    "ReachSpec",
    "auto_reach_spec",
    "balance_stiffness",
    "choose_goal_frames",
    "effective_mass",
    "effort_scale",
    "floating_root_dofs",
    "hand_reach_spec",
    "humanoid_reach_spec",
    "limb_joints",
    "limb_reach",
    "reachable_goals",
    "reachable_offset",
    "support_price",
]


#: seconds before the first drag (the model settles into its contacts)
SETTLE = 0.2

#: what a drag's offset is relative to (:attr:`Drag.anchor`)
ANCHORS = ("start", "home")

#: what becomes the posture reference when a goal is released (:attr:`ReachSpec.posture_release`)
RELEASES = ("pose", "limb")


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
        frame's position when the drag starts (``anchor="start"``) or at the start of the
        session (``anchor="home"``).
      start: time the drag starts, s (≥ 0).
      drag: duration of the goal's motion from the frame to its final position, s (> 0).
      hold: time the goal stays at its final position before it is released, s (≥ 0).
      anchor: ``"start"`` (default): the offset is taken from where the frame is when the drag
        starts, as a mouse drag — drags that repeat add up, and a long session walks its goals
        out of reach; ``"home"``: from the frame's position at the start of the session (its
        rest position), so a repeated drag revisits the same goal however long the session.
        Either way the goal moves from where the frame is to its final position.
    """

    frame: str
    offset: tuple
    start: float
    drag: float = 0.4
    hold: float = 1.0
    anchor: str = "start"

    def __post_init__(self):
        if not isinstance(self.frame, str) or not self.frame:
            raise ParameterError(f"drag frame must be a site or body name, got {self.frame!r}")
        off = as_array(f"offset of the goal for {self.frame!r}", self.offset, (3,))
        object.__setattr__(self, "offset", tuple(float(x) for x in off))
        object.__setattr__(self, "start", check_nonnegative("drag start", self.start))
        object.__setattr__(self, "drag", check_positive("drag duration", self.drag))
        object.__setattr__(self, "hold", check_nonnegative("hold duration", self.hold))
        if self.anchor not in ANCHORS:
            raise ParameterError(f"drag anchor must be one of {ANCHORS}, got {self.anchor!r}")

    @property
    def end(self) -> float:
        """Release time ``start + drag + hold``, s."""
        return self.start + self.drag + self.hold

    def final(self, origin: np.ndarray, home: np.ndarray | None = None) -> np.ndarray:
        """Final goal position ``(3,)`` (m) of a drag that started at ``origin`` ``(3,)``;
        ``home`` ``(3,)`` is the frame's position at the start of the session (``anchor="home"``)."""
        if self.anchor == "home":
            if home is None:
                raise ParameterError(f"drag of {self.frame!r} is anchored at home: its home position is needed")
            return np.asarray(home, dtype=float) + np.asarray(self.offset)
        return np.asarray(origin, dtype=float) + np.asarray(self.offset)

    def goal_at(self, t: float, origin: np.ndarray, home: np.ndarray | None = None) -> np.ndarray:
        """Goal position ``(3,)`` (m) at time ``t`` for a drag that started at ``origin`` ``(3,)``
        (``home``: see :meth:`final`)."""
        s = _smooth((t - self.start) / self.drag)
        origin = np.asarray(origin, dtype=float)
        return origin + s * (self.final(origin, home) - origin)

    def active(self, t: float) -> bool:
        """True while the goal is held (``start ≤ t < end``)."""
        return self.start <= t < self.end


def _schedule(goals, seconds: float, *, drag: float, hold: float, gap: float, settle: float = SETTLE,
              anchor: str = "start"):
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
        drags.append(Drag(frame, tuple(offset), settle + k * period, drag, hold, anchor))
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
      posture_root_kp: posture stiffness of a floating base (the free joint at the root of an
        actuated tree: its position and attitude), 1/s² (damping ``2√kp``).  None (default):
        derived from the model, ``max(posture_kp, 4 |g| / h)`` with ``h`` the height of the
        tree's centre of mass above its floor contacts at the start (:func:`balance_stiffness`:
        twice the bandwidth of the inverted pendulum the standing model is), so the same
        default holds up a humanoid of any size and mass distribution.
      effort_scale: factor on every task weight (``ee_weight``, ``posture_weight``,
        ``com_weight``, ``damping_alpha``) against GDD's force cost.  None (default): derived
        from the model, :func:`effort_scale` (1 for a model that does not stand on
        ``support_bodies``; ≈ 5–8 for a humanoid), so the documented weights mean the same on
        any standing model.
      posture_release: what the posture term holds after a goal is released.  ``"pose"``
        (default): the whole pose at the release (the seed's "hold it in place") — on a
        standing model the stance then drifts by whatever it sagged during each reach, and over
        many reaches it crouches and falls; ``"limb"``: only the joints of the released limb
        (:func:`limb_joints`) take their pose at the release, the rest keeps the initial pose
        (the stance: root position and attitude, legs, trunk), so a long session holds it.
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
    posture_root_kp: float | None = None
    effort_scale: float | None = None
    posture_release: str = "pose"
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
        for name in ("posture_root_kp", "effort_scale"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive(name, getattr(self, name)))
        if self.posture_release not in RELEASES:
            raise ParameterError(f"posture_release must be one of {RELEASES}, got {self.posture_release!r}")
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

#: (frame, offset m from the hand's rest position) of the humanoid session: right hand up and
#: forward, left hand likewise, then both back down toward the body (the endpoints of the earlier
#: drag-relative script ``(-0.10, 0.05, -0.15)``, ``(0.05, -0.10, -0.15)`` after the first two
#: goals; anchored at home they repeat without adding up)
HUMANOID_GOALS = (
    ("right_hand", (0.20, -0.10, 0.20)),
    ("left_hand", (0.15, 0.20, 0.15)),
    ("right_hand", (0.10, -0.05, 0.05)),
    ("left_hand", (0.20, 0.10, 0.00)),
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
    pose is held 0.3 s.  Goals are anchored at the hands' rest positions (``anchor="home"``)
    and kept within :data:`REACH_FRACTION` of the arm's reach (:func:`reachable_offset`), and a
    released goal leaves the stance's posture reference at the initial pose
    (``posture_release="limb"``): the four goals repeat unchanged however long the session
    runs (see docs/experiments/gdd-long-sessions.md).

    Args:
      seconds: simulated duration, s (default 6).
      seed: 0 for the standard schedule; other seeds perturb the offsets by ±5 cm.
    """
    seconds = 6.0 if seconds is None else seconds
    lower_root = 0.003
    model = load_model("humanoid")
    data = _initial_data(model, "home", lower_root)
    supports = ("left_foot", "right_foot")
    goals = reachable_goals(model, data, _perturbed(HUMANOID_GOALS, seed, 0.05), supports)
    return ReachSpec(
        model="humanoid", name="humanoid-reach",
        drags=_schedule(goals, seconds, drag=0.4, hold=1.0, gap=0.3, anchor="home"),
        seconds=seconds, lower_root=lower_root,
        ee_weight=200.0, ee_stiffness=40.0, ee_max_acceleration=10.0,
        posture_weight=60.0, posture_kp=10.0, posture_release="limb",
        com_weight=1e4, com_stiffness=100.0,
        damping_alpha=0.1, damping_beta=5.0, reach_tolerance=0.05,
        fall_heights=(("pelvis", 0.6), ("torso", 0.75)),
        support_bodies=supports,
    )


def _initial_data(model: mujoco.MjModel, keyframe: str | None, lower_root: float) -> mujoco.MjData:
    """The data a session starts from (keyframe, free root lowered; ``ReachSession.reset``
    without a grasp), forward kinematics computed."""
    data = mujoco.MjData(model)
    reset_to_keyframe(model, data, keyframe)
    if lower_root > 0:
        j = _root_free_joint(model)
        if j >= 0:
            _lower_root(model, data, lower_root)
    mujoco.mj_forward(model, data)
    return data


def hand_reach_spec(seconds: float | None = None, seed: int = 0) -> ReachSpec:
    """The hand holding the ball, fingertip goals 2–3 cm away (``hand-reach``).

    End-effector weight 100 kg (stiffness 100 1/s², capped at 5 m/s²); a posture term of
    weight 200 holds the light fingers against gravity (GDD's force cost would otherwise
    let them sag; its spring is released on the dragged finger while its goal is held);
    goals are reached within 1 cm.  The fingers first close on the ball (0.3 s of
    torque, as a grasp).  A drag takes
    0.3 s, the goal is held 0.6 s, then the pose is held 0.2 s.  The ball must stay in
    the hand (dropped below 0.15 m, 5 cm under the palm surface, counts as a fall).  Goals are
    anchored at the fingertips' positions after the grasp (``anchor="home"``), so they repeat
    unchanged in a long session (drag-relative offsets added up and dropped the ball after 7 s).

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
        drags=_schedule(goals, seconds, drag=0.3, hold=0.6, gap=0.2, anchor="home"),
        seconds=seconds, grasp=0.3, grasp_ctrl=tuple(grasp),
        ee_weight=100.0, ee_stiffness=100.0, ee_max_acceleration=5.0,
        posture_weight=200.0, posture_kp=10.0, posture_free_chain=True, com_weight=0.0,
        damping_alpha=0.1, damping_beta=5.0, reach_tolerance=0.01,
        drop_heights=(("ball", 0.15),),
    )


def auto_reach_spec(model_path, seconds: float | None = None, seed: int = 0, *,
                    frames=None) -> ReachSpec:
    """A reach session for any model: goals on :func:`choose_goal_frames` (or ``frames``).

    Offsets have length ``clip(0.15 · extent, 2 cm, 20 cm)`` in a random upward
    direction (``seed``).  Weights come from the model.  A model with a free root that is
    actuated below it (a floating base) is first set down on the floor when it starts in
    the air (``lower_root``: the gap to the world's geoms plus :data:`FLOOR_PENETRATION`) and
    gets the humanoid's balance terms: posture weight 60 (mass metric, dimensionless) with
    its spring released on the dragged limb and the base's own gain from
    :func:`balance_stiffness`; the end effector the same 60 in its own metric (60 × the
    frames' effective mass, :func:`effective_mass` — the seed's unit-consistent weighting by
    the inverse end-effector inertia); the centre of mass over the supports with 180 kg per kg
    of the tree (its effective mass); a fall when the root drops below half its height; and
    :attr:`ReachSpec.effort_scale` left to the model.  Otherwise the weights scale with the
    mass of the actuated bodies (end effector 4 kg per kg) with a weak posture term.
    Free bodies without actuators (held objects) are "dropped" when they sink by half
    their height (at least 5 cm).

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
    lower = _floor_gap(model, data)
    if lower > 0:  # a floating base above the floor is set down on it (supports, fall heights)
        lower += FLOOR_PENETRATION
        _lower_root(model, data, lower)
        mujoco.mj_forward(model, data)
    if frames is None:
        frames = choose_goal_frames(model, data)
    else:
        frames = list(frames)
        for f in frames:
            _resolve_frame(model, f)
    actuated, _ = _tree_info(model)
    free_roots = [int(model.jnt_bodyid[j]) for j in range(model.njnt)
                  if model.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_FREE)]
    floating = [b for b in free_roots
                if any(actuated[c] and _is_descendant(model, c, b) for c in range(1, model.nbody))]
    # the mass the actuators move: the actuated bodies, and all of a floating base's tree (its
    # root moves with them) — the effective mass of its centre of mass, whichever body is the root
    moved = actuated.copy()
    for b in floating:
        moved |= model.body_rootid == b
    moved[0] = False
    mass = max(float(model.body_mass[moved].sum()), 1e-3)
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
        lower_root=lower,
        ee_weight=(POSTURE_WEIGHT * effective_mass(model, data, frames) if floating else 4.0 * mass),
        ee_stiffness=40.0, ee_max_acceleration=10.0,
        posture_weight=POSTURE_WEIGHT if floating else 0.05, posture_kp=10.0,
        posture_free_chain=bool(floating),
        com_weight=180.0 * mass if floating else 0.0, com_stiffness=100.0,
        damping_alpha=0.1, damping_beta=5.0, reach_tolerance=max(0.25 * scale, 0.005),
        fall_heights=fall, drop_heights=drop,
        support_bodies=tuple(bname(b) for b in support if bname(b)) if floating else (),
    )


#: dimensionless posture weight of a floating base's automatic session (mass metric)
POSTURE_WEIGHT = 60.0
