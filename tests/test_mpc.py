"""The MPC runner and policies: lag modeling, determinism, failure handling, pushes, async mode."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from contactopt.errors import ContactoptError, NonFiniteError, ParameterError
from contactopt.model import load_model, state_difference
from contactopt.mpc import (
    ConstantPolicy,
    ILQGPlanner,
    MPCSettings,
    PlannerUpdate,
    Push,
    TrajectoryPolicy,
    perturb_model,
    run_mpc,
)
from contactopt.simulate import SimulationError


class RecordingPlanner:
    """A planner whose constant control equals the time it planned from (traceable), with
    forced failures and NaN policies at chosen update numbers."""

    def __init__(self, nu, fail_at=(), nan_at=()):
        self.nu = nu
        self.fail_at, self.nan_at = set(fail_at), set(nan_at)
        self.calls = []

    def _policy(self, t):
        return ConstantPolicy(np.full(self.nu, t), t0=t)

    def reset(self, t, x):
        return PlannerUpdate(self._policy(t), compute_time=0.0)

    def update(self, t, x):
        n = len(self.calls)
        self.calls.append((t, np.array(x)))
        if n in self.fail_at:
            return PlannerUpdate(None, message="forced failure")
        if n in self.nan_at:
            return PlannerUpdate(ConstantPolicy(np.full(self.nu, np.nan), t0=t), compute_time=0.0)
        return PlannerUpdate(self._policy(t), compute_time=0.0)


@pytest.fixture
def acrobot():
    m = load_model("acrobot", timestep=0.002)
    m.actuator_ctrlrange[:] = [-100, 100]
    return m


def test_sync_lag_is_modeled_exactly(acrobot):
    d = mujoco.MjData(acrobot)
    planner = RecordingPlanner(acrobot.nu)
    lag = 0.01
    res = run_mpc(planner, acrobot, d, MPCSettings(duration=0.1, mode="sync", lag=lag, record_period=0.002))
    # updates start every `lag` (the previous must be done) and apply `lag` later
    starts = np.array([u.t_state for u in res.updates])
    assert np.allclose(np.diff(starts), lag, atol=1e-9)
    assert np.allclose(res.policy_lag_ms(), lag * 1e3)
    # the control at time t is the planning time of the newest policy applied by then
    for t, u in zip(res.time[:-1], res.ctrl[:-1, 0]):
        applied = [r.t_state for r in res.updates if r.t_apply <= t + 1e-12]
        assert u == pytest.approx(max(applied) if applied else 0.0)


def test_update_period_spaces_updates(acrobot):
    d = mujoco.MjData(acrobot)
    res = run_mpc(RecordingPlanner(acrobot.nu), acrobot, d,
                  MPCSettings(duration=0.1, lag=0.0, update_period=0.02))
    assert len(res.updates) == 5
    # the achieved rate counts applied updates per simulated second: 5 in 0.1 s = 50 Hz
    assert res.replan_hz == pytest.approx(50.0, rel=0.05)
    assert res.summary()["replan_hz"] == pytest.approx(50.0, rel=0.05)


@pytest.mark.realtime
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_planners_own_update_period_spaces_updates_in_both_modes(acrobot, mode):
    # the planner's ``update_period`` attribute (every registered planner's option) is read
    # before each update; async mode plans on the same grid and does not re-solve in between
    planner = RecordingPlanner(acrobot.nu)
    planner.update_period = 0.02
    extra = {"lag": 0.0} if mode == "sync" else {"slowdown": 1.0}
    res = run_mpc(planner, acrobot, mujoco.MjData(acrobot), MPCSettings(duration=0.3, mode=mode, **extra))
    times = np.array([t for t, _ in planner.calls])
    gaps = np.diff(times)
    if mode == "sync":
        assert len(times) == 15 and np.allclose(gaps, 0.02)
    else:
        # on the 20 ms grid (a late update moves it on, so single gaps may be shorter), and
        # no re-solve of one state; a starved planner thread (a loaded machine) plans fewer
        assert 3 <= len(times) <= 16 and np.all(gaps > 0), times
    # the settings' period wins when it is the larger one
    planner = RecordingPlanner(acrobot.nu)
    planner.update_period = 0.01
    res = run_mpc(planner, acrobot, mujoco.MjData(acrobot), MPCSettings(duration=0.1, lag=0.0, update_period=0.025))
    assert np.allclose(np.diff([t for t, _ in planner.calls]), 0.025, atol=acrobot.opt.timestep)
    assert res.replan_hz == pytest.approx(40.0, rel=0.15)


def test_the_update_grid_advances_one_period_and_restarts_when_late():
    from contactopt.mpc.runner import next_update_start

    assert next_update_start(-math.inf, 0.02, 1.0) == pytest.approx(1.02)  # a new grid
    assert next_update_start(1.0, 0.02, 1.005) == pytest.approx(1.02)  # on time: one period on
    assert next_update_start(1.0, 0.02, 1.05) == pytest.approx(1.05)  # late: from now, no backlog


@pytest.mark.realtime
def test_a_planner_period_that_is_not_a_number_is_ignored(acrobot):
    from contactopt.mpc.runner import planner_update_period

    settings = MPCSettings(duration=0.1, update_period=0.01)
    for bad in (None, "soon", math.nan, -1.0, math.inf):
        planner = RecordingPlanner(acrobot.nu)
        planner.update_period = bad
        assert planner_update_period(planner, settings) == 0.01
    assert planner_update_period(RecordingPlanner(acrobot.nu), settings) == 0.01


@pytest.mark.realtime
@pytest.mark.parametrize("mode, period", [("sync", 0.02), ("async", 0.02), ("async", 0.0)])
def test_min_lag_holds_each_policy_back_in_both_modes(acrobot, mode, period):
    """A planner's ``min_lag`` attribute: no policy takes effect earlier than that long after the
    state it was planned from (sync: the lag becomes max(lag, min_lag); async: the plant keeps the
    previous policy until then), and the plant really applies the held-back policy's control.
    With no update period an async planner hands over plans faster than min_lag: each still
    takes effect once due (a newer plan does not starve an older one)."""
    planner = RecordingPlanner(acrobot.nu)
    planner.update_period = period
    planner.min_lag = 0.015
    observed = []
    planner.observe_lag = observed.append  # the lag a planner's lag compensation would use
    extra = {"lag": 0.005} if mode == "sync" else {"slowdown": 1.0}
    res = run_mpc(planner, acrobot, mujoco.MjData(acrobot),
                  MPCSettings(duration=0.2, mode=mode, record_period=acrobot.opt.timestep, **extra))
    applied = [u for u in res.updates if u.ok]
    assert len(applied) >= 3
    step = acrobot.opt.timestep
    for u in applied:
        assert u.t_apply - u.t_state >= 0.015 - 1e-9
        if mode == "sync":
            assert u.t_apply - u.t_state < 0.015 + step + 1e-9
        # the plant switches at its first step at or after t_apply; just before, the previous policy ran
        k = int(np.searchsorted(res.time, u.t_apply - 1e-9))
        if k >= res.time.size:
            continue
        assert res.ctrl[k, 0] == pytest.approx(u.t_state)  # RecordingPlanner: control = planned-from time
        if k > 0 and u.t_state > 0:  # (the first plan, from t = 0, also planned from 0)
            assert res.ctrl[k - 1, 0] != pytest.approx(u.t_state)
    assert observed and min(observed) >= 0.015 - 1e-9


def test_min_lag_that_is_not_a_number_is_ignored(acrobot):
    from contactopt.mpc.runner import planner_min_lag

    for bad in (None, "soon", math.nan, -1.0, math.inf):
        planner = RecordingPlanner(acrobot.nu)
        planner.min_lag = bad
        assert planner_min_lag(planner) == 0.0
    planner.min_lag = 0.02
    assert planner_min_lag(planner) == 0.02


def test_failed_and_nan_updates_keep_the_last_good_policy(acrobot):
    d = mujoco.MjData(acrobot)
    planner = RecordingPlanner(acrobot.nu, fail_at={2, 3}, nan_at={5})
    res = run_mpc(planner, acrobot, d, MPCSettings(duration=0.08, lag=0.01, record_period=0.002))
    assert res.failed_updates == 2
    assert np.isfinite(res.ctrl).all()
    # a NaN policy falls back to the last finite control instead of stepping with NaN
    assert res.fallback_controls > 0
    assert res.summary()["failed_updates"] == 2


def test_too_many_failures_raise(acrobot):
    d = mujoco.MjData(acrobot)
    planner = RecordingPlanner(acrobot.nu, fail_at=set(range(100)))
    with pytest.raises(ContactoptError, match="in a row failed"):
        run_mpc(planner, acrobot, d, MPCSettings(duration=0.2, lag=0.01, max_failed_updates=5))


def test_sync_runs_are_deterministic_with_ilqg(acrobot):
    from contactopt.costs import Control, CostTerm, Quadratic, Qpos, StageCost, TrajectoryCost
    from contactopt.dynamics import MujocoDynamics
    from contactopt.solvers import ILQGStatus

    planner_model = load_model("acrobot", timestep=0.01)
    cost = TrajectoryCost(StageCost(planner_model, [CostTerm(Qpos(planner_model, [0.5, 0.0]), Quadratic(), 10.0),
                                                    CostTerm(Control(planner_model), Quadratic(), 0.01)]))

    def once():
        d = mujoco.MjData(acrobot)
        with MujocoDynamics(planner_model, nthread=2) as dyn:
            planner = ILQGPlanner(dyn, cost, 30, initial_iterations=5)
            return run_mpc(planner, acrobot, d, MPCSettings(duration=0.3, lag=0.01),
                           metric=lambda m, dd: float(dd.qpos[0]))

    a, b = once(), once()
    assert np.array_equal(a.qpos, b.qpos) and np.array_equal(a.ctrl, b.ctrl)
    # the shared breakdown keys and the status name
    assert all(set(u.breakdown) == {"derivatives", "solve", "line_search"} for u in a.updates)
    assert {u.message for u in a.updates} <= {s.name for s in ILQGStatus}
    assert a.qpos[-1, 0] > 0.02  # moving toward the target (passively it stays at 0)


@pytest.mark.realtime
def test_push_moves_the_plant(acrobot):
    runs = []
    for pushes in ((), (Push(0.02, 0.05, "lower_arm", force=(50.0, 0.0, 0.0)),)):
        d = mujoco.MjData(acrobot)
        runs.append(run_mpc(RecordingPlanner(acrobot.nu), acrobot, d,
                            MPCSettings(duration=0.1, lag=0.0, pushes=pushes)))
        assert np.all(d.xfrc_applied == 0.0)  # the push ended
    assert not np.allclose(runs[0].qpos[-1], runs[1].qpos[-1])
    with pytest.raises(ParameterError, match="no such body"):
        run_mpc(RecordingPlanner(acrobot.nu), acrobot, mujoco.MjData(acrobot),
                MPCSettings(duration=0.1, pushes=(Push(0.0, 0.1, "nope"),)))


def test_success_hold_and_stop(acrobot):
    d = mujoco.MjData(acrobot)
    res = run_mpc(RecordingPlanner(acrobot.nu), acrobot, d,
                  MPCSettings(duration=1.0, lag=0.0, success_hold=0.05, stop_on_success=True),
                  success=lambda m, dd: dd.time >= 0.1)
    assert res.success and res.time_to_success == pytest.approx(0.1, abs=0.003)
    assert res.simulated_time < 0.2


def test_failure_is_latched(acrobot):
    """A failure (true only in 0.2 <= t < 0.3) forbids every success that starts after it,
    although the success test is true from t = 0.25 on; a success held before it stands."""
    fails = lambda m, dd: 0.2 <= dd.time < 0.3  # noqa: E731
    res = run_mpc(RecordingPlanner(acrobot.nu), acrobot, mujoco.MjData(acrobot),
                  MPCSettings(duration=0.6, lag=0.0, success_hold=0.05),
                  success=lambda m, dd: dd.time >= 0.25, failure=fails)
    assert not res.success and res.time_of_failure == pytest.approx(0.2, abs=0.003)
    assert res.summary()["time_of_failure"] == pytest.approx(0.2, abs=0.003)
    res = run_mpc(RecordingPlanner(acrobot.nu), acrobot, mujoco.MjData(acrobot),
                  MPCSettings(duration=0.6, lag=0.0, success_hold=0.05),
                  success=lambda m, dd: dd.time >= 0.1, failure=fails)
    assert res.success and res.time_to_success == pytest.approx(0.1, abs=0.003)
    assert res.time_of_failure == pytest.approx(0.2, abs=0.003)
    res = run_mpc(RecordingPlanner(acrobot.nu), acrobot, mujoco.MjData(acrobot),
                  MPCSettings(duration=0.6, lag=0.0, stop_on_failure=True), failure=fails)
    assert res.simulated_time == pytest.approx(0.2, abs=0.01)


@pytest.mark.realtime
def test_async_mode_measures_lag(acrobot):
    d = mujoco.MjData(acrobot)

    class Slow(RecordingPlanner):
        def update(self, t, x):
            import time

            time.sleep(0.005)
            return super().update(t, x)

    res = run_mpc(Slow(acrobot.nu), acrobot, d, MPCSettings(duration=0.2, mode="async", slowdown=1.0))
    assert len(res.updates) >= 3
    lag = res.policy_lag_ms()
    # At least the 5 ms of computation in simulated time at slowdown 1 — while the plant keeps
    # pace; a starved plant thread (a loaded machine) catches up in bursts, so single lags can
    # be shorter: the median is the robust check.
    assert np.all(lag >= 0.0)
    assert np.median(lag) >= 3.9 * min(1.0, res.realtime_factor)
    # paced to real time: never faster; slower only by what a loaded machine takes away
    assert 0.2 < res.realtime_factor <= 1.1


@pytest.mark.realtime
def test_async_mode_a_fast_planner_waits_for_the_plant(acrobot):
    # A planner done before the plant has moved waits for the next step (at most REPLAN_WAIT)
    # instead of re-solving the same state in a tight loop, which kept the plant thread waiting
    # for the interpreter (a 0.04 ms GDD update ran the humanoid at 2 % of real time).
    from contactopt.mpc.runner import REPLAN_WAIT

    planner = RecordingPlanner(acrobot.nu)
    res = run_mpc(planner, acrobot, mujoco.MjData(acrobot), MPCSettings(duration=0.2, mode="async", slowdown=1.0))
    times = np.array([t for t, _ in planner.calls])
    steps = round(0.2 / acrobot.opt.timestep)
    assert len(times) >= 3 and np.all(np.diff(times) >= 0)
    # each update follows a new plant state or a wait of REPLAN_WAIT on the same one
    same = int(np.sum(np.diff(times) == 0))
    assert same <= res.wall_time / REPLAN_WAIT + 1, (same, res.wall_time)
    assert len(times) <= steps + same + 1
    assert res.simulated_time == pytest.approx(0.2, abs=2 * acrobot.opt.timestep)


@pytest.mark.realtime
def test_async_planner_error_is_raised(acrobot):
    class Broken(RecordingPlanner):
        def update(self, t, x):
            raise RuntimeError("planner bug")

    with pytest.raises(RuntimeError, match="planner bug"):
        run_mpc(Broken(acrobot.nu), acrobot, mujoco.MjData(acrobot),
                MPCSettings(duration=0.2, mode="async", slowdown=0.5))


def test_trajectory_policy_matches_brute_force():
    m = load_model("humanoid")
    rng = np.random.default_rng(0)
    T, h = 6, 0.01
    nx, ndx = m.nq + m.nv, 2 * m.nv
    X = np.zeros((T + 1, nx))
    for i in range(T + 1):
        q = m.qpos0.copy()
        q[3:7] = rng.normal(size=4)
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] += 0.1 * rng.normal(size=m.nq - 7)
        X[i] = np.concatenate([q, rng.normal(size=m.nv)])
    U = rng.normal(size=(T, m.nu))
    K = rng.normal(size=(T, m.nu, ndx))
    pol = TrajectoryPolicy(m, 1.0, h, U, X, K)
    x = X[2].copy()
    x[m.nq:] += 0.3
    # at a knot: exactly U_i + K_i (x ⊖ X_i)
    assert np.allclose(pol.control(1.0 + 2 * h, x), U[2] + K[2] @ state_difference(m, X[2], x))
    # between knots: interpolated control, reference state interpolated in the tangent space (first order)
    t = 1.0 + 2.5 * h
    u = pol.control(t, x)
    d = state_difference(m, X[2], X[3])
    from contactopt.model import state_integrate

    ref = state_integrate(m, X[2], 0.5 * d)
    brute = 0.5 * (U[2] + U[3]) + K[2] @ state_difference(m, ref, x)
    assert np.allclose(u, brute, rtol=0.05, atol=0.05 * np.abs(brute).max())
    # before t0 the first knot, after the horizon the last control against the last state
    assert np.allclose(pol.feedforward(0.0), U[0])
    assert np.allclose(pol.control(5.0, X[T]), U[T - 1])
    with pytest.raises(ParameterError, match="need the planned states"):
        TrajectoryPolicy(m, 0.0, h, U, K=K)


def test_clamped_policy():
    m = load_model("acrobot")
    pol = TrajectoryPolicy(m, 0.0, 0.01, [[10.0], [-10.0]], lower=[-5.0], upper=[5.0])
    assert pol.control(0.0, None)[0] == 5.0 and pol.control(0.01, None)[0] == -5.0


@pytest.mark.parametrize("kwargs, words", [
    ({"duration": 0.0}, "positive"),
    ({"duration": math.nan}, "positive"),
    ({"duration": 1.0, "mode": "fast"}, "'sync' or 'async'"),
    ({"duration": 1.0, "lag": -1.0}, "lag must be"),
    ({"duration": 1.0, "lag": "soon"}, "lag must be"),
    ({"duration": 1.0, "slowdown": -2.0}, "slowdown"),
    ({"duration": 1.0, "record_period": 0.0}, "record_period"),
    ({"duration": 1.0, "pushes": ("x",)}, "Push"),
])
def test_bad_settings(kwargs, words):
    with pytest.raises(ParameterError, match=words):
        MPCSettings(**kwargs)


@pytest.mark.realtime
def test_bad_initial_state_and_initial_plan(acrobot):
    d = mujoco.MjData(acrobot)
    d.qpos[0] = np.nan
    with pytest.raises(NonFiniteError):
        run_mpc(RecordingPlanner(acrobot.nu), acrobot, d, MPCSettings(duration=0.1))

    class NoPlan(RecordingPlanner):
        def reset(self, t, x):
            return PlannerUpdate(None, message="cannot")

    with pytest.raises(ContactoptError, match="initial plan failed: cannot"):
        run_mpc(NoPlan(acrobot.nu), acrobot, mujoco.MjData(acrobot), MPCSettings(duration=0.1))


def test_diverging_plant_raises(acrobot):
    # MuJoCo resets a blown-up state to qpos0 with a warning; the runner must not carry on
    push = Push(0.01, 0.01, "lower_arm", force=(1e14, 0.0, 0.0))
    with pytest.raises(SimulationError, match="diverged"):
        run_mpc(RecordingPlanner(acrobot.nu), acrobot, mujoco.MjData(acrobot),
                MPCSettings(duration=0.5, lag=0.0, pushes=(push,)))


def test_perturb_model():
    m = load_model("hopper")
    p = perturb_model(m, mass_scale=1.2, friction_scale=0.5, timestep=0.001)
    assert np.allclose(p.body_mass, 1.2 * m.body_mass) and np.allclose(p.geom_friction, 0.5 * m.geom_friction)
    assert p.opt.timestep == 0.001 and m.opt.timestep != 0.001
    with pytest.raises(ParameterError, match="mass_scale"):
        perturb_model(m, mass_scale=0.0)
    with pytest.raises(ParameterError, match="timestep"):
        perturb_model(m, timestep=-1.0)


def _hopper_planner(refresh, horizon=40):
    import contactopt.tasks.hopper_hop as hh
    from contactopt.tasks.mpc_task import build_ilqg_planner

    return build_ilqg_planner(hh.HOPPER_HOP, horizon=horizon, lag_compensation=None, nthread=2,
                              derivative_refresh=refresh)


def test_derivative_refresh_differentiates_a_fraction_and_reuses_jacobians_at_the_same_time():
    """ρ = 0.5: each update differentiates ⌈T/2⌉ steps (the uncovered tail first), the other rows
    are the previous update's Jacobians shifted to the same absolute time, and no Jacobian is
    older than the class docstring's bound ⌈(T − s)/(⌈ρT⌉ − s)⌉ − 1 updates (shifts s ≤ 3: 2)."""
    import contactopt.tasks.hopper_hop as hh

    T = 40
    planner = _hopper_planner(0.5, T)
    plant = hh.HOPPER_HOP.plant_model()
    d = mujoco.MjData(plant)
    hh.HOPPER_HOP.initial_state(plant, d, np.random.default_rng(7))
    x = lambda: np.concatenate([d.qpos, d.qvel])  # noqa: E731
    t = 0.0
    planner.reset(t, x())
    assert planner.result.fresh_rows.all()                  # a fresh plan differentiates every step
    calls = []
    real = planner.dynamics.derivatives_async

    def spy(X, U, **kw):
        calls.append(kw.get("rows"))
        return real(X, U, **kw)

    planner.dynamics.derivatives_async = spy
    h = planner.h
    for k in range(12):
        prev, prev_births = planner.result, planner._row_births.copy()
        steps = 1 + k % 3                                   # shifts of 1, 2, 3 knots
        for _ in range(int(round(steps * h / plant.opt.timestep))):
            d.ctrl[:] = planner.policy.control(t, x())
            mujoco.mj_step(plant, d)
            t += plant.opt.timestep
        upd = planner.update(t, x())
        assert upd.policy is not None
        res = planner.result
        rows = calls[-1]
        assert rows is not None and len(rows) == math.ceil(T / 2)
        assert set(range(T - steps, T)) <= set(rows.tolist())   # steps the previous plan lacked
        fresh = res.fresh_rows
        assert np.array_equal(np.nonzero(fresh)[0], rows)
        src = np.arange(T) + steps
        reused = ~fresh
        np.testing.assert_array_equal(res.A[reused], prev.A[src[reused]])
        np.testing.assert_array_equal(res.B[reused], prev.B[src[reused]])
        births = planner._row_births
        assert np.all(births[fresh] == planner._update_count)
        np.testing.assert_array_equal(births[reused], prev_births[src[reused]])
        if k >= 2:
            assert planner._update_count - births.min() <= math.ceil((T - 3) / (T // 2 - 3)) - 1
    planner.close()


def test_derivative_refresh_one_is_the_plain_planner_and_bad_fractions_are_refused():
    import contactopt.tasks.hopper_hop as hh
    from contactopt.tasks.mpc_task import run_ilqg_task

    a, _ = run_ilqg_task(hh.HOPPER_HOP, seconds=0.2, seed=3, lag=0.01, derivative_refresh=1.0)
    b, _ = run_ilqg_task(hh.HOPPER_HOP, seconds=0.2, seed=3, lag=0.01)
    assert np.array_equal(a.qpos, b.qpos)
    for bad in (0, -0.5, 1.5, float("nan"), True, "half"):
        with pytest.raises(ParameterError, match="derivative_refresh"):
            _hopper_planner(bad)
