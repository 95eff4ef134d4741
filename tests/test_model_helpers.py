"""Loading, state packing, manifold arithmetic, actuation map and time-step helpers."""

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt import (
    ModelLoadError, ModelNotFoundError, NonFiniteError, ParameterError, ShapeError,
)
from contactopt.models import BUNDLED_MODELS

from conftest import MIXED_JOINTS_XML, random_configuration

URDF = """<?xml version="1.0"?>
<robot name="two_link">
  <link name="base"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><box size="0.1 0.1 0.1"/></geometry></collision></link>
  <link name="arm"><inertial><origin xyz="0 0 0.25"/><mass value="0.5"/><inertia ixx="0.01" iyy="0.01" izz="0.001" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 0.25"/><geometry><cylinder radius="0.02" length="0.5"/></geometry></collision></link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="arm"/><axis xyz="0 1 0"/>
    <limit lower="-1.5" upper="1.5" effort="10" velocity="5"/></joint>
</robot>
"""


# ----------------------------------------------------------------------------- loading

def test_load_bundled_path_and_model(tmp_path, mixed_model):
    by_name = contactopt.load_model("acrobot")
    assert contactopt.model_name(by_name) == "acrobot"
    by_path = contactopt.load_model(BUNDLED_MODELS["acrobot"].path)
    assert by_path.nq == by_name.nq
    copy = contactopt.load_model(mixed_model)
    assert copy is not mixed_model and copy.nv == mixed_model.nv
    f = tmp_path / "mixed.xml"
    f.write_text(MIXED_JOINTS_XML)
    assert contactopt.load_model(str(f), timestep=0.01).opt.timestep == 0.01


def test_load_urdf(tmp_path):
    f = tmp_path / "two_link.urdf"
    f.write_text(URDF)
    model = contactopt.load_model(f)
    assert model.nq == 1 and model.nv == 1
    assert contactopt.model_name(model) == "two_link"


@pytest.mark.parametrize("bad, error, words", [
    ("no_such_model", ModelNotFoundError, "unknown model 'no_such_model'"),
    ("/definitely/not/here.xml", ModelNotFoundError, "not found"),
])
def test_load_missing(bad, error, words):
    with pytest.raises(error, match=words):
        contactopt.load_model(bad)


def test_load_malformed(tmp_path):
    f = tmp_path / "broken.xml"
    f.write_text("<mujoco><worldbody><body></worldbody></mujoco>")
    with pytest.raises(ModelLoadError, match="broken.xml"):
        contactopt.load_model(f)
    g = tmp_path / "badattr.xml"
    g.write_text('<mujoco><worldbody><geom type="sphere" size="-1"/></worldbody></mujoco>')
    with pytest.raises(ModelLoadError, match="badattr.xml"):
        contactopt.load_model(g)
    with pytest.raises(ModelNotFoundError, match="directory"):
        contactopt.load_model(tmp_path)


def test_load_bad_timestep():
    with pytest.raises(ParameterError, match="timestep"):
        contactopt.load_model("acrobot", timestep=0.0)
    with pytest.raises(NonFiniteError):
        contactopt.load_model("acrobot", timestep=float("nan"))


# ----------------------------------------------------------------------------- manifold

@pytest.mark.parametrize("name", ["mixed", "humanoid", "quadruped", "hand", "bimanual", "ball"])
def test_integrate_then_difference_round_trips(name, mixed_model, rng):
    model = mixed_model if name == "mixed" else contactopt.load_model(name)
    for _ in range(20):
        q = random_configuration(model, rng)
        v = rng.normal(size=model.nv)
        dt = rng.uniform(0.001, 0.2)
        q1 = contactopt.integrate_position(model, q, v, dt)
        np.testing.assert_allclose(contactopt.position_difference(model, q, q1, dt), v, rtol=1e-9, atol=1e-9)


def test_difference_then_integrate_round_trips(mixed_model, rng):
    model = mixed_model
    for _ in range(20):
        q0, q1 = random_configuration(model, rng), random_configuration(model, rng)
        v = contactopt.position_difference(model, q0, q1, 0.05)
        q1_back = contactopt.integrate_position(model, q0, v, 0.05)
        # quaternions are equal up to sign
        assert _config_distance(model, q1, q1_back) < 1e-9


def test_quaternion_integration_matches_rotation(mixed_model):
    """A free-joint angular velocity ω (body frame) for time dt rotates by exp(ω dt)."""
    model = mixed_model
    q = model.qpos0.copy()
    v = np.zeros(model.nv)
    v[5] = np.pi / 2  # about the body z axis, rad/s
    q1 = contactopt.integrate_position(model, q, v, 1.0)
    np.testing.assert_allclose(q1[3:7], [np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)], atol=1e-12)
    np.testing.assert_allclose(q1[:3], q[:3])


def test_manifold_batches_and_shapes(mixed_model, rng):
    model = mixed_model
    Q = np.stack([random_configuration(model, rng) for _ in range(5)])
    V = rng.normal(size=(5, model.nv))
    Q1 = contactopt.integrate_position(model, Q, V, 0.1)
    assert Q1.shape == (5, model.nq)
    np.testing.assert_allclose(contactopt.position_difference(model, Q, Q1, 0.1), V, atol=1e-9)
    with pytest.raises(ShapeError, match=r"qvel: expected shape \(5, 13\), got \(4, 13\)"):
        contactopt.integrate_position(model, Q, V[:4], 0.1)
    with pytest.raises(ShapeError, match="qpos"):
        contactopt.integrate_position(model, Q[0, :-1], V[0])
    bad = Q[0].copy()
    bad[4] = np.nan
    with pytest.raises(NonFiniteError, match="qpos0: contains a non-finite value .* at index 4"):
        contactopt.position_difference(model, bad, Q[1])
    with pytest.raises(ParameterError, match="dt"):
        contactopt.position_difference(model, Q[0], Q[1], dt=0.0)


def _config_distance(model, qa, qb):
    return float(np.linalg.norm(contactopt.position_difference(model, qa, qb, 1.0)))


# ----------------------------------------------------------------------------- states

def test_state_pack_unpack_and_tangent_round_trip(mixed_model, rng):
    model = mixed_model
    q = random_configuration(model, rng)
    v = rng.normal(size=model.nv)
    x = contactopt.pack_state(model, q, v)
    assert x.shape == (contactopt.state_size(model),)
    s = contactopt.unpack_state(model, x)
    np.testing.assert_allclose(s.qpos, q)
    np.testing.assert_allclose(s.qvel, v)
    dx = rng.normal(size=contactopt.tangent_size(model))
    x1 = contactopt.state_integrate(model, x, dx)
    np.testing.assert_allclose(contactopt.state_difference(model, x, x1), dx, atol=1e-9)
    data = mujoco.MjData(model)
    contactopt.set_state(model, data, x1)
    np.testing.assert_allclose(contactopt.get_state(model, data), x1)


def test_state_difference_matches_transition_fd_convention(mixed_model, rng):
    """mjd_transitionFD's A maps tangent perturbations; check with state_integrate/difference."""
    model = mixed_model
    data = mujoco.MjData(model)
    x = contactopt.pack_state(model, random_configuration(model, rng), rng.normal(size=model.nv) * 0.1)
    contactopt.set_state(model, data, x)
    mujoco.mj_forward(model, data)
    n = contactopt.tangent_size(model)
    A = np.zeros((n, n))
    mujoco.mjd_transitionFD(model, data, 1e-7, True, A, None, None, None)

    def step(xs):
        d = mujoco.MjData(model)
        contactopt.set_state(model, d, xs)
        mujoco.mj_step(model, d)
        return contactopt.get_state(model, d)

    x_next = step(x)
    dx = rng.normal(size=n) * 1e-6
    predicted = A @ dx
    actual = contactopt.state_difference(model, x_next, step(contactopt.state_integrate(model, x, dx)))
    np.testing.assert_allclose(actual, predicted, atol=1e-8 + 1e-3 * np.abs(predicted).max())


def test_state_bad_input(mixed_model):
    model = mixed_model
    with pytest.raises(ShapeError, match="qpos"):
        contactopt.pack_state(model, np.zeros(3))
    with pytest.raises(ShapeError, match="state"):
        contactopt.unpack_state(model, np.zeros(5))
    x = contactopt.pack_state(model, model.qpos0)
    x[-1] = np.inf
    with pytest.raises(NonFiniteError, match="state"):
        contactopt.set_state(model, mujoco.MjData(model), x)


# ----------------------------------------------------------------------------- actuation

@pytest.mark.parametrize("name", ["mixed"] + sorted(BUNDLED_MODELS))
def test_actuation_map_matches_mujoco(name, mixed_model, rng):
    model = mixed_model if name == "mixed" else contactopt.load_model(name)
    data = mujoco.MjData(model)
    data.qpos[:] = random_configuration(model, rng)
    lo, hi = model.actuator_ctrlrange.T
    data.ctrl[:] = rng.uniform(lo, hi)
    mujoco.mj_forward(model, data)
    amap = contactopt.actuation_map(model, data=data)
    # qfrc_actuator = B · actuator_force, for every transmission kind
    np.testing.assert_allclose(amap.B @ data.actuator_force, data.qfrc_actuator, atol=1e-10)
    np.testing.assert_allclose(amap.B.T, contactopt.actuator_moment_matrix(model, data))
    # the unactuated basis is orthonormal and orthogonal to every actuator direction
    Z = amap.unactuated_basis
    np.testing.assert_allclose(Z.T @ Z, np.eye(Z.shape[1]), atol=1e-10)
    np.testing.assert_allclose(Z.T @ amap.B, 0.0, atol=1e-10)
    assert amap.rank + Z.shape[1] == model.nv


def test_actuation_map_details(mixed_model):
    model = mixed_model
    amap = contactopt.actuation_map(model)
    # hinge motor with gear 3: column has a 3 on the hinge DoF
    hinge_dof = model.jnt_dofadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "hinge")]
    assert amap.B[hinge_dof, 0] == pytest.approx(3.0)
    # the tendon couples h1 and h2 with coefficients 1 and -0.5 (times gear 2)
    h1 = model.jnt_dofadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "h1")]
    np.testing.assert_allclose(amap.B[h1:h1 + 2, 2], [2.0, -1.0])
    # position servo: ∂τ/∂ctrl = kp on the slide DoF; motor gains are 1
    slide_dof = model.jnt_dofadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "slide")]
    assert amap.control_gain[slide_dof, 1] == pytest.approx(50.0)
    # the tendon leaves one direction of the (h1, h2) pair unactuated: not a selection
    assert not amap.is_selection
    humanoid = contactopt.actuation_map(contactopt.load_model("humanoid"))
    assert humanoid.is_selection
    np.testing.assert_array_equal(humanoid.unactuated_dofs, np.arange(6))
    hand = contactopt.load_model("hand")
    hand_map = contactopt.actuation_map(hand)
    ball_dofs = hand.jnt_dofadr[hand.body_jntadr[mujoco.mj_name2id(hand, mujoco.mjtObj.mjOBJ_BODY, "ball")]]
    np.testing.assert_array_equal(hand_map.unactuated_dofs, np.arange(ball_dofs, ball_dofs + 6))


# ----------------------------------------------------------------------------- time

def test_with_timestep_and_num_steps():
    model = contactopt.load_model("hopper")
    coarse = contactopt.with_timestep(model, 0.05)
    assert coarse.opt.timestep == 0.05 and model.opt.timestep != 0.05
    assert contactopt.model_name(coarse) == "hopper"
    assert contactopt.num_steps(1.0, 0.002) == 500
    assert contactopt.num_steps(0.0, 0.01) == 0
    with pytest.raises(ParameterError, match="seconds must be non-negative"):
        contactopt.num_steps(-1.0, 0.01)
    with pytest.raises(ParameterError, match="shorter than one time step"):
        contactopt.num_steps(0.001, 0.01)
    with pytest.raises(ParameterError, match="timestep must be positive"):
        contactopt.with_timestep(model, -0.01)
