"""The GUI server without a browser: token check, JSON route, generated panels, CLI guards."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from contactopt.cli import main
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
