"""Mocap poses sent with a state reach the server's planner (over loopback), and bad ones are refused."""

import math
import time

import numpy as np
import pytest

grpc = pytest.importorskip("grpc")

import contactopt
from contactopt.costs import Control, CostTerm, Qvel, UserResidual
from contactopt.errors import ParameterError
from contactopt.remote import PolicyClient, PolicyServer
from contactopt.remote.messages import encode_state, pb
from contactopt.remote.policy_server_pb2_grpc import PolicyServerStub

# a point mass on a rail whose cost pulls it to a mocap target: where the target is only the
# mocap pose says, so the plan's first control points at the pose the planner has
REACH_XML = """
<mujoco model="mocap-reach">
  <option timestep="0.01"/>
  <worldbody>
    <body name="ball">
      <joint name="x" type="slide" axis="1 0 0" damping="0.5"/>
      <geom type="sphere" size="0.05" mass="1" contype="0" conaffinity="0"/>
      <site name="tip"/>
    </body>
    <body name="target" mocap="true" pos="0.5 0 0">
      <geom type="sphere" size="0.03" contype="0" conaffinity="0"/>
      <site name="goal"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" ctrlrange="-5 5"/></actuator>
</mujoco>
"""


def _cost(m):
    tip, goal = m.site("tip").id, m.site("goal").id
    reach = UserResidual(m, lambda m, d, x, u: d.site_xpos[tip] - d.site_xpos[goal], 3, name="reach")
    return [CostTerm(reach, weight=10.0), CostTerm(Qvel(m), weight=0.1), CostTerm(Control(m), weight=1e-3)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = tmp_path_factory.mktemp("mocap") / "reach.xml"
    path.write_text(REACH_XML)
    task = contactopt.Task(name="mocap-reach", model=str(path), cost=_cost, duration=3.0)
    srv = PolicyServer(task, planner="ilqg", port=0, max_sessions=2, idle_timeout=120.0)
    srv.start()
    yield srv
    srv.stop()


def _session(srv, client):
    return srv._sessions[client.conn.session_id]


def _wait(client, t, timeout=30.0):
    """The client's policy once it was planned from a state at time >= ``t``."""
    end = time.time() + timeout
    while time.time() < end:
        p = client.policy
        if p is not None and p.t0 >= t - 1e-9:
            return p
        time.sleep(0.01)
    raise AssertionError(f"no policy planned from t >= {t} in {timeout} s: {client.last_error}")


def test_mocap_pose_reaches_the_planner_and_moves_the_plan(server):
    x0, v0 = np.zeros(1), np.zeros(1)
    with PolicyClient(f"127.0.0.1:{server.port}") as c:
        assert c.layout.nmocap == 1
        c.update_state(0.0, x0, v0, mocap_pos=[[0.5, 0.0, 0.0]])
        _wait(c, 0.0)
        assert c.control(0.0, x0, v0)[0] > 1.0  # the target is ahead: push forward
        s = _session(server, c)
        updates = s.mocap_updates  # 0: the pose sent is the model's own
        # the plant moves its target behind the mass: the next plan pushes backward
        c.update_state(0.1, x0, v0, mocap_pos=[[-0.5, 0.0, 0.0]])
        _wait(c, 0.1)
        assert c.control(0.1, x0, v0)[0] < -1.0
        assert s.mocap_updates == updates + 1
        np.testing.assert_array_equal(s.mocap_pos, [[-0.5, 0.0, 0.0]])
        planner_model = s.planner.planner.model
        np.testing.assert_array_equal(planner_model.body_pos[planner_model.body("target").id], [-0.5, 0.0, 0.0])
        # later states without a pose keep it (no rebuild); a quaternion alone keeps the position
        c.update_state(0.2, x0, v0)
        _wait(c, 0.2)
        assert c.control(0.2, x0, v0)[0] < -1.0 and s.mocap_updates == updates + 1
        c.update_state(0.3, x0, v0, mocap_quat=[[0.0, 0.0, 0.0, 2.0]])  # normalized to (0, 0, 0, 1)
        _wait(c, 0.3)
        np.testing.assert_array_equal(s.mocap_quat, [[0.0, 0.0, 0.0, 1.0]])
        np.testing.assert_array_equal(s.mocap_pos, [[-0.5, 0.0, 0.0]])
        assert c.control(0.3, x0, v0)[0] < -1.0
        # a reset takes the pose with its state
        p = c.reset(0.4, x0, v0, mocap_pos=[[0.8, 0.0, 0.0]])
        assert p.control(0.4, np.zeros(2))[0] > 1.0
        np.testing.assert_array_equal(s.mocap_pos, [[0.8, 0.0, 0.0]])


def test_bad_mocap_poses_are_refused_naming_the_field(server):
    with PolicyClient(f"127.0.0.1:{server.port}") as c:
        for kw, text in (({"mocap_pos": [0.0, 0.0]}, r"mocap_pos: expected shape \(1, 3\)"),
                         ({"mocap_pos": [[math.nan, 0.0, 0.0]]}, "mocap_pos: contains NaN or inf"),
                         ({"mocap_quat": [[0.0, 0.0, 0.0, 0.0]]}, "quaternion of mocap body 0 has zero length"),
                         ({"mocap_quat": np.ones((2, 4))}, r"mocap_quat: expected shape \(1, 4\)")):
            with pytest.raises(ParameterError, match=text):
                c.update_state(0.0, [0.0], [0.0], **kw)
            with pytest.raises(ParameterError, match=text):
                c.reset(0.0, [0.0], [0.0], **kw)
    # and by the server, from a client that does not check
    ch = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    with ch:
        stub = PolicyServerStub(ch)
        sid = stub.OpenSession(pb().OpenSessionRequest(paused=True), timeout=10).session_id
        cases = [({"mocap_pos": [0.0] * 4}, "state.mocap_pos: expected 3 values (nmocap = 1 x 3), got 4"),
                 ({"mocap_pos": [0.0, math.inf, 0.0]}, "state.mocap_pos: contains NaN or inf"),
                 ({"mocap_quat": [math.nan, 0.0, 0.0, 1.0]}, "state.mocap_quat: contains NaN or inf"),
                 ({"mocap_quat": [0.0] * 4}, "state.mocap_quat: quaternion of mocap body 0 has zero length")]
        for kw, text in cases:
            for method, req in (("Step", pb().StepRequest(session_id=sid)),
                                ("Reset", pb().ResetRequest(session_id=sid))):
                encode_state(req.state, 0.0, [0.0], [0.0], **kw)
                with pytest.raises(grpc.RpcError) as info:
                    getattr(stub, method)(req, timeout=10)
                assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, kw)
                assert text in info.value.details(), (method, info.value.details())
        stub.CloseSession(pb().SessionRequest(session_id=sid), timeout=5)
