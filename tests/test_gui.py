"""The GUI server without a browser: token check, JSON route, generated panels, CLI guards."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from contactopt.cli import main
from contactopt.errors import ParameterError
from contactopt.gui.cli import is_loopback
from contactopt.mpc.live import PLANT_KEYS, LiveRun
from contactopt.task import load_task_file

pytest.importorskip("viser")


def _get(url, cookie=None):
    req = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_token_panels_and_state_route():
    from contactopt.gui.app import GuiApp

    task = load_task_file("examples/pendulum/pendulum_task.py")
    app = GuiApp(LiveRun(task, "ilqg"), port=0, token="s3cret-token").start()
    try:
        base = f"http://127.0.0.1:{app.port}"
        assert app.url == base + "/?token=s3cret-token"
        assert _get(base + "/")[0] == 403
        assert _get(base + "/contactopt/state.json")[0] == 403
        assert _get(base + "/?token=wrong")[0] == 403
        status, headers, body = _get(base + "/?token=s3cret-token")
        assert status == 200 and b"<html" in body.lower()
        cookie = headers["Set-Cookie"].split(";")[0]
        status, _, body = _get(base + "/contactopt/state.json", cookie=cookie)
        assert status == 200
        state = json.loads(body)
        # one field per setting of the session, plus the plant's and the slowdown
        keys = {r.key for r in app.run.session.settings()} | set(PLANT_KEYS) | {"slowdown"}
        assert state["task"] == task.name and set(state["values"]) == keys
        assert set(app._fields) == keys
    finally:
        app.close()


def test_non_loopback_host_needs_a_token(capsys):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
    assert main(["gui", "acrobot", "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("contactopt: error: --host 0.0.0.0") and "--token" in err
    assert main(["gui", "acrobot", "--token", "short", "--host", "0.0.0.0"]) == 1
    assert main(["gui", "acrobot", "--slowdown", "0"]) == 1
    assert main(["gui", "no-such-task"]) == 1


def test_help_does_not_import_viser():
    code = "import sys; from contactopt.cli import build_parser; build_parser(); print('viser' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_record_clip_writes_an_mp4(tmp_path):
    import time

    from contactopt.gui.app import GuiApp

    task = load_task_file("examples/pendulum/pendulum_task.py")
    app = GuiApp(LiveRun(task, "ilqg"), port=0, out_dir=tmp_path).start()
    try:
        t, _ = app.run.state()
        app._recording = {"until": t + 0.3, "t": [], "qpos": [], "qvel": [], "client": None,
                          "mocap_pos": None, "mocap_quat": None}
        end = time.monotonic() + 60
        while time.monotonic() < end and not any("clip written" in m for m in app._messages):
            time.sleep(0.2)
        assert any("clip written" in m for m in app._messages), app._messages
        clips = list(tmp_path.glob("*.mp4"))
        assert len(clips) == 1 and clips[0].stat().st_size > 1000
    finally:
        app.close()


def test_drag_handle_pushes_the_selected_body_and_goals_move():
    """The code path of the scene's drag handles, without a browser: select a body (a click),
    release the push handle after a drag (an impulse along it, the handle snaps back), drop a
    goal marker (the planner's target moves)."""
    import time

    import numpy as np

    from contactopt.gui.app import GuiApp
    from contactopt.mpc.live import DRAG_TIME_SCALE
    from contactopt.tasks import load_task

    app = GuiApp(LiveRun(load_task("acrobot").task(), "ilqg"), port=0).start()
    try:
        run = app.run
        end = time.monotonic() + 30
        while time.monotonic() < end and run.state()[0] < 0.1:
            time.sleep(0.05)
        run.pause()
        time.sleep(0.2)
        app.select_body("upper_arm")
        assert app._push_body.value == "upper_arm"
        com = run.snapshot()["xipos"][1]
        np.testing.assert_allclose(app._push_handle.position, com, atol=1e-6)
        with pytest.raises(ParameterError, match="no body 'nope'"):
            app.select_body("nope")

        # the drag handler: start, a pose while held, release 0.2 m along +x
        import asyncio

        def event(phase, pos):
            app._push_handle.position = tuple(pos)
            return type("E", (), {"phase": phase, "target": app._push_handle, "client": None})()

        v0 = run.state()[1][run.model.nq:].copy()
        asyncio.run(app._on_push_drag(event("start", com)))
        assert app._dragging
        asyncio.run(app._on_push_drag(event("end", com + np.array([0.2, 0.0, 0.0]))))
        assert not app._dragging
        mass = float(run.model.body_subtreemass[1])
        assert "push upper_arm impulse=" in run.changes[-1].what
        assert f"{mass * 0.2 / DRAG_TIME_SCALE:.4g}".rstrip("0") in run.changes[-1].what
        assert np.abs(run.state()[1][run.model.nq:] - v0).max() > 1e-3
        np.testing.assert_allclose(app._push_handle.position, run.snapshot()["xipos"][1], atol=1e-6)  # snapped back
        assert app.drag_push("upper_arm", (np.nan, 0, 0)) is None and "displacement" in app._messages[-1]

        # goals: generated from the cost (the acrobot's tip SitePosition), dropped → planner target
        key = "target.site[tip]"
        assert list(app._goal_handles) == [key]
        asyncio.run(app._on_goal_drag(key, type("E", (), {"phase": "end", "client": None, "target": type(
            "T", (), {"position": (0.4, 0.0, 3.8)})()})()))
        np.testing.assert_allclose(run.goals()[key]["target"], [0.4, 0.0, 3.8])
        np.testing.assert_allclose(app._goal_handles[key].position, [0.4, 0.0, 3.8])
        assert app._goal_fields[key].value == "0.4, 0, 3.8"
        assert app.move_goal(key, "x y z") is None and key in app._messages[-1]
        assert app.state()["goals"][key] == [0.4, 0.0, 3.8]
    finally:
        app.close()


def test_scene_sends_only_the_bodies_that_moved():
    """Each pose set is a websocket message serialized under the GIL the planner shares: an update
    sends the bodies that moved (beyond 1e-5 m / 1e-5 in a quaternion component), all after resend()."""
    import mujoco
    import numpy as np
    import viser

    from contactopt.gui.scene import BodyScene
    from contactopt.model import load_model

    model = load_model("humanoid")
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    server = viser.ViserServer(host="127.0.0.1", port=0)
    try:
        scene = BodyScene(server.scene, model, "plant")
        n = len(scene.bodies)
        assert n > 5 and scene.update(data.xpos, data.xquat) == n
        assert scene.update(data.xpos, data.xquat) == 0
        xpos = data.xpos.copy()
        xpos[scene.bodies[2], 0] += 1e-3
        xpos[scene.bodies[3], 1] += 1e-6  # below the tolerance
        assert scene.update(xpos, data.xquat) == 1
        assert np.allclose(scene.frames[scene.bodies[2]].position, xpos[scene.bodies[2]])
        scene.resend()
        assert scene.update(xpos, data.xquat) == n
    finally:
        server.stop()
