"""Goal-directed sessions, datasets, the ``gdd`` tasks and ``bench gdd`` (issue 6 items 3-5)."""

from __future__ import annotations

import json
from dataclasses import replace

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.errors import NonFiniteError, ParameterError
from contactopt.solvers.gdd import AccelerationTarget
from contactopt.solvers.gdd.dataset import GDDDataset, record, replay
from contactopt.solvers.gdd.sessions import (
    Drag,
    ReachSpec,
    auto_reach_spec,
    choose_goal_frames,
    hand_reach_spec,
    humanoid_reach_spec,
    run_session,
)

NO_ACTUATORS_XML = """
<mujoco model="passive">
  <worldbody>
    <geom name="floor" type="plane" size="2 2 .1"/>
    <body name="link" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_humanoid_session_stands_and_reaches():
    spec = humanoid_reach_spec(seconds=1.5)
    assert len(spec.drags) == 1 and spec.drags[0].frame == "right_hand"
    result = run_session(spec)
    assert result.error is None and result.steps == 300
    assert not result.falls
    assert result.support.all()  # both feet on the floor at every step
    goal = result.goal_results()[0]
    assert goal["completed"] and goal["final_distance"] < 0.5 * goal["initial_distance"]
    assert result.qpos[-1, 2] > 0.85  # pelvis still at standing height
    report = result.report(task="humanoid-reach")
    json.dumps(report)
    assert report["support_contact_fraction"] == 1.0 and report["fell"] is False
    gdd = report["gdd"]
    assert gdd["converged_fraction"] == 1.0 and gdd["iterations_median"] <= 5
    assert gdd["physics_violation_median"] <= 1e-8 and gdd["residual_gradient_p95"] <= 1e-6
    assert np.isfinite(result.ctrl).all()


def test_hand_session_reduces_distance_and_keeps_the_ball():
    result = run_session(hand_reach_spec(seconds=1.2))
    goal = result.goal_results()[0]
    assert goal["reached"] and goal["final_distance"] < 0.3 * goal["initial_distance"]
    assert not result.drops and result.error is None
    report = result.report()
    assert report["success"] is True and report["time_to_success"] > 0
    assert len(report["series"]["time"]) == len(report["series"]["goal_distance"])


def test_infeasible_goal_is_reported_not_reached():
    spec = hand_reach_spec(seconds=0.8)
    far = replace(spec, drags=(Drag("index_tip_site", (0.5, 0.0, 0.5), 0.2, 0.3, 0.3),))
    result = run_session(far)
    report = result.report()
    assert report["success"] is False and report["error"] is None
    assert report["goals_reached"] == 0 and report["goals"][0]["completed"]
    assert np.isfinite(result.qpos).all() and np.isfinite(result.ctrl).all()


def test_dataset_round_trip_and_replay(tmp_path):
    path = tmp_path / "hand.npz"
    data = record("hand", 300, path, seconds=0.7)
    assert len(data) == 300 and path.is_file()
    assert data.info["sessions"][0]["steps"] == 300
    loaded = GDDDataset.load(path)
    assert loaded.model == "hand" and len(loaded.specs) == 1
    assert loaded.specs[0] == data.specs[0]
    for key in ("time", "qpos", "qvel", "qacc", "ctrl", "qfrc_actuator", "goal", "qref", "active", "session"):
        np.testing.assert_array_equal(loaded.arrays[key], data.arrays[key])
    m = contactopt.load_model("hand")
    assert loaded.qpos.shape == (300, m.nq) and loaded.qfrc_actuator.shape == (300, m.nv)
    # tau = qfrc_actuator is the actuator map applied to the recorded controls (motors: gear * ctrl)
    k = 150
    d = mujoco.MjData(m)
    d.qpos[:] = loaded.qpos[k]
    d.qvel[:] = loaded.qvel[k]
    d.ctrl[:] = loaded.ctrl[k]
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(d.qfrc_actuator, loaded.qfrc_actuator[k], atol=1e-12)
    out = replay(loaded, model=m)
    assert out["records"] == 300
    assert out["replay_max_error"] <= 1e-9  # the replay reproduces the recorded solves
    assert out["forward_us"] > 0 and out["gdd_us"] > 0 and out["gdd_forward_us"] >= 0
    assert out["ratio"] == pytest.approx(out["gdd_us"] / out["forward_us"])
    with pytest.raises(ParameterError, match=".npz"):
        record("hand", 10, tmp_path / "x.txt")
    with pytest.raises(ParameterError):
        record("hand", 0)


def test_bench_gdd_on_the_hand_with_tiny_settings():
    from contactopt.bench import get_benchmark

    bench = get_benchmark("gdd")
    from contactopt.bench import gdd_bench

    result = gdd_bench.run(["hand"], records=150, seconds=0.7, min_time=0.0)
    json.dumps(result)
    (row,) = result["models"]
    for key in ("name", "forward_us", "gdd_us", "gdd_forward_us", "ratio", "iterations_median",
                "iterations_p95", "dual_updates_median", "physics_violation_median",
                "physics_violation_p95", "residual_gradient_p95", "constraints_median", "targets"):
        assert key in row
    assert row["name"] == "hand" and row["records"] == 150
    assert 0 < row["forward_us"] < 1e5 and 0 < row["gdd_us"] < 1e5
    # the ratio is the median over repeats of passes timed back to back, with its spread
    assert row["gdd_forward_us"] > 0 and row["repeats"] >= 7 and row["ratio"] == row["ratio_median"]
    assert row["ratio_iqr"][0] <= row["ratio"] <= row["ratio_iqr"][1]
    assert 1 <= row["iterations_median"] <= 10 and row["constraints_median"] >= 1
    assert row["physics_violation_p95"] <= 1e-6 and row["residual_gradient_p95"] <= 1e-6
    text = bench.table(result)
    assert "goal-directed + forward" in text and "residual gradient" in text


def test_automatic_goal_frames():
    assert set(choose_goal_frames(contactopt.load_model("humanoid"))) >= {"left_lower_arm", "right_lower_arm"}
    hand = choose_goal_frames(contactopt.load_model("hand"))
    assert len(hand) == 3 and all(name.endswith("_distal") for name in hand)
    spec = auto_reach_spec("hand", seconds=2.0)
    assert spec.drags and spec.com_weight == 0.0 and spec.drop_heights[0][0] == "ball"


# --------------------------------------------------------------------------- bad input


def test_goal_on_unknown_body_is_a_clear_error():
    spec = replace(humanoid_reach_spec(seconds=1.5), drags=(Drag("right_hnad", (0.1, 0, 0), 0.2),))
    with pytest.raises(ParameterError, match="no site or body named 'right_hnad'"):
        run_session(spec)
    with pytest.raises(ParameterError):
        auto_reach_spec("humanoid", frames=["nope"])
    with pytest.raises(NonFiniteError):
        Drag("right_hand", (np.nan, 0.0, 0.0), 0.2)
    with pytest.raises(ParameterError, match="overlap"):
        ReachSpec(model="humanoid", seconds=2.0,
                  drags=(Drag("right_hand", (0.1, 0, 0), 0.2), Drag("left_hand", (0.1, 0, 0), 0.5)))
    with pytest.raises(ParameterError, match="at least"):
        humanoid_reach_spec(seconds=0.3)


def test_model_without_actuators_is_a_clear_error(tmp_path):
    path = tmp_path / "passive.xml"
    path.write_text(NO_ACTUATORS_XML)
    with pytest.raises(ParameterError, match="no actuators"):
        auto_reach_spec(str(path))
    from contactopt.bench import gdd_bench

    with pytest.raises(ParameterError, match="no actuators"):
        gdd_bench.run([str(path)], records=10)
    from contactopt.cli import main

    assert main(["bench", "gdd", "--model", str(path)]) == 1


def test_non_finite_cost_stops_before_the_step():
    spec = hand_reach_spec(seconds=0.8)
    m = contactopt.load_model("hand")
    state = {"k": 0}

    def broken(problem):  # finite for 20 steps, then NaN
        state["k"] += 1
        return np.full(m.nv, np.nan if state["k"] > 20 else 0.0)

    bad = AccelerationTarget(m, broken, weight=1.0, name="broken policy")
    result = run_session(spec, model=m, extra_terms=[bad])
    assert result.error is not None and "broken policy" in result.error
    assert result.steps == 20  # the 21st step was not taken
    assert np.isfinite(result.ctrl).all() and np.isfinite(result.qpos).all()
    report = result.report()
    assert report["success"] is False and "not finite" in report["error"]


# --------------------------------------------------------------------------- tasks and CLI


def test_tasks_are_registered_and_run_from_the_cli(capsys):
    from contactopt.cli import main
    from contactopt.tasks import load_task

    for name, model in (("humanoid-reach", "humanoid"), ("hand-reach", "hand")):
        spec = load_task(name)
        assert spec.model == model and "gdd" in spec.planners
    assert main(["run", "hand-reach", "--planner", "gdd", "--seconds", "1.2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("task", "planner", "success", "time_to_success", "falls", "gdd", "series",
                "goal_distance_final_mean"):
        assert key in report
    assert report["task"] == "hand-reach" and report["planner"] == "gdd" and report["success"]
    assert report["gdd"]["solve_us_median"] > 0


@pytest.mark.slow
def test_humanoid_task_with_video_and_plot(tmp_path):
    from contactopt.tasks import load_task

    run = load_task("humanoid-reach").runner("gdd")
    video, plot = tmp_path / "h.mp4", tmp_path / "h.png"
    report = run(seconds=1.5, video=video, plot=plot)
    assert report["success"] and video.stat().st_size > 0 and plot.stat().st_size > 0
