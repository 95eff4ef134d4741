"""IDTO lag compensation: the predicted state against the plant's, the plan's start, bad input."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from contactopt.errors import ParameterError
from contactopt.mpc.idto_planner import IDTOPlanner
from contactopt.mpc.lag import parse_lag_compensation
from contactopt.tasks.hopper import HOPPER
from contactopt.tasks.idto_task import _load, build_idto_planner, run_idto_task


def _hopper_state():
    """``(model, x)``: the hopper's model and its seed-0 initial ``[qpos, qvel]``."""
    model = _load(HOPPER.model)
    data = mujoco.MjData(model)
    HOPPER.initial_state(model, data, np.random.default_rng(0))
    return model, np.concatenate([data.qpos, data.qvel])


def _recording(monkeypatch):
    """Record ``(t, t_pred, x_pred, plan start)`` of every compensated update."""
    seen = []
    compensate = IDTOPlanner._compensate

    def spy(self, t, x):
        self.last_prediction = None
        out = compensate(self, t, x)
        if self.last_prediction is not None:
            seen.append(self.last_prediction)
        return out

    monkeypatch.setattr(IDTOPlanner, "_compensate", spy)
    return seen


def test_prediction_matches_the_plant_in_a_fixed_lag_run(monkeypatch):
    """Sync mode with a fixed lag: the planner's model is the plant's and the policy it simulates is
    the one the plant applies, so the predicted state at ``t + L`` is the plant's own state then."""
    seen = _recording(monkeypatch)
    res, plant, _ = run_idto_task(HOPPER, seconds=1.0, seed=0, lag_compensation="auto")
    assert len(seen) >= 5
    nq = plant.nq
    compared = 0
    for t, t_pred, x_pred in seen:
        # the observed fixed lag, rounded up to the plant's next step (where the plant switches policies)
        assert HOPPER.lag - 1e-9 <= t_pred - t < HOPPER.lag + plant.opt.timestep
        k = int(np.argmin(np.abs(res.time - t_pred)))
        if abs(res.time[k] - t_pred) > 1e-9:
            continue  # not a recorded time (the record keeps every 10 ms)
        np.testing.assert_allclose(x_pred[:nq], res.qpos[k], atol=1e-9)
        np.testing.assert_allclose(x_pred[nq:], res.qvel[k], atol=1e-7)
        compared += 1
    assert compared >= 5


def test_the_plan_starts_at_the_predicted_time():
    planner = build_idto_planner(HOPPER, lag_compensation=0.05, initial_iterations=3)
    model, x = _hopper_state()
    first = planner.reset(0.0, x)
    assert first.policy is not None and first.policy.t0 == 0.0
    upd = planner.update(0.025, x)  # the state is not the one predicted: the plan still starts later
    assert upd.policy is not None
    t0, t_pred, x_pred = planner.last_prediction
    # 0.025 + 0.05 (25 of the plant's 2 ms steps)
    assert t0 == 0.025 and t_pred == pytest.approx(0.075)
    assert upd.policy.t0 == pytest.approx(0.075)
    np.testing.assert_allclose(upd.policy.q[0], x_pred[:model.nq])
    planner.close()


def test_off_plans_from_the_measured_state():
    planner = build_idto_planner(HOPPER, initial_iterations=3)
    assert planner.lag_compensation is None
    model, x = _hopper_state()
    planner.reset(0.0, x)
    upd = planner.update(0.025, x)
    assert planner.last_prediction is None and upd.policy.t0 == 0.025
    np.testing.assert_allclose(upd.policy.q[0], x[:model.nq])
    planner.close()


def test_a_bad_state_is_a_failed_update_with_compensation_too():
    planner = build_idto_planner(HOPPER, lag_compensation="auto", initial_iterations=3)
    _, x = _hopper_state()
    assert planner.reset(0.0, x).policy is not None
    bad = x.copy()
    bad[0] = math.nan
    upd = planner.update(0.025, bad)
    assert upd.policy is None and "nan" in upd.message.lower()
    planner.close()


@pytest.mark.parametrize("value", [-0.1, math.inf, math.nan, "sometimes", True, [0.1]])
def test_bad_lag_compensation_is_refused(value):
    with pytest.raises(ParameterError, match="lag_compensation"):
        parse_lag_compensation(value)
    with pytest.raises(ParameterError, match="lag_compensation"):
        build_idto_planner(HOPPER, lag_compensation=value)


@pytest.mark.parametrize("value,expected", [(None, None), (0, None), ("off", None), ("auto", "auto"), (0.02, 0.02)])
def test_lag_compensation_values(value, expected):
    assert parse_lag_compensation(value) == expected


def test_registry_option():
    from contactopt.mpc.registry import spec

    assert spec("idto").option("lag_compensation").default == "off"
