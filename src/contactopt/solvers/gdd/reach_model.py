"""Model analysis for the scripted GDD reaching sessions (:mod:`contactopt.solvers.gdd.reach_spec`,
:mod:`contactopt.solvers.gdd.reach_session`): the limb that carries a goal frame and its reach
(:func:`limb_joints`, :func:`limb_reach`, :func:`reachable_offset`, :func:`reachable_goals`),
floating bases and their balance stiffness, GDD's support price and the effort scale of a
session, the choice of goal frames on any model (:func:`choose_goal_frames`), the floor gap of
a model that starts in the air, the frames' effective mass and the lookup of a site or body."""

from __future__ import annotations

import itertools

import mujoco
import numpy as np

from ...errors import ParameterError
from ...model import model_name, reset_to_keyframe

#: a goal anchored at home is kept within this fraction of its limb's reach from the limb's
#: base (:func:`reachable_offset`): a fully stretched limb is singular and pulls the body along
REACH_FRACTION = 0.85


# --------------------------------------------------------------------------- limbs and their reach


def limb_joints(model: mujoco.MjModel, body: int, others=()) -> list[int]:
    """Joints of the limb that carries ``body``, from the body up (outboard first): the joints of
    ``body`` and its ancestors up to, not including, the first ancestor whose subtree holds one
    of the ``others`` (bodies of other goal frames, supports) or that has a free joint."""
    others = [int(b) for b in others if int(b) != int(body)]
    joints = []
    b = int(body)
    while b > 0:
        if any(_is_descendant(model, o, b) for o in others):
            break
        jnts = list(range(model.body_jntadr[b], model.body_jntadr[b] + model.body_jntnum[b]))
        if any(model.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_FREE) for j in jnts):
            break
        joints.extend(reversed(jnts))
        b = int(model.body_parentid[b])
    return joints


def _frame_body(model, frame: str) -> int:
    kind, i = _resolve_frame(model, frame)
    return int(model.site_bodyid[i]) if kind == "site" else int(i)


def _frame_pos(model, data, frame: str) -> np.ndarray:
    kind, i = _resolve_frame(model, frame)
    return (data.site_xpos[i] if kind == "site" else data.xpos[i]).copy()


def limb_reach(model: mujoco.MjModel, data: mujoco.MjData, frame: str, others=()) -> tuple[np.ndarray, float]:
    """``(base (3,), reach m)`` of the limb that moves ``frame`` (:func:`limb_joints`): the anchor of
    its innermost joint, and the length of the chain of joint anchors from there to the frame (the
    farthest the frame gets from the base with the limb stretched).  Without limb joints: the frame's
    position and 0."""
    pos = _frame_pos(model, data, frame)
    joints = limb_joints(model, _frame_body(model, frame), others)
    if not joints:
        return pos, 0.0
    points = [data.xanchor[j].copy() for j in reversed(joints)] + [pos]
    reach = float(sum(np.linalg.norm(b - a) for a, b in itertools.pairwise(points)))
    return points[0], reach


def reachable_offset(model: mujoco.MjModel, data: mujoco.MjData, frame: str, offset, others=(),
                     fraction: float = REACH_FRACTION) -> tuple:
    """``offset`` (m, from the frame's position in ``data``) moved toward the base of the frame's
    limb until the goal lies within ``fraction`` of the limb's reach (:func:`limb_reach`) from it."""
    home = _frame_pos(model, data, frame)
    goal = home + np.asarray(offset, dtype=float)
    base, reach = limb_reach(model, data, frame, others)
    r = float(np.linalg.norm(goal - base))
    if reach > 0 and r > fraction * reach:
        goal = base + (goal - base) * (fraction * reach / r)
    return tuple(float(x) for x in goal - home)


def reachable_goals(model: mujoco.MjModel, data: mujoco.MjData, goals, supports=(),
                    fraction: float = REACH_FRACTION) -> tuple:
    """``(frame, offset)`` goals anchored at the frames' positions in ``data`` (their home), each
    offset kept within reach (:func:`reachable_offset`); the limbs end below the other goal frames'
    and the ``supports``' common ancestors."""
    frames = {f for f, _ in goals}
    bodies = {f: _frame_body(model, f) for f in frames}
    sup = [int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, b)) for b in supports]
    out = []
    for f, off in goals:
        others = [bodies[g] for g in frames if g != f] + [b for b in sup if b > 0]
        out.append((f, reachable_offset(model, data, f, off, others, fraction)))
    return tuple(out)


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


def _actuated_trees(model: mujoco.MjModel) -> np.ndarray:
    """``(nbody,)`` bool: whether the kinematic tree of the body (the subtree of its root,
    ``body_rootid``) has an actuated dof — False for free objects and the world."""
    actuated, _ = _tree_info(model)
    tree = np.zeros(model.nbody, dtype=bool)
    roots = model.body_rootid
    for b in np.flatnonzero(actuated):
        tree[roots[b]] = True
    out = tree[roots]
    out[0] = False
    return out


#: the floating base's posture bandwidth in units of the standing pendulum's √(g/h)
#: (kp = BALANCE_FACTOR · g / h: twice the pendulum's rate of falling)
BALANCE_FACTOR = 4.0


def floating_root_dofs(model: mujoco.MjModel) -> np.ndarray:
    """Dofs of the free joints at the root of actuated trees (floating bases), sorted."""
    trees = _actuated_trees(model)
    dofs = []
    for j in range(model.njnt):
        b = int(model.jnt_bodyid[j])
        if (model.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_FREE) and model.body_parentid[b] == 0
                and trees[b]):
            adr = int(model.jnt_dofadr[j])
            dofs.extend(range(adr, adr + 6))
    return np.array(dofs, dtype=int)


def balance_stiffness(model: mujoco.MjModel, data: mujoco.MjData) -> float | None:
    """``BALANCE_FACTOR · |g| / h`` (1/s²) for a floating base standing on the world's geoms.

    ``h`` is the height of the floating tree's centre of mass above its lowest contact with
    a world geom in ``data`` (positions and contacts current): a standing model falls like an
    inverted pendulum at the rate ``√(g/h)``, and a PD that holds its base must be faster.
    None without a floating base or without such a contact."""
    dofs = floating_root_dofs(model)
    if not dofs.size:
        return None
    root = int(model.dof_bodyid[dofs[0]])
    low = None
    for c in range(data.ncon):
        b1, b2 = (int(model.geom_bodyid[g]) for g in data.contact.geom[c])
        if (b1 == 0) != (b2 == 0) and int(model.body_rootid[b1 or b2]) == root:
            z = float(data.contact.pos[c, 2])
            low = z if low is None else min(low, z)
    if low is None:
        return None
    h = float(data.subtree_com[root, 2]) - low
    g = float(np.linalg.norm(model.opt.gravity))
    if not (h > 0 and g > 0):
        return None
    return BALANCE_FACTOR * g / h


def _composite_inertia(model, data, bodies, axis, anchor) -> float:
    """Inertia (kg·m²) of ``bodies`` rotating rigidly about the world ``axis`` through ``anchor``."""
    total = 0.0
    for b in bodies:
        r = data.xipos[b] - anchor
        r = r - axis * float(r @ axis)
        R = data.ximat[b].reshape(3, 3)
        ax = R.T @ axis
        total += float(model.body_mass[b]) * float(r @ r) + float(ax @ (model.body_inertia[b] * ax))
    return total


#: the support price (:func:`support_price`) the documented weights of a standing model are
#: quoted at: the task weights of a model with support price κ are multiplied by
#: ``max(1, κ / SUPPORT_PRICE_REF)`` (:func:`effort_scale`).  Empirical (see
#: docs/experiments/gdd-unseen-humanoid.md): standing humanoids have κ ≈ 1600–2500 (scales
#: ≈ 5–8); under a posture term alone scales ≥ 5 held every standing model tried for 8 s,
#: 3 let the light-footed test biped fall after 3 s, 1 (the seed's weights) within 2 s.
SUPPORT_PRICE_REF = 300.0


def support_price(model: mujoco.MjModel, data: mujoco.MjData, supports) -> float:
    """How much GDD's force cost overprices the torques that hold a standing model up (≥ 1).

    The regulariser ``½ τᵀ M⁻¹ τ`` prices the torque of a dof by the inertia outboard of it: a
    light foot makes an ankle torque look as costly as spinning the foot, while with the foot
    on the floor that torque turns the whole rest of the body.  For an actuated dof ``i`` on
    the chain from a support body up to the floating base the price is off by
    ``κ_i = (M⁻¹)_ii C_i``, ``C_i`` the composite inertia of the bodies it turns when its
    support holds (the tree less the subtree of the dof's body) about its axis; returns
    ``max_i κ_i`` (1 without a floating base or supports).  ``data`` holds the positions and
    the inertia (after ``mj_forward``)."""
    from ...model import actuation_map
    from .problem import _full_inertia

    roots = floating_root_dofs(model)
    if not roots.size or not len(supports) or not model.nu:
        return 1.0
    nv = model.nv
    M = np.zeros((nv, nv))
    _full_inertia(model, data, M)
    minv = np.diag(np.linalg.inv(M))
    actuated = set(actuation_map(model).actuated_dofs.tolist())
    root_bodies = {int(model.dof_bodyid[i]) for i in roots}
    price = 1.0
    for s in supports:
        root = int(model.body_rootid[s])
        if root not in root_bodies:
            continue
        tree = np.flatnonzero(model.body_rootid == root)
        p = int(s)
        while p != root and p > 0:
            rest = [int(b) for b in tree if not _is_descendant(model, int(b), p)]
            for i in np.flatnonzero(model.dof_bodyid == p):
                if int(i) not in actuated:
                    continue
                j = int(model.dof_jntid[i])
                jt = int(model.jnt_type[j])
                if jt == int(mujoco.mjtJoint.mjJNT_HINGE):
                    C = _composite_inertia(model, data, rest, data.xaxis[j], data.xanchor[j])
                elif jt == int(mujoco.mjtJoint.mjJNT_SLIDE):
                    C = float(model.body_mass[rest].sum())
                elif jt == int(mujoco.mjtJoint.mjJNT_BALL):
                    axis = data.xmat[p].reshape(3, 3)[:, int(i - model.jnt_dofadr[j])]
                    C = _composite_inertia(model, data, rest, axis, data.xanchor[j])
                else:
                    continue
                price = max(price, float(minv[i]) * C)
            p = int(model.body_parentid[p])
    return price


def effort_scale(model: mujoco.MjModel, data: mujoco.MjData, supports) -> float:
    """Factor on all task weights of a session (:attr:`ReachSpec.effort_scale`):
    ``max(1, support_price / SUPPORT_PRICE_REF)`` — the task terms keep the same standing against
    the (over)priced holding torques on every model; 1 for a model that does not stand."""
    return max(1.0, support_price(model, data, supports) / SUPPORT_PRICE_REF)


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
    that do not touch the floor (world geoms) in ``data`` (the supports), do not carry a
    support (are not its ancestor; unless no other body qualifies) and have a name; one per
    limb (a candidate whose descendant was chosen is skipped).  Leaves come first, deepest
    first, ties broken by height above the floor (highest first) — so a humanoid gets its
    hands, a hand its fingertips.

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
    # a body that carries a support (a standing humanoid's shin or thigh) would lift it off the
    # floor: reach with the other limbs when there are any
    free = [b for b in cands if not any(_is_descendant(model, s, b) for s in support)]
    cands = free or cands
    if not cands:
        raise ParameterError(f"model {model_name(model)!r} has no named body moved by an actuator "
                             "to put a goal on")
    cands.sort(key=lambda b: (children[b] != 0, -depth[b], -float(data.xpos[b, 2])))
    chosen = []
    for b in cands:  # one goal per limb: not the parent of a body already chosen
        if len(chosen) < count and not any(_is_descendant(model, c, b) for c in chosen):
            chosen.append(b)
    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in chosen]


#: m a floating base that starts above the floor is lowered into it (the bundled humanoid's 3 mm
#: less 1: the soft contacts then carry the weight from the first step)
FLOOR_PENETRATION = 0.002


def _root_free_joint(model) -> int:
    """The first free joint of a child of the world (the one ``lower_root`` lowers), or −1."""
    for j in range(model.njnt):
        if model.jnt_type[j] == int(mujoco.mjtJoint.mjJNT_FREE) and model.body_parentid[model.jnt_bodyid[j]] == 0:
            return j
    return -1


def _lower_root(model, data, dz: float) -> None:
    j = _root_free_joint(model)
    data.qpos[model.jnt_qposadr[j] + 2] -= dz


def _floor_gap(model, data) -> float:
    """Height (m) of the lowest geom of the floating base's tree above the world geoms it can
    collide with (``mj_geomDistance``), when the model starts in the air; 0 when it touches
    them already, has no floating base, no actuators below it or no world geom to land on."""
    j = _root_free_joint(model)
    if j < 0 or not hasattr(mujoco, "mj_geomDistance"):
        return 0.0
    root = int(model.jnt_bodyid[j])
    tree = [g for g in range(model.ngeom) if model.body_rootid[model.geom_bodyid[g]] == root]
    if not _actuated_trees(model)[root]:
        return 0.0
    world = [g for g in range(model.ngeom) if model.geom_bodyid[g] == 0]
    cap = 10.0 * max(float(model.stat.extent), 1.0)
    gap = cap
    fromto = np.zeros(6)
    for g in tree:
        for w in world:
            if not (model.geom_contype[g] & model.geom_conaffinity[w]
                    or model.geom_contype[w] & model.geom_conaffinity[g]):
                continue
            gap = min(gap, float(mujoco.mj_geomDistance(model, data, g, w, cap, fromto)))
    return gap if 0.0 < gap < cap else 0.0


def effective_mass(model: mujoco.MjModel, data: mujoco.MjData, frames) -> float:
    """Mean translational effective mass (kg) of the frames (site or body names):
    ``3 / tr(J M⁻¹ Jᵀ)`` with ``J`` the frame's ``(3, nv)`` Jacobian, at ``data``'s positions."""
    from .problem import _full_inertia

    nv = model.nv
    M = np.zeros((nv, nv))
    _full_inertia(model, data, M)
    out = []
    for f in frames:
        kind, i = _resolve_frame(model, f)
        J = np.zeros((3, nv))
        if kind == "site":
            mujoco.mj_jacSite(model, data, J, None, i)
        else:
            mujoco.mj_jacBody(model, data, J, None, i)
        tr = float(np.trace(J @ np.linalg.solve(M, J.T)))
        if tr > 0:
            out.append(3.0 / tr)
    return float(np.mean(out)) if out else 1.0


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
