"""Policy server over loopback: sessions, settings, refusals, TLS, idle timeout, fuzz, soak, restart."""

import math
import os
import socket
import subprocess
import time

import mujoco
import numpy as np
import pytest

grpc = pytest.importorskip("grpc")

from contactopt.errors import ParameterError
from contactopt.remote import PolicyClient, PolicyServer
from contactopt.remote.client import RemoteError
from contactopt.remote.messages import encode_state, pb
from contactopt.remote.policy_server_pb2_grpc import PolicyServerStub

TOKEN = "test-token-123"


@pytest.fixture(scope="module")
def task():
    from contactopt.tasks import load_task

    return load_task("acrobot").task()


@pytest.fixture(scope="module")
def server(task):
    srv = PolicyServer(task, planner="ilqg", port=0, token=TOKEN, max_sessions=3, max_message_bytes=64 << 10,
                       idle_timeout=120.0)
    srv.start()
    yield srv
    srv.stop()


def _stub(srv):
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    return ch, PolicyServerStub(ch)


MD = (("authorization", f"Bearer {TOKEN}"),)


def _open(stub, **kw):
    return stub.OpenSession(pb().OpenSessionRequest(**kw), metadata=MD, timeout=10)


def _code(fn):
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value.code(), info.value.details()


def _start_state(task):
    m = task.load_plant()
    d = mujoco.MjData(m)
    task.reset(m, d, 0)
    return m, d


def _wait_policy(client, n=1, timeout=20.0):
    end = time.time() + timeout
    while client.policies_received < n and time.time() < end:
        time.sleep(0.01)
    assert client.policies_received >= n, client.last_error


def test_client_gets_policy_and_changes_settings(server, task):
    m, d = _start_state(task)
    with PolicyClient(f"127.0.0.1:{server.port}", token=TOKEN, model=m) as c:
        c.update_state(d.time, d.qpos, d.qvel)
        _wait_policy(c)
        u = c.control(d.time, d.qpos, d.qvel)
        assert u.shape == (m.nu,) and np.isfinite(u).all()
        keys = {s["key"]: s for s in c.settings()}
        assert "horizon" in keys and "weight.qpos" in {k for k in keys if k.startswith("weight.")} | {"weight.qpos"}
        c.set({"horizon": 1.0})
        assert {s["key"]: s["value"] for s in c.settings()}["horizon"] == "1.0"
        with pytest.raises(ParameterError, match="unknown setting 'nope'"):
            c.set({"nope": 1})
        with pytest.raises(ParameterError, match="horizon"):
            c.set({"horizon": "abc"})
        times, qpos = c.trajectory()
        assert qpos.shape == (times.size, m.nq)
        st = c.status()
        assert st["planner"] == "ilqg" and int(st["updates"]) >= 1
        with pytest.raises(ParameterError, match="update_state: qpos must have 2 values"):
            c.update_state(0.0, [0.0], d.qvel)


def test_missing_and_wrong_token_are_refused(server):
    ch, stub = _stub(server)
    with ch:
        code, text = _code(lambda: stub.OpenSession(pb().OpenSessionRequest(), timeout=5))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "token" in text
        code, _ = _code(lambda: stub.OpenSession(pb().OpenSessionRequest(), timeout=5,
                                                 metadata=(("authorization", "Bearer wrong"),)))
        assert code == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(RemoteError, match="UNAUTHENTICATED"):
        PolicyClient(f"127.0.0.1:{server.port}", token="wrong")


def test_bad_states_are_invalid_argument_naming_the_field(server):
    ch, stub = _stub(server)
    with ch:
        sid = _open(stub, paused=True).session_id
        cases = [([0.0] * 3, [0.0, 0.0], "state.qpos: expected 2 values, got 3"),
                 ([0.0, 0.0], [0.0, math.nan], "state.qvel: contains NaN or inf"),
                 ([math.inf, 0.0], [0.0, 0.0], "state.qpos: contains NaN or inf")]
        for qpos, qvel, text in cases:
            req = pb().StepRequest(session_id=sid)
            encode_state(req.state, 0.0, qpos, qvel)
            code, details = _code(lambda r=req: stub.Step(r, metadata=MD, timeout=5))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and text in details
        req = pb().StepRequest(session_id=sid, wait_s=math.nan)
        assert _code(lambda: stub.Step(req, metadata=MD, timeout=5))[0] == grpc.StatusCode.INVALID_ARGUMENT
        req = pb().StepRequest(session_id="no-such-session")
        assert _code(lambda: stub.Step(req, metadata=MD, timeout=5))[0] == grpc.StatusCode.NOT_FOUND
        bad = pb().SetSettingsRequest(session_id=sid)
        bad.changes["weight.qpos"].number = -1.0
        code, details = _code(lambda: stub.SetSettings(bad, metadata=MD, timeout=5))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "weight.qpos" in details
        expect = pb().OpenSessionRequest()
        expect.expect.nq, expect.expect.nv, expect.expect.nu = 5, 2, 1
        code, details = _code(lambda: stub.OpenSession(expect, metadata=MD, timeout=5))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "expect.nq" in details
        # oversize messages: refused by the size limit (logged), far beyond it by gRPC itself
        for n in (10_000, 100_000):
            req = pb().StepRequest(session_id=sid)
            encode_state(req.state, 0.0, np.zeros(n), [0.0, 0.0])
            code, details = _code(lambda r=req: stub.Step(r, metadata=MD, timeout=5))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            if n == 10_000:
                assert "over the limit of 65536" in details
        stub.CloseSession(pb().SessionRequest(session_id=sid), metadata=MD, timeout=5)


def test_too_many_sessions(server):
    ch, stub = _stub(server)
    with ch:
        free = server.max_sessions - server.sessions
        opened = [_open(stub, paused=True).session_id for _ in range(free)]
        code, text = _code(lambda: _open(stub))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max-sessions" in text
        for sid in opened:
            assert stub.CloseSession(pb().SessionRequest(session_id=sid), metadata=MD, timeout=5).closed


def test_non_loopback_host_needs_a_token(task):
    with pytest.raises(ParameterError, match="token is required"):
        PolicyServer(task, host="0.0.0.0")
    with pytest.raises(ParameterError, match="both --tls-cert and --tls-key"):
        PolicyServer(task, tls_cert="c.pem")


def test_tls_with_token(task, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("openssl is not available")
    srv = PolicyServer(task, port=0, token=TOKEN, tls_cert=cert, tls_key=key)
    srv.start()
    try:
        m, d = _start_state(task)
        with PolicyClient(f"localhost:{srv.port}", token=TOKEN, tls_ca=cert) as c:
            pol = c.reset(d.time, d.qpos, d.qvel)
            assert pol.control(0.0, np.zeros(4)).shape == (m.nu,)
        with pytest.raises(RemoteError):  # plain text to a TLS port
            PolicyClient(f"127.0.0.1:{srv.port}", token=TOKEN, timeout=2.0)
    finally:
        srv.stop()


def test_idle_session_is_freed_and_client_reopens(task):
    srv = PolicyServer(task, port=0, idle_timeout=0.5)
    srv.start()
    try:
        m, d = _start_state(task)
        c = PolicyClient(f"127.0.0.1:{srv.port}", model=m)
        assert srv.sessions == 1
        time.sleep(1.6)
        assert srv.sessions == 0
        c.update_state(d.time, d.qpos, d.qvel)
        _wait_policy(c)
        assert c.conn.reopened == 1 and srv.sessions == 1
        c.close()
    finally:
        srv.stop()


def _rss_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_fuzz_random_bytes_and_fields_server_keeps_serving(server, task):
    import threading

    rng = np.random.default_rng(1)
    m, d = _start_state(task)
    good = PolicyClient(f"127.0.0.1:{server.port}", token=TOKEN, model=m)
    good.update_state(d.time, d.qpos, d.qvel)
    _wait_policy(good)
    stop = threading.Event()

    def plant():  # the good client keeps sending states at 100 Hz
        k = 0
        while not stop.wait(0.01):
            k += 1
            good.update_state(d.time + 0.01 * k, d.qpos, d.qvel)

    feeder = threading.Thread(target=plant, daemon=True)
    feeder.start()
    fuzz_start = time.monotonic()
    # 1) 1,000 connections held open at once, then random bytes straight onto the port
    held = []
    try:
        for _ in range(1000):
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=2))
    finally:
        for s in held:
            s.close()
    for _ in range(100):
        with socket.create_connection(("127.0.0.1", server.port), timeout=2) as s:
            try:
                s.sendall(rng.bytes(int(rng.integers(1, 2000))))
            except OSError:
                pass
    # 2) random bytes as the request of every method, with the token
    ch = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    methods = ["OpenSession", "CloseSession", "Step", "Reset", "GetTrajectory", "GetSettings", "SetSettings",
               "Status"]
    codes = set()
    start = time.time()
    for i in range(600):
        call = ch.unary_unary(f"/contactopt.remote.v1.PolicyServer/{methods[i % len(methods)]}")
        try:
            call(rng.bytes(int(rng.integers(0, 300))), metadata=MD, timeout=5)
        except grpc.RpcError as exc:
            codes.add(exc.code())
    # 3) well-formed messages with random fields
    stub = PolicyServerStub(ch)
    sid = good.conn.session_id
    for i in range(300):
        req = pb().StepRequest(session_id=sid if i % 2 else "x" * int(rng.integers(0, 50)),
                               known_sequence=int(rng.integers(0, 2 ** 63)),
                               wait_s=float(rng.choice([0.0, -1.0, math.inf, math.nan])),
                               min_planned_from=float(rng.normal()))
        n = int(rng.integers(0, 5))
        encode_state(req.state, float(rng.choice([0.0, math.nan, -1e300])),
                     rng.choice([0.0, math.nan, math.inf, 1e308], size=n), rng.normal(size=int(rng.integers(0, 4))))
        try:
            stub.Step(req, metadata=MD, timeout=5)
        except grpc.RpcError as exc:
            codes.add(exc.code())
        bad = pb().SetSettingsRequest(session_id=sid, planner=rng.choice(["", "nope", "x" * 300]))
        bad.changes[str(rng.bytes(8).hex())].number = float(rng.normal())
        try:
            stub.SetSettings(bad, metadata=MD, timeout=5)
        except grpc.RpcError as exc:
            codes.add(exc.code())
    ch.close()
    assert time.time() - start < 60
    assert grpc.StatusCode.INTERNAL not in codes, codes
    assert codes <= {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}, codes
    # the good client got new policies all along, and still does
    before = good.policies_received
    _wait_policy(good, before + 2)
    stop.set()
    feeder.join()
    arrivals = [t for t in good.arrivals if t >= fuzz_start]
    gaps = np.diff(arrivals)
    good.close()
    print(f"policy gaps while fuzzing: {len(arrivals)} policies, median {1e3 * np.median(gaps):.1f} ms, "
          f"max {1e3 * gaps.max():.1f} ms")
    assert len(arrivals) > 10 and gaps.max() < 1.0, (len(arrivals), gaps.max())


def test_soak_memory_is_flat(server, task):
    _, d = _start_state(task)
    ch, stub = _stub(server)
    with ch:
        sid = _open(stub, paused=True).session_id
        req = pb().ResetRequest(session_id=sid)
        encode_state(req.state, 0.0, d.qpos, d.qvel)
        assert stub.Reset(req, metadata=MD, timeout=30).has_policy

        def updates(n):
            for k in range(n):
                step = pb().StepRequest(session_id=sid, known_sequence=0)
                encode_state(step.state, 1e-3 * k, d.qpos, d.qvel)
                assert stub.Step(step, metadata=MD, timeout=5).has_policy

        updates(500)  # warm up
        before = _rss_kb()
        updates(10_000)  # the soak: 10,000 policy updates, RSS growth under 5%
        after = _rss_kb()
        stub.CloseSession(pb().SessionRequest(session_id=sid), metadata=MD, timeout=5)
    assert after < 1.05 * before, (before, after)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_restart_client_holds_falls_back_and_reconnects(task):
    port = _free_port()
    srv = PolicyServer(task, port=port)
    srv.start()
    m, d = _start_state(task)
    c = PolicyClient(f"127.0.0.1:{port}", model=m)
    try:
        c.update_state(d.time, d.qpos, d.qvel)
        _wait_policy(c)
        p = c.policy
        srv.stop()
        x = np.concatenate([d.qpos, d.qvel])
        for t in (0.1, 0.5 * p.horizon_time):  # keeps the last policy within its horizon
            start = time.perf_counter()
            c.update_state(t, d.qpos, d.qvel)  # never waits on the network
            np.testing.assert_array_equal(c.control(t, d.qpos, d.qvel), p.control(t, x))
            assert time.perf_counter() - start < 0.05
        time.sleep(0.3)
        assert not c.connected
        late = p.t0 + p.horizon_time + 0.01
        np.testing.assert_array_equal(c.control(late, d.qpos, d.qvel), np.zeros(m.nu))  # fallback
        srv = PolicyServer(task, port=port)
        srv.start()
        n = c.policies_received
        end = time.time() + 20
        while c.policies_received == n and time.time() < end:
            c.update_state(late, d.qpos, d.qvel)
            time.sleep(0.05)
        assert c.policies_received > n and c.conn.reopened >= 1 and c.connected
        assert np.isfinite(c.control(late, d.qpos, d.qvel)).all()
        # gravity compensation as the fallback
        g = PolicyClient(f"127.0.0.1:{port}", model=m, fallback="gravity")
        u = g.control(0.0, d.qpos, d.qvel)
        assert u.shape == (m.nu,) and np.isfinite(u).all()
        g.close()
    finally:
        c.close()
        srv.stop()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_rss_helper():
    assert _rss_kb() > 0


def test_remote_planner_survives_a_server_restart(task):
    from contactopt.remote import RemotePlanner

    port = _free_port()
    srv = PolicyServer(task, port=port)
    srv.start()
    m, d = _start_state(task)
    x = np.concatenate([d.qpos, d.qvel])
    rp = RemotePlanner(f"127.0.0.1:{port}", model=m, wait=5.0)
    try:
        first = rp.reset(0.0, x)
        upd = rp.update(0.01, x)
        assert first.policy is not None and upd.policy is not None and upd.policy.t0 >= 0.01
        srv.stop()
        lost = rp.update(0.02, x)
        assert lost.policy is None and "transport" in lost.message
        late = upd.policy.t0 + upd.policy.horizon_time + 0.01
        np.testing.assert_array_equal(upd.policy.control(late, x), np.zeros(m.nu))  # fallback after the horizon
        srv = PolicyServer(task, port=port)
        srv.start()
        again = None
        for k in range(50):
            again = rp.update(0.03 + 0.01 * k, x)
            if again.policy is not None:
                break
            time.sleep(0.1)
        assert again.policy is not None and rp.conn.reopened == 1
        summary = rp.summary()
        assert summary["transport_failures"] >= 1 and summary["round_trip_ms_median"] > 0
    finally:
        rp.close()
        srv.stop()


def test_a_failing_planner_is_reported_at_once():
    import contactopt
    from contactopt.costs import CostTerm, Qpos

    # goal-directed dynamics refuses to swing the acrobot up to a configuration target (its
    # elbow cannot hold the arm part way up), when the session's planner is built
    upright = contactopt.Task(name="acrobot", model="acrobot",
                              cost=lambda m: [CostTerm(Qpos(m, [np.pi, 0.0]))])
    srv = PolicyServer(upright, planner="ilqg", port=0, token=TOKEN, max_sessions=1, idle_timeout=120.0)
    srv.start()
    ch, stub = _stub(srv)
    with ch:
        sid = _open(stub, planner="gdd").session_id
        req = pb().StepRequest(session_id=sid, wait_s=10.0, min_planned_from=0.0)
        encode_state(req.state, 0.0, [0.1, 0.0], [0.0, 0.0])
        start = time.time()
        reply = stub.Step(req, metadata=MD, timeout=20)
        assert time.time() - start < 5.0
        assert not reply.has_policy and "cannot run task acrobot" in reply.message
        reset = pb().ResetRequest(session_id=sid)
        encode_state(reset.state, 0.0, [0.1, 0.0], [0.0, 0.0])
        code, text = _code(lambda: stub.Reset(reset, metadata=MD, timeout=20))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "cannot run task acrobot" in text
        stub.CloseSession(pb().SessionRequest(session_id=sid), metadata=MD, timeout=5)
    srv.stop()


def test_the_served_planners_update_period_paces_the_plant(task):
    # every policy carries the session planner's update_period; RemotePlanner and PolicyClient
    # send states no more often, and a --set change reaches them with the next policy
    from contactopt.remote.client import RemotePlanner, served_update_period

    m, d = _start_state(task)
    x = np.concatenate([d.qpos, d.qvel])
    with PolicyServer(task, planner="ilqg", port=0, settings={"update_period": "0.04"}) as srv:
        rp = RemotePlanner(f"127.0.0.1:{srv.port}", model=m)
        try:
            assert rp.reset(0.0, x).policy is not None
            assert rp.update_period == pytest.approx(0.04)
            rp.set({"update_period": 0.0})
            assert rp.update(0.01, x).policy is not None
            assert rp.update_period == 0.0
        finally:
            rp.close()
        with PolicyClient(f"127.0.0.1:{srv.port}", model=m) as c:
            c.reset(0.0, d.qpos, d.qvel)
            assert c.update_period == pytest.approx(0.04)
            sent = []
            for k in range(1, 41):  # 0.2 s of plant states at 5 ms, faster than real time
                c.update_state(0.005 * k, d.qpos, d.qvel)
                time.sleep(0.01)
                if c._sent_t is not None and (not sent or sent[-1] != c._sent_t):
                    sent.append(c._sent_t)
            # on the 40 ms grid (a late state moves it on, so gaps may be shorter): 6 at most
            assert 2 <= len(sent) <= 6 and np.all(np.diff(sent) > 0), sent
    msg = pb().Policy()
    for bad in (math.nan, -1.0, math.inf):
        msg.update_period_s = bad
        assert served_update_period(msg) == 0.0


def test_the_served_planners_min_lag_holds_each_policy_back(task):
    # every policy carries the session planner's min_lag: RemotePlanner hands it to the runner
    # (runner.planner_min_lag), and PolicyClient keeps the policy before in effect until
    # t ≥ t0 + min_lag
    from contactopt.mpc.runner import planner_min_lag
    from contactopt.remote.client import RemotePlanner, served_min_lag

    m, d = _start_state(task)
    x = np.concatenate([d.qpos, d.qvel])
    with PolicyServer(task, planner="ilqg", port=0, settings={"min_lag": "0.03"}) as srv:
        rp = RemotePlanner(f"127.0.0.1:{srv.port}", model=m)
        try:
            assert rp.reset(0.0, x).policy is not None
            assert planner_min_lag(rp) == pytest.approx(0.03)
            rp.set({"min_lag": 0.0})
            assert rp.update(0.01, x).policy is not None
            assert planner_min_lag(rp) == 0.0
        finally:
            rp.close()
        with PolicyClient(f"127.0.0.1:{srv.port}", model=m) as c:
            first = c.reset(0.0, d.qpos, d.qvel)
            assert c.min_lag == pytest.approx(0.03) and c.policy_in_effect is first  # a reset's plan: at once
            c.update_state(0.01, d.qpos, d.qvel)
            deadline = time.time() + 20
            while not c._waiting and time.time() < deadline:
                time.sleep(0.01)
            newer = c._waiting[-1][0]
            assert newer.t0 == pytest.approx(0.01)
            assert c.policy is newer  # the newest received
            c.control(0.035, d.qpos, d.qvel)  # before 0.01 + 0.03: the first plan still
            assert c.policy_in_effect is first
            c.control(0.04, d.qpos, d.qvel)
            assert c.policy_in_effect is newer and not c._waiting
    msg = pb().Policy()
    for bad in (math.nan, -1.0, math.inf):
        msg.min_lag_s = bad
        assert served_min_lag(msg) == 0.0
