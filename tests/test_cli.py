"""Each CLI command end to end in a subprocess, including bad input and interrupted videos."""

import json
import os
import signal
import subprocess
import sys
import time

import imageio.v2 as imageio
import pytest

import contactopt
from contactopt.models import BUNDLED_MODELS
from contactopt.simulate import frame_stride

from test_simulate import STIFF_XML

CLI = [sys.executable, "-m", "contactopt"]


def run_cli(*args, check=True, timeout=300):
    proc = subprocess.run(CLI + list(map(str, args)), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def test_models_table_and_json():
    out = run_cli("models").stdout
    for name in BUNDLED_MODELS:
        assert name in out
    assert "nq" in out and "description" in out
    rows = json.loads(run_cli("models", "--json").stdout)["models"]
    assert {r["name"] for r in rows} == set(BUNDLED_MODELS)
    humanoid = next(r for r in rows if r["name"] == "humanoid")
    assert (humanoid["nq"], humanoid["nv"], humanoid["nu"]) == (23, 22, 16)


def test_simulate_json_and_plot(tmp_path):
    plot = tmp_path / "ball.png"
    proc = run_cli("simulate", "ball", "--seconds", "1", "--plot", plot, "--json")
    summary = json.loads(proc.stdout)
    assert summary["model"] == "ball" and summary["steps"] == 1000
    assert summary["contacts_final"] >= 1 and summary["plot"] == str(plot)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert proc.stderr == ""  # no progress bar when piped


@pytest.mark.slow
def test_simulate_video_has_expected_frames(tmp_path):
    video = tmp_path / "h.mp4"
    seconds, fps = 1.0, 30.0
    run_cli("simulate", "humanoid", "--seconds", seconds, "--video", video, "--fps", fps)
    h = contactopt.load_model("humanoid").opt.timestep
    stride = frame_stride(h, fps)
    n = int(round(seconds / h))
    expected = len(range(0, n, stride)) + (n % stride == 0)
    reader = imageio.get_reader(str(video))
    try:
        assert reader.count_frames() == expected
        frame = reader.get_data(expected - 1)
        assert frame.shape == (480, 640, 3) and frame.std() > 5  # a picture, not a blank frame
        assert reader.get_meta_data()["codec"] == "h264"
    finally:
        reader.close()
    assert [p.name for p in tmp_path.iterdir()] == ["h.mp4"]  # no temporary left behind


def test_diverging_simulation_leaves_no_video(tmp_path):
    model = tmp_path / "stiff.xml"
    model.write_text(STIFF_XML)
    video = tmp_path / "out.mp4"
    proc = run_cli("simulate", model, "--seconds", "100", "--video", video, check=False)
    assert proc.returncode == 1
    assert "diverged" in proc.stderr and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == [model]


@pytest.mark.slow
def test_interrupted_video_leaves_no_file(tmp_path):
    video = tmp_path / "long.mp4"
    # SIGINT back to its default in the child: a runner started in the background (``cmd &``,
    # nohup) has it ignored, the child inherits that and Python then installs no handler
    proc = subprocess.Popen(CLI + ["simulate", "humanoid", "--seconds", "600", "--video", str(video)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.name.startswith(".long.partial") for p in tmp_path.iterdir()):
        time.sleep(0.1)
    assert any(tmp_path.iterdir()), "video writing never started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # never leave a 600 s simulation running
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert list(tmp_path.iterdir()) == []


def test_bench_mujoco_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = run_cli("bench", "mujoco", "--model", "acrobot", "--model", "ball", "--json",
                   "--out", out, "--min-time", "0.02")
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == result
    keys = {"name", "nv", "step_per_s", "forward_per_s", "inverse_per_s",
            "transition_fd_ms", "inverse_fd_ms", "threads"}
    rows = result["models"]
    assert {r["name"] for r in rows} == {"acrobot", "ball"}
    for row in rows:
        assert keys <= set(row)
        assert row["step_per_s"] > 0 and row["transition_fd_ms"] > 0 and row["threads"] >= 1
    assert {r["threads"] for r in rows} == ({1, os.cpu_count()} if os.cpu_count() > 1 else {1})
    table = run_cli("bench", "mujoco", "--model", "acrobot", "--min-time", "0.01").stdout
    assert "mj_step/s" in table and "acrobot" in table


def test_simulate_with_convex_contact(tmp_path):
    plot = tmp_path / "ball.png"
    proc = run_cli("simulate", "ball", "--seconds", "0.5", "--contact", "convex", "--kappa", "1e-5",
                   "--plot", plot, "--json")
    summary = json.loads(proc.stdout)
    assert summary["contact"] == "convex" and summary["contact_unconverged_steps"] == 0
    assert summary["contacts_final"] == 1 and plot.exists()
    assert abs(summary["final_qpos"][2] - 0.1) < 1e-3  # resting on the floor, not in it


@pytest.mark.slow
def test_bench_contact_json_and_plot(tmp_path):
    proc = run_cli("bench", "contact", "--json", "--plots", tmp_path, "--min-time", "0.01")
    result = json.loads(proc.stdout)
    rows = result["rows"]
    assert [r["contacts"] for r in rows] == [2, 5, 10, 20]
    for row in rows:
        assert {"contacts", "iterations_median", "inverse_per_s", "forward_per_s", "reference_per_s",
                "consistency_max_rel_err"} <= set(row)
        assert row["all_converged"] and row["consistency_max_rel_err"] <= 1e-8
        assert row["inverse_per_s"] > row["forward_per_s"] > 0 and row["reference_per_s"] > 0
    assert (tmp_path / "ball_drop.png").read_bytes()[:4] == b"\x89PNG"
    assert all(b["max_penetration"] < 1e-3 for b in result["ball_drop"])


def test_output_piped_into_a_closed_reader_is_not_an_error():
    proc = subprocess.Popen(CLI + ["models"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the CLI prints (like `| head -0`)
    assert proc.wait(timeout=60) == 0
    assert b"Traceback" not in proc.stderr.read()


def test_run_lists_tasks():
    proc = run_cli("run")
    assert "No tasks are registered yet" in proc.stdout or proc.stdout.strip()


@pytest.mark.parametrize("args, words", [
    (["simulate", "no_such_model"], "unknown model 'no_such_model'"),
    (["simulate", "/nowhere/model.xml"], "model file not found"),
    (["simulate", "ball", "--seconds", "-2"], "seconds must be non-negative"),
    (["simulate", "ball", "--seconds", "nan"], "seconds must be finite"),
    (["simulate", "ball", "--video", "/nowhere/x.mp4"], "does not exist"),
    (["simulate", "ball", "--keyframe", "nope"], "no keyframe 'nope'"),
    (["bench", "nope"], "unknown benchmark 'nope'"),
    (["bench", "mujoco", "--model", "nope.xml"], "model file not found"),
    (["run", "nope"], "unknown task 'nope'"),
    (["simulate", "ball", "--kappa", "0.1"], "--kappa applies to --contact convex only"),
    (["simulate", "ball", "--contact", "convex", "--kappa", "-1"], "kappa must be positive"),
    (["bench", "mujoco", "--plots", "."], "writes no plots"),
    (["bench", "contact", "--plots", "/nowhere"], "does not exist"),
])
def test_bad_input_is_one_line_error(args, words):
    proc = run_cli(*args, check=False)
    assert proc.returncode == 1, proc.stderr
    assert words in proc.stderr
    assert proc.stderr.startswith("contactopt: error: ") and proc.stderr.count("\n") == 1


def test_a_mujoco_gl_value_mujoco_rejects_is_one_line_and_only_when_rendering(tmp_path):
    """MuJoCo's bindings raise at import for an unknown MUJOCO_GL; contactopt still imports, runs
    what needs no OpenGL, and refuses a video in one line before simulating."""
    env = {**os.environ, "MUJOCO_GL": "no-such-backend"}
    video = tmp_path / "x.mp4"
    proc = subprocess.run(CLI + ["simulate", "ball", "--seconds", "0.1", "--video", str(video)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("contactopt: error: MUJOCO_GL='no-such-backend' is not a")
    assert proc.stderr.count("\n") == 1 and "egl" in proc.stderr and not video.exists()
    proc = subprocess.run(CLI + ["simulate", "ball", "--seconds", "0.1", "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    code = "import os, contactopt; print(os.environ['MUJOCO_GL'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=env)
    assert out.returncode == 0 and out.stdout.strip() == "no-such-backend", out.stderr


def test_malformed_model_file(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco><worldbody><body></mujoco>")
    proc = run_cli("simulate", bad, check=False)
    assert proc.returncode == 1 and "could not load model file" in proc.stderr and "bad.xml" in proc.stderr
