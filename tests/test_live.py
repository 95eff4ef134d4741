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
    assert _wait(lambda: r.state()[0] > 0.05), r.error
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
