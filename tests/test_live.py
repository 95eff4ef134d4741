"""LiveRun: the live plant + planner loop the GUI drives (no browser here).

Pausing stops the plant's clock, a push changes the velocity, a weight set through the
interface reaches the planner, a seeded reset is reproducible, bad values are refused and
out-of-range ones clamped, and the exported settings are TOML of the ``--set`` keys.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import tomllib

from contactopt.errors import ParameterError
from contactopt.mpc.live import LiveRun, format_toml
from contactopt.task import load_task_file

PENDULUM = "examples/pendulum/pendulum_task.py"


@pytest.fixture(scope="module")
def task():
    return load_task_file(PENDULUM)


def _wait(cond, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def run(task):
    r = LiveRun(task, "ilqg", seed=0, slowdown=1.0)
    r.start()
    # a fresh clone compiles the planner's kernels on the first plan (tens of seconds)
    assert _wait(lambda: r.state()[0] > 0.05, timeout=90.0), r.error
    yield r
    r.close()


def test_pause_stops_time_and_step_advances_one_plant_step(run):
    run.pause()
    time.sleep(0.1)
    t0 = run.state()[0]
    time.sleep(0.3)
    assert run.state()[0] == t0
    run.step(2)
    h = run.model.opt.timestep
    assert _wait(lambda: abs(run.state()[0] - (t0 + 2 * h)) < 1e-9)
    assert run.paused
    run.resume()
    assert _wait(lambda: run.state()[0] > t0 + 0.05)
    assert [c.what for c in run.changes[:3]] == ["pause", "step 2", "resume"]


def test_push_changes_velocity(run):
    run.pause()
    time.sleep(0.1)
    body = run.body_names()[-1]
    v0 = run.state()[1][run.model.nq:].copy()
    dv = run.push(body, (2.0, 0.0, 0.0))
    v1 = run.state()[1][run.model.nq:]
    assert np.abs(dv).max() > 1e-3
    np.testing.assert_allclose(v1 - v0, dv, atol=1e-12)
    assert "push" in run.changes[-1].what
    with pytest.raises(ParameterError, match="no body 'nope'"):
        run.push("nope", (1, 0, 0))
    with pytest.raises(ParameterError, match="3 finite numbers"):
        run.push(body, (np.nan, 0, 0))


def test_weight_set_reaches_the_planner(run):
    key = next(r.key for r in run.session.settings() if r.group == "cost")
    out = run.set({key: "3.25"})
    assert out[key] == 3.25 and out["_clamped"] == []
    assert _wait(lambda: run.session.planner is not None and run.session.planner.options.get(key) == 3.25)
    assert any(c.what == f"set {key} = 3.25" for c in run.changes)


def test_bad_values_refused_and_out_of_range_clamped(run):
    key = next(r.key for r in run.session.settings() if r.group == "cost")
    before = run.values()
    with pytest.raises(ParameterError, match=key.replace("[", r"\[")):
        run.set({key: "abc"})
    with pytest.raises(ParameterError, match="unknown setting"):
        run.set({"nope": 1})
    with pytest.raises(ParameterError, match="plant.timestep"):
        run.set({"plant.timestep": "x"})
    assert run.values() == before
    out = run.set({key: -5, "plant.timestep": 0.0, "slowdown": 1e9})
    assert out[key] == 0.0 and out["plant.timestep"] == pytest.approx(1e-4) and out["slowdown"] == 100.0
    assert sorted(out["_clamped"]) == sorted([key, "plant.timestep", "slowdown"])
    assert run.model.opt.timestep == pytest.approx(1e-4)


def test_plant_dynamics_are_separate_from_the_planner_model(run):
    m0 = run.model.body_mass.sum()
    run.set({"plant.mass_scale": 2.0})
    assert run.model.body_mass.sum() == pytest.approx(2 * m0)
    assert run.session.values()["model.mass_scale"] == 1.0


def test_seeded_reset_is_reproducible(task):
    r = LiveRun(task, "ilqg", seed=0)
    try:
        r.reset(3)
        a = r.state()
        r.reset(4)
        r.reset(3)
        b = r.state()
        assert a[0] == b[0] == 0.0
        np.testing.assert_array_equal(a[1], b[1])
        assert [c.what for c in r.changes] == ["reset seed=3", "reset seed=4", "reset seed=3"]
    finally:
        r.close()


def test_telemetry_and_export(run, tmp_path):
    assert _wait(lambda: len(run.telemetry()["updates"].get("update_ms", ())) > 3)
    tel = run.telemetry()
    plant = tel["plant"]
    assert {"t", "cost", "success", "rtf"} <= set(plant)
    terms = [k for k in plant if k.startswith("cost.")]
    assert terms
    np.testing.assert_allclose(plant["cost"][-1], sum(plant[k][-1] for k in terms))
    assert np.isfinite(tel["updates"]["update_ms"]).any()
    key = next(r.key for r in run.session.settings() if r.group == "cost")
    run.set({key: 2.5, "horizon": 0.6})
    path = run.export_settings(tmp_path / "s.toml")
    data = tomllib.loads(path.read_text())
    assert data[key] == 2.5 and data["horizon"] == 0.6


def test_format_toml_round_trips():
    values = {"weight.site[tip]": 1.5, "iterations": 2, "lag_compensation": "auto", "flag": True,
              "line_search_steps": (1.0, 0.5), "skip": None}
    back = tomllib.loads(format_toml(values))
    assert back == {"weight.site[tip]": 1.5, "iterations": 2, "lag_compensation": "auto", "flag": True,
                    "line_search_steps": [1.0, 0.5]}


def test_drag_push_impulse_is_gain_mass_displacement_over_time_scale(run):
    from contactopt.mpc.live import DRAG_GAIN, DRAG_MAX_SPEED, DRAG_TIME_SCALE, drag_impulse

    run.pause()
    time.sleep(0.1)
    body = run.body_names()[-1]
    bid = run.body_names().index(body) + 1
    mass = float(run.model.body_subtreemass[bid])
    v0 = run.state()[1][run.model.nq:].copy()
    out = run.drag_push(body, (0.1, 0.0, 0.0))
    np.testing.assert_allclose(out["impulse"], [DRAG_GAIN * mass * 0.1 / DRAG_TIME_SCALE, 0, 0])
    assert not out["clamped"]
    np.testing.assert_allclose(run.state()[1][run.model.nq:] - v0, out["dv"], atol=1e-12)
    assert np.abs(out["dv"]).max() > 1e-3
    # a huge drag is clamped to mass × the safe speed, in the drag's direction
    big = run.drag_push(body, (0.0, 0.0, -1e6))
    assert big["clamped"] and np.linalg.norm(big["impulse"]) == pytest.approx(mass * DRAG_MAX_SPEED)
    assert big["impulse"][2] < 0
    assert "clamped" in run.changes[-1].what
    p, c = drag_impulse(2.0, (0.0, 0.3, 0.0), gain=2.0, time_scale=0.6)
    np.testing.assert_allclose(p, [0.0, 2.0, 0.0])
    assert not c
    with pytest.raises(ParameterError, match="displacement"):
        run.drag_push(body, (np.inf, 0, 0))
    with pytest.raises(ParameterError, match="no body 'nope'"):
        run.drag_push("nope", (1, 0, 0))
    with pytest.raises(ParameterError, match="time_scale"):
        drag_impulse(1.0, (1, 0, 0), time_scale=0.0)


def test_a_task_without_point_goals_has_none(run):
    assert run.goals() == {}
    with pytest.raises(ParameterError, match="unknown goal 'target.nope'"):
        run.set_goal("target.nope", (0, 0, 1))


@pytest.fixture(scope="module")
def acrobot():
    from contactopt.tasks import load_task

    return load_task("acrobot").task()


def test_goal_moves_the_planners_target_at_the_next_update(acrobot, tmp_path):
    r = LiveRun(acrobot, "ilqg", seed=0)
    try:
        goals = r.goals()
        key = "target.site[tip]"  # generated from the cost's SitePosition term, not written per task
        assert list(goals) == [key]
        assert goals[key]["residual"] == "SitePosition" and goals[key]["axes"].tolist() == [True, False, True]
        default = goals[key]["default"].copy()
        r.start()
        assert _wait(lambda: r.session.planner is not None and r.state()[0] > 0.05), r.error
        rebuilds = r.session.status()["rebuilds"]
        out = r.set_goal(key, (0.5, 0.0, 3.0))
        np.testing.assert_allclose(out, [0.5, 0.0, 3.0])
        assert _wait(lambda: r.session.status()["rebuilds"] > rebuilds), r.error
        cost = r.session.planner.solver.cost  # the iLQG planner's trajectory cost
        for stage in (cost.running.terms, cost.terminal.terms):
            tip = next(t for t in stage if t.name == "site[tip]")
            np.testing.assert_allclose(tip.residual.target, [0.5, 0.0, 3.0])
        # the task as given is untouched; the plotted cost uses the new target
        model = r.base_task.load_plant()
        np.testing.assert_allclose(
            next(t for t in r.base_task.cost_terms(model) if t.name == "site[tip]").residual.target, default)
        np.testing.assert_allclose(r.goals()[key]["target"], [0.5, 0.0, 3.0])
        assert r.changes[-1].what.startswith(f"goal {key}")
        # through set(): strings parsed, clamped, all or nothing, bad values refused
        out = r.set({key: "1e9, 0, 2"})
        assert out[key] == (100.0, 0.0, 2.0) and out["_clamped"] == [key]
        before = r.goals()[key]["target"].copy()
        with pytest.raises(ParameterError, match=r"target\.site\[tip\]: expected 3"):
            r.set({key: "1, 2", "weight.qvel": 3.0})
        with pytest.raises(ParameterError, match="expected 3 finite"):
            r.set_goal(key, (np.nan, 0, 0))
        np.testing.assert_allclose(r.goals()[key]["target"], before)
        assert r.values()["weight.qvel"] != 3.0
        # exported as a real --set key: run/sweep/serve read it back through the registry
        from contactopt.cli import load_options_file
        from contactopt.mpc import registry

        path = r.export_settings(tmp_path / "goal.toml")
        _, overrides = registry.parse_settings("ilqg", acrobot, load_options_file(path))
        np.testing.assert_allclose(overrides[key], r.goals()[key]["target"])
    finally:
        r.close()


def test_goal_in_initial_settings(acrobot):
    r = LiveRun(acrobot, "ilqg", settings={"target.site[tip]": (0.0, 0.0, 3.5)})
    try:
        np.testing.assert_allclose(r.goals()["target.site[tip]"]["target"], [0.0, 0.0, 3.5])
        m = r.task.load_plant()
        np.testing.assert_allclose(next(t for t in r.task.cost_terms(m) if t.name == "site[tip]").residual.target,
                                   [0.0, 0.0, 3.5])
    finally:
        r.close()


def test_update_period_set_live_paces_the_planner(run):
    # ``update_period`` is a planner setting like any other: once set, the live loop plans from
    # states on its grid (no more often), and a push still replans at once
    with run._wake:
        before = len(run.update_log.arrays()["t"])
    run.set({"update_period": 0.1})
    assert _wait(lambda: run.session.update_period == pytest.approx(0.1))
    t0 = run.state()[0]
    assert _wait(lambda: run.state()[0] > t0 + 1.0, timeout=30.0)
    with run._wake:
        log = {k: v[before:] for k, v in run.update_log.arrays().items()}
    times = log["t"][np.isfinite(log["update_ms"])]  # the planner's rows (the plant logs lags)
    late = times[times > t0 + 0.2]  # planned after the rebuild
    # at most one plan per 100 ms of simulated time (and one more for the grid's start)
    assert 3 <= late.size <= (late[-1] - late[0]) / 0.1 + 2, late
    with pytest.raises(ParameterError, match="update_period"):
        run.set({"update_period": "soon"})


def test_min_lag_set_live_holds_each_new_policy_back(run):
    # ``min_lag`` is a planner setting: once set, every new policy of the episode takes effect no
    # sooner than min_lag after the state it was planned from (the lag the plant logs), as in the
    # runner's modes
    run.set({"min_lag": 0.05})
    assert _wait(lambda: run.session.min_lag == pytest.approx(0.05))
    with run._wake:
        before = len(run.update_log.arrays()["t"])
    t0 = run.state()[0]
    assert _wait(lambda: run.state()[0] > t0 + 0.5, timeout=30.0)
    with run._wake:
        log = {k: v[before:] for k, v in run.update_log.arrays().items()}
    lags = log["lag_ms"][np.isfinite(log["lag_ms"])]  # the plant's rows
    assert lags.size >= 3 and lags.min() >= 50.0 - 1e-6, lags
    run.set({"min_lag": 0.0})
    assert _wait(lambda: run.session.min_lag == 0.0)


def test_telemetry_ring_starts_empty_after_a_clear():
    """A reset clears the telemetry: the rows after it are the only rows, also in a column that
    first appears after the clear (it used to be padded with a NaN for every row ever appended)."""
    from contactopt.mpc.live_helpers import _Ring

    ring = _Ring(100)
    for k in range(30):
        ring.append(t=k, update_ms=1.0)
    ring.clear()
    ring.append(t=0.0, update_ms=2.0)
    ring.append(t=0.1, lag_ms=3.0)
    cols = ring.arrays()
    assert {k: len(v) for k, v in cols.items()} == {"t": 2, "update_ms": 2, "lag_ms": 2}
    np.testing.assert_array_equal(cols["t"], [0.0, 0.1])
    np.testing.assert_array_equal(cols["lag_ms"], [np.nan, 3.0])
