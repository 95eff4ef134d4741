"""PlannerSession: the control interface of the GUI and the policy server.

Settings are checked when made and reach the planner at the next update; a planner that
refuses a switch leaves the one in use running; the planner model's dynamics parameters
change the planner's model and nothing else.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from contactopt.errors import ParameterError
from contactopt.mpc.session import DYNAMICS_KEYS, PlannerSession, apply_dynamics
from contactopt.task import load_task_file

PENDULUM = "examples/pendulum/pendulum_task.py"


@pytest.fixture(scope="module")
def task():
    return load_task_file(PENDULUM)


def _state(task, seed=0):
    m = task.load_plant()
    d = mujoco.MjData(m)
    task.reset(m, d, seed)
    return np.concatenate([d.qpos, d.qvel, d.act])


def test_weight_and_option_reach_the_planner(task):
    s = PlannerSession(task, "ilqg")
    x = _state(task)
    first = s.reset(0.0, x)
    assert first.policy is not None and s.policy is first.policy
    key = next(r.key for r in s.settings() if r.group == "cost")
    s.set({key: "7.5", "horizon": 0.4})
    assert s.values()[key] == 7.5 and s.values()["horizon"] == 0.4
    upd = s.update(0.0, x)
    assert upd.policy is not None
    assert s.planner.options[key] == 7.5
    assert s.planner.options["horizon"] == 0.4
    assert s.status()["rebuilds"] == 1 and s.status()["updates"] == 2
    times, qpos = s.planned_trajectory()
    assert qpos.shape[1] == task.load_plant().nq and times.shape[0] == qpos.shape[0]
    s.close()


def test_bad_settings_are_refused_and_nothing_changes(task):
    s = PlannerSession(task, "ilqg")
    before = s.values()
    with pytest.raises(ParameterError, match="unknown setting 'nope'.*valid:.*horizon"):
        s.set({"horizon": 0.3, "nope": 1})
    with pytest.raises(ParameterError, match="iterations"):
        s.set({"iterations": "many"})
    with pytest.raises(ParameterError, match="model.mass_scale"):
        s.set({"model.mass_scale": float("nan")})
    with pytest.raises(ParameterError, match="weight"):
        s.set({next(r.key for r in s.settings() if r.group == "cost"): -1})
    with pytest.raises(ParameterError, match="unknown planner"):
        s.set_planner("lqr")
    assert s.values() == before
    s.close()


def test_switching_planner_keeps_weights(task):
    s = PlannerSession(task, "ilqg")
    x = _state(task)
    s.reset(0.0, x)
    key = next(r.key for r in s.settings() if r.group == "cost")
    s.set({key: 3.0})
    s.set_planner("idto")
    assert s.planner_name == "idto" and s.values()[key] == 3.0
    assert any(r.key == "trust_radius" for r in s.settings())
    upd = s.update(0.0, x)
    assert upd.policy is not None and s.planner.planner_name == "idto"
    s.close()


def test_planner_model_dynamics_change_only_the_planner(task):
    plant = task.load_plant()
    m = apply_dynamics(plant, {"model.mass_scale": 2.0, "model.friction_scale": 0.5,
                               "model.contact_timeconst": 0.05})
    assert np.allclose(m.body_mass, 2 * plant.body_mass)
    assert np.allclose(m.geom_friction, 0.5 * plant.geom_friction)
    assert np.all(m.geom_solref[:, 0] == 0.05)
    assert np.array_equal(plant.geom_solref, task.load_plant().geom_solref)  # the argument is untouched
    s = PlannerSession(task, "ilqg", settings={"model.mass_scale": 2.0})
    s.reset(0.0, _state(task))
    assert np.allclose(s.planner.model.body_mass, 2 * plant.body_mass)
    assert set(DYNAMICS_KEYS) <= set(s.values())
    s.close()


def test_values_build_the_task_cost_once(task):
    """``values()`` is read at every telemetry sample of a live run (50 Hz, in the plant's
    thread): it must not call the task's cost function each time (building the acrobot's cost
    there made the live planner's updates 2.5 times slower than headless ones)."""
    import dataclasses

    calls = []

    def counted(model):
        calls.append(1)
        return task.cost(model)

    s = PlannerSession(dataclasses.replace(task, cost=counted), "ilqg")
    first = s.values()
    s.set({next(k for k in first if k.startswith("weight.")): 3.0})
    built = len(calls)
    for _ in range(20):
        values = s.values()
    s.settings()
    assert len(calls) == built
    assert values != first and set(values) == set(first)
    s.close()
