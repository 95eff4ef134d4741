"""The IDTO scenarios' planner-independent forms (``contactopt.tasks.idto_form.as_task``): the generic
``idto`` planner on the form builds the task's own problem — IDTO's fast path with the same
diagonal weights, the same per-knot nominal at every update, the same contact parameters."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from contactopt.mpc.registry import make
from contactopt.tasks import available_tasks, load_task
from contactopt.tasks.idto_task import build_idto_planner

IDTO_SCENARIOS = sorted(n for n, s in available_tasks().items() if "idto" in s.runners)


def test_every_idto_scenario_has_a_task_form():
    assert {"spinner", "hopper", "quadruped", "quadruped-hills", "hand-ball", "bimanual-box"} <= set(IDTO_SCENARIOS)
    for name in IDTO_SCENARIOS:
        assert load_task(name).task() is not None, name


@pytest.mark.parametrize("name", IDTO_SCENARIOS)
def test_the_generic_planner_on_the_form_builds_the_tasks_problem(name):
    from contactopt.tasks.idto_form import as_task

    spec = load_task(name)
    tuned = spec.runners["idto"].task
    form = as_task(tuned)  # the registered form (the acrobot's is its iLQG one)
    if "ilqg" not in spec.runners:
        assert spec.task().cost is not None and spec.task().planner_options == form.planner_options
    generic = make("idto", form)
    own = build_idto_planner(tuned)
    try:
        g, o = generic.problem, own.problem
        assert g.knot_cost is None, "the form's cost must take IDTO's fast path"
        assert (g.T, g.h) == (o.T, pytest.approx(o.h))
        for key in ("Qq", "Qv", "Qf_q", "Qf_v"):
            np.testing.assert_allclose(getattr(g, key), getattr(o, key), rtol=1e-12, err_msg=key)
        actuated = np.abs(np.linalg.pinv(g.actuation.control_gain)).max(axis=0) > 1e-12
        np.testing.assert_allclose(g.R[actuated], o.R[actuated], rtol=1e-12)
        if np.unique(o.R[~actuated]).size <= 1:  # one R on every unactuated dof: exact
            np.testing.assert_allclose(g.R, o.R, rtol=1e-12)
        # the rate the scenario was tuned at: its runner's update period, read by every loop
        assert generic.update_period == pytest.approx(tuned.update_period)
        # and the least policy lag: the task's fixed lag unless it sets its own (IDTOTask.policy_min_lag)
        assert generic.min_lag == pytest.approx(tuned.policy_min_lag()) == pytest.approx(own.min_lag)
        assert tuned.policy_min_lag() == pytest.approx(tuned.lag if tuned.min_lag is None else tuned.min_lag)
        if o.contact is None:
            assert g.contact is None
        else:
            assert g.contact.params == o.contact.params
        m = form.load_plant()
        d = mujoco.MjData(m)
        form.initial_state(m, d, np.random.default_rng(3))
        x = np.concatenate([d.qpos, d.qvel])
        for t in (0.0, 0.35):
            generic._schedule_cost(t, x)
            qg, vg = generic.nominal(t, x)
            qo, vo = own.nominal(t, x)
            np.testing.assert_allclose(qg, np.broadcast_to(qo, qg.shape), atol=1e-12)
            np.testing.assert_allclose(vg, np.broadcast_to(vo if vo is not None else 0.0, vg.shape), atol=1e-12)
    finally:
        generic.close()
        own.close()


def test_a_form_measures_success_from_each_runs_own_start():
    """The spinner's form succeeds 3 rad beyond the angle its run started from: a reset on the same
    MjData starts a new count; data that was never reset has no start and never succeeds."""
    form = load_task("spinner").task()
    m = form.load_plant()
    d = mujoco.MjData(m)
    form.initial_state(m, d, np.random.default_rng(0))
    start = float(d.qpos[2])
    assert not form.success(m, d)
    d.qpos[2] = start + 3.1
    assert form.success(m, d)
    form.initial_state(m, d, np.random.default_rng(1))
    d.qpos[2] += 0.5
    assert not form.success(m, d)
    assert not form.success(m, mujoco.MjData(m))


def test_a_tasks_least_policy_lag_is_its_lag_unless_set():
    """``IDTOTask.min_lag`` None (the default): each plan is held back by the task's fixed lag,
    the lag its recipe was tuned at in sync mode; an explicit value (0 included) replaces it."""
    from contactopt.tasks.spinner import SPINNER

    assert SPINNER.min_lag is None and SPINNER.policy_min_lag() == pytest.approx(SPINNER.lag)
    for value, expected in ((None, SPINNER.lag), (0.0, 0.0), (0.03, 0.03)):
        planner = build_idto_planner(SPINNER, min_lag=value)
        try:
            assert planner.min_lag == pytest.approx(expected)
        finally:
            close = getattr(planner, "close", None)
            if close is not None:
                close()


def test_a_tasks_nominal_first_guess_is_the_planners_own_nominal():
    """``IDTOTask.initial_guess="nominal"``: the first plan starts from ``q_nom`` of the planner's
    own nominal (bimanual-box: its target schedule is the planner's), and an unknown string is
    refused by name."""
    import contactopt.tasks.bimanual_box as bb
    from contactopt.errors import ParameterError

    planner = build_idto_planner(bb.BIMANUAL_BOX, initial_iterations=1)
    try:
        model = planner.model
        data = mujoco.MjData(model)
        bb.BIMANUAL_BOX.initial_state(model, data, np.random.default_rng(0))
        x = np.concatenate([data.qpos, data.qvel])
        guesses = []
        solve = planner.solver.solve
        planner.solver.solve = lambda q, **kw: (guesses.append(q.copy()), solve(q, **kw))[1]
        assert planner.reset(0.0, x).policy is not None
        guess = guesses[0]
        assert guess.shape == (planner.T + 1, model.nq)
        # exactly the rows the first plan tracks (the nominal is not called a second time: its
        # grasp IK, warm-started from its last call, would move on); row 0 is the measured q
        np.testing.assert_array_equal(guess[1:], planner.problem.q_nom[1:])
        np.testing.assert_array_equal(guess[0], x[:model.nq])
        # the hands of the guess are closed on the box, not where they start
        assert np.abs(guess[1, :14] - x[:14]).max() > 0.05
        assert planner.nominal.schedule.index == 0  # the same schedule object, still on the slide
    finally:
        planner.close()
    with pytest.raises(ParameterError, match="initial_guess"):
        build_idto_planner(bb.BIMANUAL_BOX, initial_guess="held")
