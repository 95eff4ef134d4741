"""Tests of contactopt.contact.geometry: active limits and contacts in contact coordinates."""

import copy
import math
import threading

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.contact.geometry import ContactSpace, clear_cache, contact_space
from contactopt.errors import NonFiniteError, ParameterError, ShapeError

BALL_RADIUS = 0.1


def _ball_state(model, z, qvel=None):
    data = mujoco.MjData(model)
    data.qpos[:] = [0.3, -0.2, z, 1, 0, 0, 0]
    if qvel is not None:
        data.qvel[:] = qvel
    return data


def _ball_point_jacobian(model, data, point):
    """Translational Jacobian of the ball body at ``point`` straight from mj_jac."""
    d = copy.deepcopy(data)
    mujoco.mj_kinematics(model, d)
    mujoco.mj_comPos(model, d)
    jacp = np.zeros((3, model.nv))
    mujoco.mj_jac(model, d, jacp, None, np.asarray(point, float), model.body("ball").id)
    return jacp


def _check_frames(frames):
    for F in frames:
        np.testing.assert_allclose(F @ F.T, np.eye(3), atol=1e-12)
        assert np.linalg.det(F) == pytest.approx(1.0, abs=1e-12)


# --------------------------------------------------------------------------- ball


@pytest.mark.parametrize("w_max", [0.05, 0.2])
@pytest.mark.parametrize("z", [0.07, 0.1, 0.12, 0.1499, 0.1501, 0.25, 1.1])
def test_ball_contact_iff_closer_than_w_max(z, w_max, rng):
    model = contactopt.load_model("ball")
    qvel = rng.normal(size=6)
    data = _ball_state(model, z, qvel)  # note: no mj_forward; only qpos is read
    cs = contact_space(model, data, w_max)
    expect_contact = z - BALL_RADIUS < w_max
    assert cs.n_limits == 0
    assert cs.n_contacts == int(expect_contact)
    assert cs.J.shape == (3 * cs.n_contacts, model.nv)
    assert cs.n == 3 * cs.n_contacts
    if not expect_contact:
        assert cs.distance.shape == (0,) and cs.frames.shape == (0, 3, 3)
        return
    assert cs.distance[0] == pytest.approx(z - BALL_RADIUS, abs=1e-9)
    floor, ball = model.geom("floor").id, model.geom("ball").id
    np.testing.assert_array_equal(cs.geoms, [[floor, ball]])
    assert cs.friction[0] == pytest.approx(1.0)
    _check_frames(cs.frames)
    # normal from geom1 (floor) to geom2 (ball): world +z; positive = separating
    np.testing.assert_allclose(cs.frames[0, 2], [0, 0, 1], atol=1e-12)
    np.testing.assert_array_equal(cs.normal_rows(), [2])
    assert cs.J[2] @ qvel == pytest.approx(qvel[2], abs=1e-12)
    # all three rows: frame times the ball's point Jacobian at the contact point
    np.testing.assert_allclose(cs.positions[0, :2], [0.3, -0.2], atol=1e-12)
    jp = _ball_point_jacobian(model, data, cs.positions[0])
    np.testing.assert_allclose(cs.J, cs.frames[0] @ jp, atol=1e-12)
    # tangential velocity of the contact point includes the spin: v + ω × (p - c)
    c = data.qpos[:3]
    mujoco.mj_kinematics(model, data)
    omega_world = data.xmat[model.body("ball").id].reshape(3, 3) @ qvel[3:]
    v_point = qvel[:3] + np.cross(omega_world, cs.positions[0] - c)
    np.testing.assert_allclose(cs.J[:2] @ qvel, cs.frames[0, :2] @ v_point, atol=1e-12)


MULTI_GEOM_BODY_XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1"/>
    <body name="torso" pos="0 0 0.5">
      <freejoint/>
      <geom name="chest" type="capsule" fromto="0 -0.1 0 0 0.1 0" size="0.1"/>
      <geom name="head" type="sphere" pos="0 0 0.3" size="0.08"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("gap", [0.0005, 0.01, 0.09])
def test_geoms_of_multi_geom_bodies_are_found_within_w_max(gap):
    """Regression: MuJoCo's midphase uses per-body boxes compiled with the model's own (zero)
    margins, which hid a capsule of a multi-geom body lying a hair above the floor."""
    model = mujoco.MjModel.from_xml_string(MULTI_GEOM_BODY_XML)
    data = mujoco.MjData(model)
    data.qpos[2] = 0.1 + gap
    cs = contact_space(model, data, 0.1)
    chest = model.geom("chest").id
    found = [d for (g1, g2), d in zip(cs.geoms, cs.distance) if chest in (g1, g2)]
    assert len(found) >= 1
    np.testing.assert_allclose(found, gap, atol=1e-9)


def test_ball_does_not_need_forward_and_leaves_data_alone():
    model = contactopt.load_model("ball")
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)  # kinematics at the home pose (high up) ...
    data.qpos[2] = 0.11  # ... then moved to the floor without recomputing
    before = (data.qpos.copy(), data.xpos.copy(), data.ncon)
    cs = contact_space(model, data, 0.05)
    assert cs.n_contacts == 1 and cs.distance[0] == pytest.approx(0.01, abs=1e-12)
    np.testing.assert_array_equal(data.qpos, before[0])
    np.testing.assert_array_equal(data.xpos, before[1])
    assert data.ncon == before[2]


# --------------------------------------------------------------------------- humanoid


def _humanoid_lying(rng):
    model = contactopt.load_model("humanoid")
    data = mujoco.MjData(model)
    contactopt.reset_to_keyframe(model, data, "lying")
    data.qpos[7:] += rng.normal(scale=0.05, size=model.nq - 7)
    data.qvel[:] = rng.normal(size=model.nv)
    return model, data


def _match(cs, geoms, position, tol=1e-4):
    hits = [i for i in range(cs.n_contacts)
            if np.array_equal(cs.geoms[i], geoms) and np.linalg.norm(cs.positions[i] - position) < tol]
    assert len(hits) == 1, (geoms, position, hits)
    return hits[0]


def test_humanoid_normal_rows_are_distance_rates(rng):
    model, data = _humanoid_lying(rng)
    w_max = 0.05
    cs = contact_space(model, data, w_max)
    smooth = {int(mujoco.mjtGeom.mjGEOM_SPHERE), int(mujoco.mjtGeom.mjGEOM_CAPSULE)}
    plane = int(mujoco.mjtGeom.mjGEOM_PLANE)
    eps = 1e-6
    shifted = []
    for sign in (+1, -1):
        d = mujoco.MjData(model)
        d.qpos[:] = data.qpos
        mujoco.mj_integratePos(model, d.qpos, data.qvel, sign * eps)
        shifted.append(contact_space(model, d, 4 * w_max))  # wider: keep every contact
    rates = cs.J[cs.normal_rows()[cs.n_limits:]] @ data.qvel  # one per contact
    checked = 0
    for i in range(cs.n_contacts):
        t1, t2 = model.geom_type[cs.geoms[i]]
        if not (t1 == plane and t2 in smooth):
            continue
        dp, dm = (s.distance[s.n_limits + _match(s, cs.geoms[i], cs.positions[i])] for s in shifted)
        fd = (dp - dm) / (2 * eps)
        assert rates[i] == pytest.approx(fd, rel=1e-6, abs=1e-7), (i, cs.geoms[i])
        checked += 1
    assert checked >= 8  # lying on its back: head, torso, arms and legs touch the floor
    _check_frames(cs.frames)
    # the tangent rows are the frame's tangents applied to the same relative velocity
    assert np.all(np.isfinite(cs.J))


def test_humanoid_rows_match_mujoco_constraint_jacobian(rng):
    """With elliptic cones MuJoCo's efc_J rows of a contact are F (Jp2 - Jp1), in order (n, t1, t2)."""
    model, data = _humanoid_lying(rng)
    w_max = 0.04
    cs = contact_space(model, data, w_max)
    ref = copy.deepcopy(model)
    ref.geom_margin[:] = w_max / 2  # MuJoCo adds the two geoms' margins
    ref.opt.cone = int(mujoco.mjtCone.mjCONE_ELLIPTIC)
    ref.opt.jacobian = int(mujoco.mjtJacobian.mjJAC_DENSE)
    ref.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_MIDPHASE)  # its boxes ignore run-time margins
    d = mujoco.MjData(ref)
    d.qpos[:] = data.qpos
    mujoco.mj_forward(ref, d)
    efc_J = d.efc_J.reshape(-1, model.nv)
    active = [c for c in d.contact if c.exclude == 0 and c.dist < w_max]
    assert len(active) == cs.n_contacts > 5
    for c in active:
        i = _match(cs, c.geom, c.pos, tol=1e-12)
        rows = cs.J[cs.n_limits + 3 * i: cs.n_limits + 3 * i + 3]
        np.testing.assert_allclose(rows[[2, 0, 1]], efc_J[c.efc_address: c.efc_address + 3], atol=1e-12)
        assert cs.distance[cs.n_limits + i] == pytest.approx(c.dist, abs=1e-15)
        assert cs.friction[i] == pytest.approx(c.friction[0])
        np.testing.assert_allclose(cs.frames[i], c.frame.reshape(3, 3)[[1, 2, 0]], atol=0)


# --------------------------------------------------------------------------- joint limits


def _hopper(knee, hip=0.0, root_z=2.0):
    model = contactopt.load_model("hopper")
    data = mujoco.MjData(model)
    contactopt.reset_to_keyframe(model, data, "straight")
    data.qpos[model.joint("root_z").qposadr[0]] = root_z  # airborne: no contacts
    data.qpos[model.joint("hip").qposadr[0]] = hip
    data.qpos[model.joint("knee").qposadr[0]] = knee
    return model, data


def test_hopper_lower_knee_limit():
    model, data = _hopper(knee=0.02)
    knee_dof = model.joint("knee").dofadr[0]
    cs = contact_space(model, data, 0.1)
    assert (cs.n_limits, cs.n_contacts, cs.n) == (1, 0, 1)
    assert cs.distance[0] == pytest.approx(0.02, abs=1e-15)
    np.testing.assert_array_equal(cs.limit_dofs, [knee_dof])
    expected = np.zeros(model.nv)
    expected[knee_dof] = 1.0
    np.testing.assert_array_equal(cs.J[0], expected)
    np.testing.assert_array_equal(cs.normal_rows(), [0])


def test_hopper_upper_knee_limit_and_penetration():
    model, data = _hopper(knee=2.35)
    knee_dof = model.joint("knee").dofadr[0]
    cs = contact_space(model, data, 0.1)
    assert cs.n_limits == 1
    assert cs.distance[0] == pytest.approx(0.05, abs=1e-12)
    assert cs.J[0, knee_dof] == -1.0 and np.count_nonzero(cs.J[0]) == 1
    # moving the knee up towards the bound closes the distance: J · qvel = dw/dt
    data.qvel[knee_dof] = 0.3
    assert cs.J[0] @ data.qvel == pytest.approx(-0.3)
    # past the bound: negative distance
    model, data = _hopper(knee=-0.01)
    cs = contact_space(model, data, 0.1)
    assert cs.distance[0] == pytest.approx(-0.01, abs=1e-15) and cs.J[0, knee_dof] == 1.0


def test_hopper_limits_are_in_joint_order_and_inactive_beyond_w_max():
    model, data = _hopper(knee=2.38, hip=-1.75)
    cs = contact_space(model, data, 0.1)
    hip_dof, knee_dof = model.joint("hip").dofadr[0], model.joint("knee").dofadr[0]
    np.testing.assert_array_equal(cs.limit_dofs, [hip_dof, knee_dof])
    np.testing.assert_allclose(cs.distance, [0.05, 0.02], atol=1e-12)
    assert cs.J[0, hip_dof] == 1.0 and cs.J[1, knee_dof] == -1.0
    cs = contact_space(model, data, 0.01)
    assert cs.n_limits == 0 and cs.J.shape == (0, model.nv)


def test_limits_come_before_contacts():
    model = contactopt.load_model("hopper")
    data = mujoco.MjData(model)
    contactopt.reset_to_keyframe(model, data, "home")
    data.qpos[model.joint("knee").qposadr[0]] = 0.02  # foot still near the floor
    cs = contact_space(model, data, 0.1)
    assert cs.n_limits == 1 and cs.n_contacts >= 1
    assert cs.n == 1 + 3 * cs.n_contacts == cs.J.shape[0]
    np.testing.assert_array_equal(cs.normal_rows(), np.r_[0, 1 + 3 * np.arange(cs.n_contacts) + 2])
    assert cs.distance.shape == (1 + cs.n_contacts,)
    assert cs.distance[0] == pytest.approx(0.02)
    np.testing.assert_array_equal(cs.tangent_rows()[0], [1, 2])


# --------------------------------------------------------------------------- the user's model


def test_user_model_margins_are_unchanged():
    model = contactopt.load_model("humanoid")
    model.geom_margin[0] = 0.003
    model.geom_gap[0] = 0.001
    before = {f: getattr(model, f).copy() for f in ("geom_margin", "geom_gap", "geom_friction")}
    o_margin = model.opt.o_margin
    data = mujoco.MjData(model)
    contactopt.reset_to_keyframe(model, data, "lying")
    mujoco.mj_forward(model, data)
    ncon = data.ncon
    cs = contact_space(model, data, 0.08)
    assert cs.n_contacts > ncon  # contacts beyond the model's own margin are reported
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(model, name), value)
    assert model.opt.o_margin == o_margin
    mujoco.mj_forward(model, data)
    assert data.ncon == ncon


def test_w_max_and_model_edits_between_calls_are_honoured():
    model = contactopt.load_model("ball")
    data = _ball_state(model, 0.15)
    assert contact_space(model, data, 0.2).n_contacts == 1
    assert contact_space(model, data, 0.01).n_contacts == 0  # margins re-derived on each call
    model.geom_friction[model.geom("floor").id, 0] = 0.4
    model.geom_friction[model.geom("ball").id, 0] = 0.7
    cs = contact_space(model, data, 0.2)
    assert cs.friction[0] == pytest.approx(0.7)  # MuJoCo combines by max
    model.geom_contype[model.geom("ball").id] = 0
    model.geom_conaffinity[model.geom("ball").id] = 0
    assert contact_space(model, data, 0.2).n_contacts == 0
    clear_cache(model)
    clear_cache()


def test_disable_flags():
    model, data = _hopper(knee=0.02, root_z=1.05)
    assert contact_space(model, data, 0.1).n_contacts >= 1
    model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    cs = contact_space(model, data, 0.1)
    assert (cs.n_limits, cs.n_contacts) == (1, 0)
    model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
    assert contact_space(model, data, 0.1).n == 0


CONDIM_XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 .1" friction="0.3 0 0" condim="1"/>
    <body name="a" pos="0 0 0.11"><freejoint/><geom name="a" type="sphere" size=".1" condim="1" friction="0.9 0 0"/></body>
    <body name="b" pos="1 0 0.11"><freejoint/><geom name="b" type="sphere" size=".1" condim="3" friction="0.6 0 0"/></body>
    <body name="c" pos="-1 0 0.11"><freejoint/><geom name="c" type="sphere" size=".1" condim="6" friction="0.5 0 0"/></body>
    <body name="mocap" mocap="true" pos="0 1 0.11"><geom name="m" type="sphere" size=".1"/></body>
    <body name="static" pos="0 -1 0.11"><geom name="s" type="sphere" size=".1"/></body>
  </worldbody>
  <contact><pair geom1="floor" geom2="s" margin="0.5"/></contact>
</mujoco>
"""


def test_condim_friction_and_no_dof_contacts():
    model = mujoco.MjModel.from_xml_string(CONDIM_XML)
    data = mujoco.MjData(model)
    mujoco.mj_resetData(model, data)
    cs = contact_space(model, data, 0.05)
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, int(g)) for g in cs.geoms[:, 1]]
    # the mocap sphere and the static sphere (an explicit <pair>) have no dofs: dropped
    assert sorted(names) == ["a", "b", "c"]
    mu = dict(zip(names, cs.friction))
    assert mu == {"a": 0.0, "b": pytest.approx(0.6), "c": pytest.approx(0.5)}
    np.testing.assert_allclose(cs.distance, 0.01, atol=1e-12)
    assert cs.J.shape == (9, model.nv)


def test_contact_space_is_read_only_and_validated():
    model = contactopt.load_model("ball")
    cs = contact_space(model, _ball_state(model, 0.12), 0.05)
    with pytest.raises(ValueError):
        cs.J[0, 0] = 1.0
    with pytest.raises(AttributeError):
        cs.n_contacts = 3
    ok = dict(J=np.zeros((4, 6)), n_limits=1, n_contacts=1, distance=np.zeros(2), friction=np.ones(1),
              frames=np.eye(3)[None], positions=np.zeros((1, 3)), limit_dofs=np.array([2]),
              geoms=np.zeros((1, 2), int))
    manual = ContactSpace(**ok)
    np.testing.assert_array_equal(manual.normal_rows(), [0, 3])
    with pytest.raises(ShapeError):
        ContactSpace(**{**ok, "J": np.zeros((3, 6))})


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("w_max", [0.0, -0.1, math.nan, math.inf, -math.inf, None, "big", True])
def test_bad_w_max(w_max):
    model = contactopt.load_model("ball")
    with pytest.raises(ParameterError):
        contact_space(model, _ball_state(model, 0.12), w_max)


def test_mismatched_model_and_data():
    ball = contactopt.load_model("ball")
    hopper = contactopt.load_model("hopper")
    with pytest.raises(ParameterError, match="different model"):
        contact_space(ball, mujoco.MjData(hopper), 0.05)
    with pytest.raises(ParameterError):
        contact_space(ball, ball, 0.05)
    with pytest.raises(ParameterError):
        contact_space("ball", mujoco.MjData(ball), 0.05)
    # a same-sized copy of the model is fine (e.g. plant data with a planner model)
    data = _ball_state(ball, 0.12)
    assert contact_space(contactopt.with_timestep(ball, 0.01), data, 0.05).n_contacts == 1


def test_non_finite_qpos():
    model = contactopt.load_model("ball")
    data = _ball_state(model, 0.12)
    data.qpos[2] = np.nan
    with pytest.raises(NonFiniteError):
        contact_space(model, data, 0.05)


def test_threads_get_consistent_results(rng):
    model, data = _humanoid_lying(rng)
    expected = contact_space(model, data, 0.05)
    results = []

    def work():
        for _ in range(20):
            results.append(contact_space(model, data, 0.05))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80
    for cs in results:
        np.testing.assert_array_equal(cs.J, expected.J)
        np.testing.assert_array_equal(cs.distance, expected.distance)
