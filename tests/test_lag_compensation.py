"""Lag compensation of the iLQG MPC planner: the predicted state, the plan's time index, the
runner's lag report, and bit-identical behaviour with compensation off."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from contactopt.costs import Control, CostTerm, Qpos, Quadratic, Qvel, StageCost, TrajectoryCost
from contactopt.dynamics import MujocoDynamics
from contactopt.errors import ParameterError
from contactopt.model import load_model
from contactopt.mpc import ILQGPlanner, MPCSettings, PlannerUpdate, run_mpc
from contactopt.mpc.lag import AUTO_LAG_WINDOW

H = 0.01  # planner step = plant step: the planner model is the plant (a perfect model)


@pytest.fixture
def model():
    m = load_model("acrobot", timestep=H)
    m.actuator_ctrlrange[:] = [-20, 20]
    return m


def _cost(m):
    running = StageCost(m, [CostTerm(Qpos(m, [0.6, -0.3]), Quadratic(), 10.0),
                            CostTerm(Qvel(m), Quadratic(), 0.1),
                            CostTerm(Control(m), Quadratic(), 0.01)])
    return TrajectoryCost(running)


def _state(m, d):
    return np.concatenate([d.qpos, d.qvel])


def _simulate(m, d, policy, seconds):
    """Advance the plant ``d`` by ``seconds`` applying ``policy`` at every step, as the runner does."""
    for _ in range(int(round(seconds / m.opt.timestep))):
        d.ctrl[:] = policy.control(float(d.time), _state(m, d))
        mujoco.mj_step(m, d)


@pytest.mark.parametrize("prediction, substeps", [("feedback", 1), ("feedforward", 1), ("feedback", 2)])
def test_prediction_is_the_plant_state_when_the_plant_applies_the_previous_policy(model, prediction, substeps):
    """The planner model is the plant: the plant steps ``h / substeps`` (``substeps = 2``: the
    plant is the planner model at half its step, the prediction substeps to match)."""
    lag = 3 * H
    plant = model
    if substeps > 1:
        plant = load_model("acrobot", timestep=H / substeps)
        plant.actuator_ctrlrange[:] = model.actuator_ctrlrange
    d = mujoco.MjData(plant)
    d.qpos[:] = [0.1, -0.2]
    d.qvel[:] = [0.3, 0.0]
    with MujocoDynamics(model, nthread=1) as dyn:
        planner = ILQGPlanner(dyn, _cost(model), 40, initial_iterations=5, lag_compensation=lag,
                              lag_prediction=prediction, lag_substeps=substeps)
        first = planner.reset(0.0, _state(plant, d))
        old = first.policy
        _simulate(plant, d, old, 5 * H)
        t = float(d.time)
        x_start = _state(plant, d)
        x_pred_ff = planner.predict(t, x_start, lag, prediction="feedforward")
        upd = planner.update(t, _state(plant, d))
        assert isinstance(upd, PlannerUpdate) and upd.policy is not None
        t_meas, t_pred, x_pred = planner.last_prediction
        assert t_meas == t and t_pred == pytest.approx(t + lag, abs=1e-12)
        # the plant keeps applying the previous policy during the lag
        _simulate(plant, d, old, lag)
        assert float(d.time) == pytest.approx(t_pred, abs=1e-12)
        x_plant = _state(plant, d)
        if prediction == "feedback":
            np.testing.assert_allclose(x_pred, x_plant, rtol=0, atol=1e-12)
        else:
            np.testing.assert_array_equal(x_pred, x_pred_ff)
        # the new plan starts at the predicted state and is indexed from t + lag
        assert upd.policy.t0 == pytest.approx(t + lag, abs=1e-12)
        np.testing.assert_array_equal(upd.policy.X[0], x_pred)
        # the plant at t + lag is where the new plan starts: no feedback correction needed
        if prediction == "feedback":
            np.testing.assert_allclose(upd.policy.control(t_pred, x_plant), upd.policy.U[0], rtol=0, atol=1e-9)
        # substeps matter: one prediction step per planner step misses the plant's state
        if substeps > 1:
            planner.set_lag_compensation(lag, substeps=1)
            x_coarse = planner.predict(t, x_start, lag, old)
            assert np.max(np.abs(x_coarse - x_plant)) > 1e-6


def test_runner_reports_lag_and_predictions_match_the_plant(model):
    """Closed loop, sync mode, ``"auto"``: the runner reports the modeled lag, and every
    compensated update's predicted state equals the recorded plant state at ``t + lag``."""
    lag = 2 * H
    preds = []

    class Spy(ILQGPlanner):
        def update(self, t, x):
            self.last_prediction = None
            upd = super().update(t, x)
            if self.last_prediction is not None:
                preds.append(self.last_prediction)
            return upd

    d = mujoco.MjData(model)
    d.qpos[:] = [0.1, -0.2]
    with MujocoDynamics(model, nthread=1) as dyn:
        planner = Spy(dyn, _cost(model), 30, initial_iterations=5, lag_compensation="auto")
        res = run_mpc(planner, model, d, MPCSettings(duration=0.3, lag=lag, record_period=H))
    assert planner.observed_lag == pytest.approx(lag)
    # the first update has no observed lag yet (uses the reset's compute time: none, 0 s) —
    # every later one predicts over the reported lag
    assert len(preds) >= len(res.updates) - 1 >= 10
    x_rec = np.concatenate([res.qpos, res.qvel], axis=1)
    for t, t_pred, x_pred in preds:
        assert t_pred == pytest.approx(t + lag, abs=1e-12)
        i = int(np.argmin(np.abs(res.time - t_pred)))
        assert abs(res.time[i] - t_pred) < 1e-9
        np.testing.assert_allclose(x_pred, x_rec[i], rtol=0, atol=1e-10)


def _closed_loop(model, **planner_kw):
    d = mujoco.MjData(model)
    d.qpos[:] = [0.1, -0.2]
    plans = []
    with MujocoDynamics(model, nthread=1) as dyn:
        planner = ILQGPlanner(dyn, _cost(model), 30, initial_iterations=5, **planner_kw)
        orig = planner.update

        def update(t, x):
            prev, t_prev = planner.result, planner.t_plan
            upd = orig(t, x)
            plans.append((t, np.array(x), prev, t_prev, upd))
            return upd

        planner.update = update
        res = run_mpc(planner, model, d, MPCSettings(duration=0.25, lag=3 * H, record_period=H))
        # off: each update is exactly a warm-started solve from the measured state and time
        # (the behaviour before lag compensation existed)
        if planner.lag_compensation is None:
            for t, x, prev, t_prev, upd in plans:
                ref = planner.solver.solve_from_warm_start(x, prev, shift=max(0.0, (t - t_prev) / H),
                                                           max_iterations=1)
                assert upd.policy.t0 == t
                np.testing.assert_array_equal(upd.policy.U, ref.U)
                np.testing.assert_array_equal(upd.policy.K, ref.K)
    return res


def test_compensation_off_is_bit_identical(model):
    default = _closed_loop(model)
    for off in (None, 0, 0.0):
        other = _closed_loop(model, lag_compensation=off)
        assert np.array_equal(default.qpos, other.qpos) and np.array_equal(default.ctrl, other.ctrl)
    # and compensation does change the closed loop
    on = _closed_loop(model, lag_compensation=3 * H)
    assert not np.array_equal(default.ctrl, on.ctrl)


def test_fractional_lag_and_settings(model):
    with MujocoDynamics(model, nthread=1) as dyn:
        planner = ILQGPlanner(dyn, _cost(model), 20, initial_iterations=2, lag_compensation=0.025)
        x0 = np.array([0.1, -0.2, 0.0, 0.0])
        planner.reset(0.0, x0)
        assert planner.prediction_lag() == 0.025
        # 2 full steps and a half step: not the 2- or 3-step prediction
        x25 = planner.predict(0.0, x0, 0.025)
        x20, x30 = planner.predict(0.0, x0, 0.02), planner.predict(0.0, x0, 0.03)
        assert np.all(np.isfinite(x25)) and not np.allclose(x25, x20) and not np.allclose(x25, x30)
        np.testing.assert_array_equal(planner.predict(0.0, x0, 0.0), x0)
        upd = planner.update(0.0, x0)
        # the prediction runs on to the plan's next knot (0.03 s); unaligned it stops at 0.025 s
        assert upd.policy.t0 == pytest.approx(0.03)
        planner.align_to_knots = False
        upd = planner.update(0.03, x0)
        assert upd.policy.t0 == pytest.approx(0.055)
        planner.align_to_knots = True
        # never predicts beyond the plan
        planner.set_lag_compensation(10.0)
        assert planner.prediction_lag() == pytest.approx(20 * H)
        planner.set_lag_compensation("auto")
        planner.observe_lag(0.04)
        assert planner.prediction_lag() == 0.04
        # "auto": the shortest lag of the last AUTO_LAG_WINDOW updates (never overshoot)
        for lag in (0.06, 0.03, 0.05):
            planner.observe_lag(lag)
        assert planner.prediction_lag() == 0.03 and planner.observed_lag == 0.05
        planner.observe_lag(float("nan"))                     # ignored
        for _ in range(AUTO_LAG_WINDOW - 2):                 # with the 0.05 above: window − 1 after it
            planner.observe_lag(0.05)
        assert planner.prediction_lag() == 0.03               # still inside the window
        planner.observe_lag(0.05)
        assert planner.prediction_lag() == 0.05               # the short one has left it
        for bad in (-0.01, "fixed", float("nan"), True):
            with pytest.raises(ParameterError):
                planner.set_lag_compensation(bad)
        with pytest.raises(ParameterError):
            planner.set_lag_compensation(0.01, prediction="exact")


@pytest.mark.parametrize("align", [True, False])
def test_compensated_updates_start_on_the_previous_plans_knots(align):
    """Updates every plant step (half a planner step) with a half-step lag: aligned, each plan
    starts on the first plan's knot grid, so the warm start shifts by whole steps; unaligned,
    by half steps (which blend neighbouring controls)."""
    planner_model = load_model("acrobot", timestep=H)
    plant = load_model("acrobot", timestep=H / 2)
    for m in (planner_model, plant):
        m.actuator_ctrlrange[:] = [-20, 20]
    starts = []

    class Spy(ILQGPlanner):
        def update(self, t, x):
            upd = super().update(t, x)
            starts.append(self.t_plan)
            return upd

    d = mujoco.MjData(plant)
    d.qpos[:] = [0.1, -0.2]
    with MujocoDynamics(planner_model, nthread=1) as dyn:
        planner = Spy(dyn, _cost(planner_model), 30, initial_iterations=5, lag_compensation=H / 2,
                      lag_substeps=2, align_to_knots=align)
        run_mpc(planner, plant, d, MPCSettings(duration=0.2, lag=H / 2))
    steps = np.array(starts) / H
    assert len(steps) >= 10
    on_grid = np.abs(steps - np.round(steps)) < 1e-9
    assert on_grid.all() if align else not on_grid.all()
