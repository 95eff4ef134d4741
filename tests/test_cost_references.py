"""Targets that move: ``Residual.with_reference`` / ``reference=``, scheduled at a plan's stage
times (``TrajectoryCost.schedule``) and consumed by each planner the same way as fixed targets at
those times."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.costs import (CenterOfMass, Combination, Control, CostTerm, MechanicalEnergy, Qpos, Quadratic,
                              Qvel, SitePosition, SmoothAbs, StageCost, TrajectoryCost)
from contactopt.costs.stage import _evaluate_stages
from contactopt.errors import ContactoptError, NonFiniteError, ParameterError, ShapeError
from contactopt.solvers.idto import IDTOProblem
from contactopt.solvers.idto.knot_cost import knot_nominal, quadratic_tracking
from contactopt.solvers.idto import gauss_newton_system


def _qpos_ref(t, t0, x0):
    return np.array([x0[0] + 0.7 * (t - t0), np.sin(t)])


def _vel_ref(t, t0, x0):
    return np.array([np.cos(t), 0.1 * t])


def _site_ref(t, t0, x0):
    return np.array([0.2 * t, 0.0, 3.0 + x0[1]])


def _moving_terms(m):
    return [CostTerm(Qpos(m, reference=_qpos_ref), SmoothAbs(0.3), 2.0),
            CostTerm(Qvel(m, reference=_vel_ref), Quadratic(), 0.1),
            CostTerm(Control(m, reference=lambda t, t0, x0: np.array([0.5 * t])), Quadratic(), 0.01),
            CostTerm(SitePosition(m, "tip").with_reference(_site_ref), Quadratic(), 1.0)]


def _fixed_terms(m, t, t0, x0):
    return [CostTerm(Qpos(m, _qpos_ref(t, t0, x0)), SmoothAbs(0.3), 2.0),
            CostTerm(Qvel(m, _vel_ref(t, t0, x0)), Quadratic(), 0.1),
            CostTerm(Control(m, [0.5 * t]), Quadratic(), 0.01),
            CostTerm(SitePosition(m, "tip", _site_ref(t, t0, x0)), Quadratic(), 1.0)]


@pytest.fixture
def acrobot():
    return contactopt.load_model("acrobot")


def _trajectory(m, T, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(T + 1, m.nq + m.nv)), rng.normal(size=(T, m.nu))


def test_each_stage_is_evaluated_against_the_target_of_its_time(acrobot):
    """Running stages k < T and the terminal stage T: values and derivatives equal a cost with the
    fixed targets of t0 + k h, batched and stage by stage alike."""
    m, T, h, t0 = acrobot, 5, 0.1, 1.3
    X, U = _trajectory(m, T)
    cost = TrajectoryCost(StageCost(m, _moving_terms(m)), StageCost(m, _moving_terms(m)[:2]), timestep=h)
    assert cost.has_references
    cost.schedule(t0, X[0], T + 1)
    got = cost.evaluate(X, U)
    for k in range(T + 1):
        t = t0 + k * h
        fixed = _fixed_terms(m, t, t0, X[0])
        if k < T:
            ref = h * StageCost(m, fixed).evaluate(X[k], U[k]).l
            d = StageCost(m, fixed).evaluate(X[k], U[k])
            np.testing.assert_allclose(got.lx[k], h * d.lx, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(got.lu[k], h * d.lu, rtol=1e-12, atol=1e-14)
        else:
            ref = StageCost(m, fixed[:2]).value(X[k])
        assert got.l[k] == pytest.approx(ref, rel=1e-12)
    batched = _evaluate_stages(cost.running, cost.running._data, X[:T], U, True)
    staged = _evaluate_stages(cost.running, cost.running._data, X[:T], U, True, batched=False)
    for a, b in zip(batched, staged):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    # an evaluation outside a plan is of the schedule's first stage
    first = StageCost(m, _fixed_terms(m, t0, t0, X[0])).value(X[1], U[1])
    assert cost.running.value(X[1], U[1]) == pytest.approx(first, rel=1e-12)


def test_a_combination_forwards_its_parts_schedules(acrobot):
    m = acrobot
    comb = Combination([(1.0, SitePosition(m, "tip").with_reference(_site_ref)), (-1.0, CenterOfMass(m))])
    stage = StageCost(m, [CostTerm(comb, Quadratic(), 1.0)])
    assert stage.moving_residuals == [comb.parts[0][1]]
    x = np.concatenate([[0.3, -0.4], np.zeros(m.nv)])
    stage.schedule([2.0], 2.0, x)
    assert comb.scheduled
    fixed = Combination([(1.0, SitePosition(m, "tip", _site_ref(2.0, 2.0, x))), (-1.0, CenterOfMass(m))])
    np.testing.assert_allclose(comb(x), fixed(x), rtol=1e-12)


def test_without_a_reference_schedule_changes_nothing(acrobot):
    m = acrobot
    X, U = _trajectory(m, 4)
    cost = TrajectoryCost(StageCost(m, [CostTerm(Qpos(m, [1.0, 0.0]), Quadratic(), 1.0)]), timestep=0.1)
    before = cost.stage_values(X, U)
    assert not cost.has_references
    cost.schedule(3.0, X[0], 5)
    np.testing.assert_array_equal(cost.stage_values(X, U), before)


def test_bad_references_are_named(acrobot):
    m = acrobot
    x = np.zeros(m.nq + m.nv)
    with pytest.raises(ParameterError, match="reference must be callable"):
        Qpos(m, reference=3.0)
    with pytest.raises(ParameterError, match="MechanicalEnergy has no target that can follow"):
        MechanicalEnergy(m).with_reference(_qpos_ref)
    bad_shape = Qpos(m, reference=lambda t, t0, x0: np.zeros(3), name="pose")
    with pytest.raises(ShapeError, match="pose reference at t = 0.5"):
        bad_shape.schedule([0.5], 0.5, x)
    nan = Qvel(m, reference=lambda t, t0, x0: np.array([np.nan, 0.0]), name="spin")
    with pytest.raises(NonFiniteError, match="spin reference"):
        nan.schedule([0.0], 0.0, x)

    def boom(t, t0, x0):
        raise KeyError("oops")

    with pytest.raises(ContactoptError, match="residual pose2: reference.*raised KeyError"):
        Qpos(m, reference=boom, name="pose2").schedule([0.0], 0.0, x)


# --------------------------------------------------------------------------- IDTO


def _idto_pair(m, T, h, t0, q0):
    def terms(model):
        return [CostTerm(Qpos(model, reference=_qpos_ref, wrap=False), Quadratic(), 1.0),
                CostTerm(Qvel(model, reference=_vel_ref), Quadratic(), 0.05),
                CostTerm(Control(model), Quadratic(), 1e-2)]

    x0 = np.concatenate([q0, np.zeros(m.nv)])
    general_cost = TrajectoryCost(StageCost(m, terms(m)), timestep=h)
    general_cost.schedule(t0, x0, T + 1)
    general = IDTOProblem(m, T, h, q0, Qq=0.0, Qv=0.0, R=0.0, cost=general_cost, unactuated_penalty=10.0)
    fast_cost = TrajectoryCost(StageCost(m, terms(m)), timestep=h)
    w = quadratic_tracking(fast_cost, np.linalg.pinv(contactopt.actuation_map(m).control_gain))
    assert w is not None and [kind for kind, _, _ in w["moving"]] == ["q", "v"]
    fast_cost.schedule(t0, x0, T + 1)
    q_nom, v_nom = knot_nominal(w, T + 1)
    fast = IDTOProblem(m, T, h, q0, Qq=w["Qq"], Qv=w["Qv"], R=w["R"], Qf_q=w["Qf_q"], Qf_v=w["Qf_v"],
                       q_nom=q_nom, v_nom=v_nom, unactuated_penalty=10.0)
    return fast, general


def test_idto_fast_path_with_moving_targets_gives_the_general_paths_gauss_newton_step():
    """Per-knot nominals from the scheduled targets (fast path) and the scheduled knot rows (general
    path): the same cost and the same Gauss-Newton system."""
    T, h, t0 = 6, 0.02, 0.4
    m = contactopt.load_model("acrobot", timestep=h)
    rng = np.random.default_rng(1)
    q0 = rng.normal(size=m.nq) * 0.3
    fast, general = _idto_pair(m, T, h, t0, q0)
    q = q0 + np.cumsum(rng.normal(size=(T + 1, m.nq)) * 0.05, axis=0)
    q[0] = q0
    assert fast.cost(q) == pytest.approx(general.cost(q), rel=1e-10)
    Hf, gf = gauss_newton_system(fast, fast.linearize(q))
    Hg, gg = gauss_newton_system(general, general.linearize(q))
    np.testing.assert_allclose(gg, gf, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(Hg.to_dense(), Hf.to_dense(), rtol=1e-8, atol=1e-10)


def test_fast_path_needs_one_reference_per_coordinate(acrobot):
    m = acrobot
    G = np.linalg.pinv(contactopt.actuation_map(m).control_gain)

    def other(t, t0, x0):
        return _qpos_ref(t, t0, x0)

    same = TrajectoryCost(StageCost(m, [CostTerm(Qpos(m, reference=_qpos_ref), Quadratic(), 1.0)]),
                          StageCost(m, [CostTerm(Qpos(m, reference=_qpos_ref), Quadratic(), 5.0)]), timestep=0.1)
    assert quadratic_tracking(same, G) is not None
    differ = TrajectoryCost(StageCost(m, [CostTerm(Qpos(m, reference=_qpos_ref), Quadratic(), 1.0)]),
                            StageCost(m, [CostTerm(Qpos(m, reference=other), Quadratic(), 5.0)]), timestep=0.1)
    assert quadratic_tracking(differ, G) is None
    fixed_and_moving = TrajectoryCost(StageCost(m, [CostTerm(Qpos(m, reference=_qpos_ref), Quadratic(), 1.0)]),
                                      StageCost(m, [CostTerm(Qpos(m), Quadratic(), 5.0)]), timestep=0.1)
    assert quadratic_tracking(fixed_and_moving, G) is None


# --------------------------------------------------------------------------- planners


def _task(reference):
    def cost(model):
        return [CostTerm(Qpos(model, reference=reference, name="pose"), Quadratic(), 1.0),
                CostTerm(Control(model), Quadratic(), 1e-3)]

    return contactopt.Task(name="moving-acrobot", model="acrobot", cost=cost, duration=1.0, horizon=0.2,
                           planner_timestep=0.02)


@pytest.mark.parametrize("planner", ["ilqg", "idto", "gdd"])
def test_each_planner_schedules_the_targets_at_its_plans_times(planner):
    """reset(t, x) then update(t', x'): the residual's targets are those of the plan's stage times
    (one stage for the zero-horizon GDD), anchored at the state the plan starts from."""
    from contactopt.mpc.registry import make

    seen = []

    def reference(t, t0, x0):
        seen.append((t, t0))
        return np.array([np.pi + 0.1 * (t - t0), 0.0])

    task = _task(reference)
    options = {"static_check": False} if planner == "gdd" else {"samples": 0}
    p = make(planner, task, **options)
    try:
        x = np.concatenate([[0.2, -0.1], np.zeros(2)])
        p.reset(0.5, x)
        stages = 1 if planner == "gdd" else 11
        starts = [round(t0, 9) for _, t0 in seen]
        assert set(starts) == {0.5}
        seen.clear()
        p.update(0.52, x)
        times = sorted({round(t, 9) for t, t0 in seen if round(t0, 9) == 0.52})
        np.testing.assert_allclose(times, 0.52 + 0.02 * np.arange(stages), atol=1e-9)
    finally:
        p.close()


def test_idto_planner_on_a_moving_target_gets_the_per_knot_nominal():
    """The fast path (a quadratic Qpos with a reference): each update's problem nominal is the
    reference at its knot times."""
    from contactopt.mpc.registry import make

    task = _task(lambda t, t0, x0: np.array([x0[0] + 2.0 * (t - t0), 0.0]))
    p = make("idto", task, samples=0, initial_iterations=2)
    try:
        assert p.problem.knot_cost is None  # the fast path
        x = np.concatenate([[0.3, 0.1], np.zeros(2)])
        p.reset(1.0, x)
        np.testing.assert_allclose(p.problem.q_nom[:, 0], 0.3 + 2.0 * 0.02 * np.arange(11), atol=1e-12)
        np.testing.assert_allclose(p.problem.q_nom[:, 1], 0.0)
    finally:
        p.close()


def test_a_moving_target_is_not_a_gui_goal():
    from contactopt.mpc.live import LiveRun

    def cost(model):
        return [CostTerm(SitePosition(model, "tip").with_reference(_site_ref), Quadratic(), 1.0),
                CostTerm(SitePosition(model, "tip", [0.0, 0.0, 4.0], name="fixed_tip"), Quadratic(), 1.0),
                CostTerm(Control(model), Quadratic(), 1e-3)]

    task = contactopt.Task(name="goals", model="acrobot", cost=cost, duration=1.0, horizon=0.2,
                           planner_timestep=0.02)
    run = LiveRun(task, "ilqg", seed=0)
    try:
        assert list(run.goals()) == ["target.fixed_tip"]
    finally:
        run.close()


def test_the_recorded_metric_uses_the_target_of_the_plants_time():
    from contactopt.mpc.task_runner import _metric

    def reference(t, t0, x0):
        return np.array([t, 0.0])

    def cost(model):
        return [CostTerm(Qpos(model, reference=reference, wrap=False), Quadratic(), 2.0)]

    task = contactopt.Task(name="metric", model="acrobot", cost=cost, duration=1.0)
    m = task.load_plant()
    d = mujoco.MjData(m)
    d.time = 0.75
    metric = _metric(task, m)
    assert metric(m, d) == pytest.approx(0.75 ** 2)  # w/2 · (0 − t)², w = 2


def test_idto_options_of_the_task_forms_refuse_bad_values():
    from contactopt.mpc.registry import make

    fixed = contactopt.Task(name="fixed", model="acrobot", duration=1.0, horizon=0.2, planner_timestep=0.02,
                            cost=lambda m: [CostTerm(Qpos(m, [np.pi, 0.0]), Quadratic(), 1.0),
                                            CostTerm(Control(m), Quadratic(), 1e-3)])
    with pytest.raises(ParameterError, match="first_guess=reference: task fixed's cost has no quadratic Qpos"):
        make("idto", fixed, first_guess="reference")
    with pytest.raises(ParameterError, match="unactuated_weight must be >= 0"):
        make("idto", fixed, unactuated_weight=-1.0)
    with pytest.raises(ParameterError, match="expected one of hold, reference"):
        make("idto", fixed, first_guess="nominal")
