"""Policy server wire format: generated code up to date, policies rebuilt exactly on the client."""

import math

import mujoco
import numpy as np
import pytest

pytest.importorskip("grpc")

from contactopt.errors import ParameterError
from contactopt.mpc.idto_planner import IDTOPolicy
from contactopt.mpc.policy import ConstantPolicy, TrajectoryPolicy
from contactopt.remote import messages
from contactopt.remote.messages import (
    Layout,
    decode_array,
    decode_policy,
    decode_state,
    encode_array,
    encode_policy,
    encode_state,
    layout_of,
)


def test_generated_code_matches_the_proto():
    pytest.importorskip("grpc_tools")
    from contactopt.remote.codegen import stale_files

    assert stale_files() == [], "run: python -m contactopt.remote.codegen"


def _random_q(model, rng):
    q = model.qpos0 + 0.5 * rng.normal(size=model.nq)
    mujoco.mj_normalizeQuat(model, q)
    return q


def _roundtrip(policy, layout):
    msg = messages.pb().Policy()
    encode_policy(policy, msg, sequence=7, cost=1.5, compute_time=0.01, message="ok")
    wire = msg.SerializeToString()
    back = messages.pb().Policy.FromString(wire)
    assert back.sequence == 7 and back.t0 == policy.t0
    return decode_policy(back, layout)


def _times_and_states(model, policy, rng, n=60):
    horizon = getattr(policy, "horizon_time", 1.0)
    for _ in range(n):
        t = policy.t0 + rng.uniform(-0.1, 1.2) * horizon
        x = np.concatenate([_random_q(model, rng), rng.normal(size=model.nv), rng.normal(size=model.na)])
        yield t, x


def test_layout_difference_matches_mujoco(mixed_model, rng):
    m = mixed_model
    lay = layout_of(m)
    out = np.empty(m.nv)
    for _ in range(100):
        q0, q1 = _random_q(m, rng), _random_q(m, rng)
        mujoco.mj_differentiatePos(m, out, 1.0, q0, q1)
        np.testing.assert_allclose(lay.differentiate(q0, q1), out, atol=1e-13, rtol=0)
    msg = messages.pb().ModelLayout()
    lay.to_message(msg)
    assert Layout.from_message(msg) == lay


@pytest.mark.parametrize("feedback", [True, False])
def test_trajectory_policy_rebuilt_exactly(mixed_model, rng, feedback):
    m = mixed_model
    T, nx, ndx = 12, m.nq + m.nv + m.na, 2 * m.nv + m.na
    X = np.stack([np.concatenate([_random_q(m, rng), rng.normal(size=m.nv + m.na)]) for _ in range(T + 1)])
    K = rng.normal(size=(T, m.nu, ndx)) if feedback else None
    p = TrajectoryPolicy(m, 0.3, 0.02, rng.normal(size=(T, m.nu)), X if feedback else None, K,
                         lower=-np.ones(m.nu), upper=np.full(m.nu, np.inf))
    q = _roundtrip(p, layout_of(m))
    assert nx == X.shape[1]
    for t, x in _times_and_states(m, p, rng):
        np.testing.assert_allclose(q.control(t, x), p.control(t, x), atol=1e-12, rtol=0)
        np.testing.assert_allclose(q.feedforward(t), p.feedforward(t), atol=1e-12, rtol=0)


def test_idto_policy_rebuilt_exactly(mixed_model, rng):
    m = mixed_model
    T = 10
    qs = np.stack([_random_q(m, rng) for _ in range(T + 1)])
    p = IDTOPolicy(m, 1.0, 0.05, qs, rng.normal(size=(T + 1, m.nv)), rng.normal(size=(T, m.nu)),
                   kp=rng.uniform(0, 5, m.nu), kd=rng.uniform(0, 1, m.nu))
    q = _roundtrip(p, layout_of(m))
    for t, x in _times_and_states(m, p, rng):
        np.testing.assert_allclose(q.control(t, x), p.control(t, x), atol=1e-12, rtol=0)


def test_constant_policy_and_planner_policy(rng):
    from contactopt.mpc import registry
    from contactopt.tasks import load_task

    c = ConstantPolicy([1.0, -2.0], t0=0.5)
    lay = Layout(2, 2, 2, 0, 0, ((3, 0, 0), (3, 1, 1)), 0.01)
    np.testing.assert_array_equal(_roundtrip(c, lay).control(3.0, None), [1.0, -2.0])
    # a policy from the real iLQG planner of a bundled task
    task = load_task("acrobot").task()
    model = task.load_plant()
    planner = registry.make("ilqg", task, plant=model)
    d = mujoco.MjData(model)
    task.reset(model, d, 0)
    x = np.concatenate([d.qpos, d.qvel])
    upd = planner.reset(0.0, x)
    planner.close()
    q = _roundtrip(upd.policy, layout_of(model))
    for t, xx in _times_and_states(model, upd.policy, rng):
        np.testing.assert_allclose(q.control(t, xx), upd.policy.control(t, xx), atol=1e-12, rtol=0)


def test_bad_arrays_and_states_name_the_field():
    pb = messages.pb()
    a = pb.Array(shape=[2, 3], data=b"\0" * 40)
    with pytest.raises(ParameterError, match="K: 40 bytes"):
        decode_array("K", a)
    encode_array(a, [[1.0, math.nan]])
    with pytest.raises(ParameterError, match="U: contains NaN"):
        decode_array("U", a)
    encode_array(a, np.ones((2, 2)))
    with pytest.raises(ParameterError, match=r"U: expected shape \(\*, 3\)"):
        decode_array("U", a, (None, 3))
    lay = Layout(2, 2, 1, 0, 0, ((3, 0, 0), (3, 1, 1)), 0.01)
    s = pb.State()
    encode_state(s, 0.0, [0.0, 0.0, 0.0], [0.0, 0.0])
    with pytest.raises(ParameterError, match="state.qpos: expected 2 values, got 3"):
        decode_state(s, lay)
    encode_state(s, 0.0, [0.0, math.inf], [0.0, 0.0])
    with pytest.raises(ParameterError, match="state.qpos: contains NaN or inf"):
        decode_state(s, lay)
    with pytest.raises(ParameterError, match="no control law"):
        decode_policy(pb.Policy(), lay)
    bad = pb.ModelLayout(nq=1, nv=1, nu=1)
    bad.joints.add(type=0, qposadr=0, dofadr=0)
    with pytest.raises(ParameterError, match="does not fit"):
        Layout.from_message(bad)
