"""One task, any planner: the public Task, the shared cost at IDTO's knots and as GDD
features, the planner registry and ``contactopt run FILE.py``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.costs import (
    L2,
    Control,
    Cosh,
    CostTerm,
    OneSidedQuadratic,
    Qpos,
    Quadratic,
    Qvel,
    SitePosition,
    SmoothAbs,
    StageCost,
    TrajectoryCost,
)
from contactopt.errors import ParameterError
from contactopt.mpc import registry
from contactopt.solvers.idto import IDTOProblem
from contactopt.solvers.idto.knot_cost import quadratic_tracking
from contactopt.solvers.idto.solver import gauss_newton_system

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pendulum"
PENDULUM_TASK = EXAMPLE / "pendulum_task.py"


def _run_cli(*args, cwd=None, timeout=600):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "contactopt", *args], check=False, capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


# --------------------------------------------------------------------------- norms


@pytest.mark.parametrize("norm", [Quadratic(), SmoothAbs(0.3), Cosh(0.7), L2(0.2), OneSidedQuadratic(),
                                  OneSidedQuadratic(upper=True)])
def test_least_squares_form_matches_the_norm(norm, rng):
    r = rng.normal(size=(20, 3)) * 2.0
    r[0] = 0.0
    rho, D = norm.least_squares(r)
    np.testing.assert_allclose(0.5 * np.einsum("ni,ni->n", rho, rho), norm.value(r), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.einsum("nij,ni->nj", D, rho), norm.gradient(r), rtol=1e-10, atol=1e-14)
    # Gauss-Newton curvature equals the Hessian at the origin
    _, D0 = norm.least_squares(np.zeros((1, 3)))
    np.testing.assert_allclose(D0[0].T @ D0[0], norm.hessian(np.zeros((1, 3)))[0], atol=1e-12)


def test_stage_cost_least_squares_matches_evaluate(mixed_model, rng):
    m = mixed_model
    terms = [CostTerm(Qpos(m), SmoothAbs(0.2), 2.0), CostTerm(Qvel(m), Quadratic(), 0.5),
             CostTerm(Control(m), Cosh(0.5), 0.3), CostTerm(SitePosition(m, "tip", [0, 0, 1]), L2(0.1), 1.5)]
    cost = StageCost(m, terms)
    d = mujoco.MjData(m)
    for _ in range(3):
        d.qpos[:] = m.qpos0
        mujoco.mj_integratePos(m, d.qpos, rng.normal(size=m.nv) * 0.3, 1.0)
        x = np.concatenate([d.qpos, rng.normal(size=m.nv)])
        u = rng.normal(size=m.nu)
        rho, Jx, Ju = cost.least_squares(x[None], u[None])
        ref = cost.evaluate(x, u)
        assert 0.5 * rho[0] @ rho[0] == pytest.approx(ref.l, rel=1e-12)
        np.testing.assert_allclose(Jx[0].T @ rho[0], ref.lx, atol=1e-10)
        np.testing.assert_allclose(Ju[0].T @ rho[0], ref.lu, atol=1e-10)


def test_qpos_wraps_unlimited_hinges_only(mixed_model):
    m = mixed_model
    full = Qpos(m, wrap=False)
    auto = Qpos(m)
    x = np.concatenate([m.qpos0, np.zeros(m.nv)])
    h1 = m.jnt_qposadr[m.joint("h1").id]
    x[h1] = 4.0  # unlimited hinge: 4 rad ≡ 4 − 2π
    x[m.jnt_qposadr[m.joint("hinge").id]] = 1.9  # limited hinge: not wrapped
    dof = m.jnt_dofadr[m.joint("h1").id]
    assert full(x)[dof] == pytest.approx(4.0)
    assert auto(x)[dof] == pytest.approx(4.0 - 2 * np.pi)
    assert auto(x)[m.jnt_dofadr[m.joint("hinge").id]] == pytest.approx(1.9)


# --------------------------------------------------------------------------- IDTO knot rows


def _acrobot_problem(cost_terms, *, T=6, h=0.02, general=True, terminal=None, seed=0):
    m = contactopt.load_model("acrobot", timestep=h)
    cost = TrajectoryCost(StageCost(m, cost_terms(m)),
                          None if terminal is None else StageCost(m, terminal(m)), timestep=h)
    rng = np.random.default_rng(seed)
    q0 = rng.normal(size=m.nq) * 0.3
    if general:
        pr = IDTOProblem(m, T, h, q0, Qq=0.0, Qv=0.0, R=0.0, cost=cost, unactuated_penalty=10.0)
    else:
        G_pinv = np.linalg.pinv(contactopt.actuation_map(m).control_gain)
        w = quadratic_tracking(cost, G_pinv)
        assert w is not None
        pr = IDTOProblem(m, T, h, q0, Qq=w["Qq"], Qv=w["Qv"], R=w["R"], Qf_q=w["Qf_q"], Qf_v=w["Qf_v"],
                         q_nom=w["q_nom"], v_nom=w["v_nom"], unactuated_penalty=10.0)
    q = q0 + np.cumsum(rng.normal(size=(T + 1, m.nq)) * 0.05, axis=0)
    q[0] = q0
    return pr, cost, q


def test_knot_rows_jacobian_matches_finite_differences():
    def terms(m):
        return [CostTerm(Qpos(m, [np.pi, 0.0]), SmoothAbs(0.5), 1.0), CostTerm(Qvel(m), L2(0.3), 0.2),
                CostTerm(Control(m), Cosh(2.0), 0.1), CostTerm(SitePosition(m, m.site(0).name), Quadratic(), 3.0)]

    pr, _, q = _acrobot_problem(terms, terminal=lambda m: [CostTerm(Qvel(m), Quadratic(), 5.0)])
    lin = pr.linearize(q)
    J = pr.dense_jacobian(lin)
    eps = 1e-6
    Jfd = np.zeros_like(J)
    for k in range(pr.T * pr.nv):
        dq = np.zeros(pr.T * pr.nv)
        dq[k] = eps
        Jfd[:, k] = (pr.residuals(pr.retract(q, dq)) - pr.residuals(pr.retract(q, -dq))) / (2 * eps)
    np.testing.assert_allclose(J, Jfd, atol=2e-5 * max(1.0, np.abs(Jfd).max()))


def test_idto_fast_path_and_general_path_give_the_same_gauss_newton_step():
    def terms(m):
        return [CostTerm(Qpos(m, [np.pi, 0.0], wrap=False), Quadratic(), 1.0),
                CostTerm(Qvel(m), Quadratic(), 0.01), CostTerm(Control(m), Quadratic(), 1e-2)]

    fast, _, q = _acrobot_problem(terms, general=False)
    general, _, _ = _acrobot_problem(terms, general=True)
    assert general.num_cost_rows > 0 and fast.num_cost_rows == 0
    assert fast.cost(q) == pytest.approx(general.cost(q), rel=1e-10)
    Hf, gf = gauss_newton_system(fast, fast.linearize(q))
    Hg, gg = gauss_newton_system(general, general.linearize(q))
    np.testing.assert_allclose(gg, gf, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(Hg.to_dense(), Hf.to_dense(), rtol=1e-8, atol=1e-10)
    step_f = np.linalg.solve(Hf.to_dense(), -gf)
    step_g = np.linalg.solve(Hg.to_dense(), -gg)
    np.testing.assert_allclose(step_g, step_f, rtol=1e-6, atol=1e-10)


def test_idto_reports_the_shared_cost_of_its_trajectory():
    def terms(m):
        return [CostTerm(Qpos(m, [np.pi, 0.0]), SmoothAbs(0.5), 1.0), CostTerm(Control(m), Cosh(2.0), 0.1)]

    pr, cost, q = _acrobot_problem(terms)
    tr = pr.trajectory(q)
    X = np.concatenate([tr.q, tr.v], axis=1)
    U = pr.knot_cost.controls(tr.tau)
    assert pr.task_cost(tr) == pytest.approx(cost.total(X, U), rel=1e-12)


# --------------------------------------------------------------------------- GDD features


def _acrobot_gdd_state():
    from contactopt.solvers.gdd import GDDProblem
    from contactopt.solvers.gdd.problem import ActuationModel

    m = contactopt.load_model("acrobot")
    d = mujoco.MjData(m)
    d.qpos[:] = [0.3, -0.2]
    d.qvel[:] = [0.5, 1.0]
    mujoco.mj_forward(m, d)
    return m, d, GDDProblem(m, d, ActuationModel(m))


@pytest.mark.parametrize("norm", [Quadratic(), SmoothAbs(0.2)], ids=["quadratic", "smoothabs"])
def test_gdd_feature_rows_are_the_pd_law_of_the_norms_least_squares_residual(norm):
    """A feature's rows are ``√w (P r̈ + k_p ρ + k_d P ṙ)`` (``ρ, P`` the norm's least-squares
    residual and its Jacobian at ``r``; ``ρ = r``, ``P = I`` for the quadratic norm), checked
    against finite-difference ``ṙ, r̈`` along ``q ⊕ (s v + ½ s² a)`` for arbitrary ``a``: the
    feature vanishes exactly where the residual's acceleration follows the PD law."""
    from contactopt.solvers.gdd.features import ResidualFeature

    m, d, problem = _acrobot_gdd_state()
    site = SitePosition(m, m.site(0).name, [0.0, 0.0, 3.0])
    tm = ResidualFeature(CostTerm(site, norm, weight=2.0), bandwidth=3.0).term_model(problem)
    h = 1e-4
    for a in (np.array([1.5, -2.0]), np.array([-0.3, 4.0])):
        def r_at(s):
            dd = mujoco.MjData(m)
            dd.qpos[:] = d.qpos
            mujoco.mj_integratePos(m, dd.qpos, d.qvel * s + 0.5 * a * s * s, 1.0)
            return site(np.concatenate([dd.qpos, d.qvel]))

        r0 = r_at(0.0)
        rdot = (r_at(h) - r_at(-h)) / (2 * h)
        rddot = (r_at(h) - 2 * r0 + r_at(-h)) / h ** 2
        rho, P = norm.least_squares(r0)
        law = P @ rddot + 9.0 * rho + 6.0 * (P @ rdot)
        np.testing.assert_allclose(tm.Ka @ a + tm.e, np.sqrt(2.0) * law, rtol=1e-4, atol=1e-3)


def test_gdd_feature_uses_the_norm_and_a_satisfied_bound_asks_nothing():
    from contactopt.solvers.gdd.features import ResidualFeature

    m, d, problem = _acrobot_gdd_state()
    site = SitePosition(m, m.site(0).name, [0.0, 0.0, 3.0])
    smooth = ResidualFeature(CostTerm(site, SmoothAbs(0.2), weight=2.0), bandwidth=3.0).term_model(problem)
    quad = ResidualFeature(CostTerm(site, weight=2.0), bandwidth=3.0).term_model(problem)
    assert not np.allclose(quad.e, smooth.e)  # ρ ≠ r: the norm is used, not ignored
    # a one-sided bound that holds (height above -10 m) contributes nothing
    height = SitePosition(m, m.site(0).name, [0.0, 0.0, -10.0], axes="z")
    quiet = ResidualFeature(CostTerm(height, OneSidedQuadratic(), weight=5.0), bandwidth=3.0).term_model(problem)
    assert not np.any(quiet.Ka) and not np.any(quiet.e)


def test_gdd_control_feature_of_a_cosh_norm_is_exact_at_the_last_control():
    """A Cosh control term is linearized at ``data.ctrl`` (the control last applied): at an
    acceleration whose inverse-dynamics control is that one its row is ``ρ(u − u*)``, and a
    control ``δ`` away it moves by ``P δ``."""
    from contactopt.solvers.gdd.features import ControlFeature

    m, d, problem = _acrobot_gdd_state()
    d.ctrl[:] = [0.7]
    norm = Cosh(0.5)
    cosh = ControlFeature(CostTerm(Control(m, [0.1]), norm, weight=1.0)).term_model(problem)
    quad = ControlFeature(CostTerm(Control(m, [0.1]), weight=1.0)).term_model(problem)  # rows u(a) − u*
    rho, P = norm.least_squares(np.array([0.6]))
    for delta in (0.0, 0.05):
        a = np.linalg.lstsq(quad.Ka, np.array([0.6 + delta]) - quad.e, rcond=None)[0]
        np.testing.assert_allclose(quad.Ka @ a + quad.e, [0.6 + delta], atol=1e-9)
        np.testing.assert_allclose(cosh.Ka @ a + cosh.e, rho + P @ [delta], atol=1e-9)


def test_gdd_refuses_a_norm_without_a_least_squares_form_in_one_line():
    from contactopt.costs import Norm

    class Quartic(Norm):  # a user's norm: value and gradient only
        def value(self, r):
            return 0.25 * np.sum(np.asarray(r) ** 4, axis=-1)

        def gradient(self, r):
            return np.asarray(r) ** 3

    task = contactopt.Task(name="x", model="acrobot",
                           cost=lambda m: [CostTerm(Qvel(m, name="v4"), Quartic(), 1.0)])
    with pytest.raises(ParameterError) as err:
        registry.make("gdd", task)
    msg = str(err.value)
    assert "\n" not in msg and "planner 'gdd' cannot run task x" in msg and "v4" in msg
    assert "least-squares form" in msg


def test_gdd_static_check_treats_a_planar_base_as_floating():
    """The hopper's root is two unactuated slides and a hinge: the ground carries its weight, so
    goal-directed dynamics checks only its actuators (it refused "75.7 on an unactuated
    direction" — the robot's weight — before); a cart-pole's pole is still refused."""
    from contactopt.solvers.gdd.features import quasi_static_path_check
    from contactopt.tasks import load_task

    task = load_task("hopper-hop").task()
    planner = registry.make("gdd", task)
    planner.close()
    pole = contactopt.load_model(str(EXAMPLE.parent / "cartpole" / "cartpole.xml"))
    why = quasi_static_path_check(pole, pole.qpos0.copy(), [CostTerm(Qpos(pole, [0.0, 1.0]))])
    assert why is not None and "unactuated direction" in why


# --------------------------------------------------------------------------- Task and registry


def test_task_resolves_relative_models_against_its_file():
    task = contactopt.load_task_file(PENDULUM_TASK)
    assert task.base_dir == EXAMPLE
    model = task.load_plant()
    assert model.nq == 1 and model.nu == 1


def test_task_rejects_bad_fields():
    with pytest.raises(ParameterError, match="duration"):
        contactopt.Task(name="x", model="acrobot", cost=lambda m: [], duration=-1)
    with pytest.raises(ParameterError, match="cost must be callable"):
        contactopt.Task(name="x", model="acrobot", cost=3)
    other = contactopt.load_model("acrobot")
    task = contactopt.Task(name="x", model="acrobot", cost=lambda m: [CostTerm(Qvel(other))])
    with pytest.raises(ParameterError, match="built for another model"):
        registry.make("ilqg", task)


def test_registry_errors_list_the_valid_names():
    task = contactopt.load_task_file(PENDULUM_TASK)
    with pytest.raises(ParameterError, match="planners: ilqg"):
        registry.make("nope", task)
    with pytest.raises(ParameterError, match=r"valid: horizon, .*weight\.qpos"):
        registry.make("ilqg", task, bogus=1)
    with pytest.raises(ParameterError, match="--set iterations: expected an integer"):
        registry.make("ilqg", task, iterations="two")
    with pytest.raises(ParameterError, match="weight"):
        registry.make("idto", task, **{"weight.qpos": -1})
    for key in ("update_period", "min_lag"):
        with pytest.raises(ParameterError, match=f"--set {key}: must be seconds >= 0"):
            registry.make("ilqg", task, **{key: -0.01})


@pytest.mark.parametrize("planner", ["ilqg", "idto", "gdd"])
def test_every_planner_carries_its_min_lag(planner):
    """``--set min_lag=`` reaches the attribute the runner reads (runner.planner_min_lag)."""
    from contactopt.mpc.runner import planner_min_lag

    task = contactopt.load_task_file(PENDULUM_TASK)
    settings = {"static_check": False} if planner == "gdd" else {}
    p = registry.make(planner, task, min_lag=0.02, **settings)
    try:
        assert planner_min_lag(p) == 0.02
    finally:
        p.close()


def test_weight_overrides_reach_the_planner_cost():
    task = contactopt.load_task_file(PENDULUM_TASK)
    p = registry.make("ilqg", task, **{"weight.qpos": 7.0, "horizon": 0.3})
    try:
        weights = [t.weight for t in p.solver.cost.running.terms]
        assert weights == [7.0, 0.01, 1e-3]
        assert p.horizon == 30
    finally:
        p.close()


def test_a_user_residual_of_the_control_is_refused_by_gdd_before_the_run():
    from contactopt.costs import UserResidual

    def cost(m):
        return [CostTerm(UserResidual(m, lambda m, d, x, u: u, 1, uses_control=True, name="effort"))]

    task = contactopt.Task(name="x", model=EXAMPLE / "pendulum.xml", cost=cost)
    with pytest.raises(ParameterError, match="cannot run task x: cost term effort"):
        registry.make("gdd", task)


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("body, message", [
    ("x = 1\n", "defines no TASK"),
    ("TASK = 3\n", "TASK is a int, not a contactopt.Task"),
    ("def f(:\n", "syntax error at line 1"),
    ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
])
def test_bad_task_files_are_one_line_errors(tmp_path, body, message):
    f = tmp_path / "task.py"
    f.write_text(body)
    out = _run_cli("run", str(f))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"contactopt: error: {f}: {message}")


def test_a_model_file_given_to_run_is_a_one_line_error(tmp_path):
    """``contactopt run model.xml`` says it wants a task (it ran the XML as Python)."""
    f = tmp_path / "robot.xml"
    f.write_text("<mujoco/>")
    out = _run_cli("run", str(f))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"contactopt: error: {f}: a model, not a task file")


def test_a_cost_that_raises_is_a_one_line_error(tmp_path):
    f = tmp_path / "task.py"
    f.write_text("import contactopt\n"
                 "def cost(model):\n    raise KeyError('no such site')\n"
                 "TASK = contactopt.Task(name='t', model='acrobot', cost=cost)\n")
    out = _run_cli("run", str(f), "--seconds", "0.1")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "cost raised KeyError" in out.stderr


def test_cli_set_and_seed_errors():
    out = _run_cli("run", str(PENDULUM_TASK), "--set", "nonsense=3")
    assert out.returncode == 1 and "valid: horizon" in out.stderr and "Traceback" not in out.stderr
    out = _run_cli("run", str(PENDULUM_TASK), "--set", "horizon=abc")
    assert out.returncode == 1 and "--set horizon: expected a number" in out.stderr
    out = _run_cli("run", str(PENDULUM_TASK), "--seed", "-1")
    assert out.returncode == 1 and "seed must be an integer" in out.stderr and "Traceback" not in out.stderr
    out = _run_cli("run", "acrobot", "--planner", "ilqg", "--seed", "-1")
    assert out.returncode == 1 and "seed must be an integer" in out.stderr
    out = _run_cli("run", str(PENDULUM_TASK), "--set", "help", "--planner", "idto")
    assert out.returncode == 0 and "weight.qpos" in out.stdout and "trust_radius" in out.stdout


def test_options_file_gives_the_same_settings_as_set(tmp_path):
    from contactopt.cli import load_options_file

    f = tmp_path / "opts.toml"
    f.write_text('horizon = 0.8\nweight.qvel = 0.05\n"weight.ctrl" = 2e-3\nline_search_steps = [1, 0.5]\n')
    loaded = load_options_file(f)
    assert loaded == {"horizon": 0.8, "weight.qvel": 0.05, "weight.ctrl": 2e-3, "line_search_steps": [1, 0.5]}
    task = contactopt.load_task_file(PENDULUM_TASK)
    from_file = registry.parse_settings("ilqg", task, loaded)
    from_set = registry.parse_settings("ilqg", task, {"horizon": "0.8", "weight.qvel": "0.05",
                                                      "weight.ctrl": "0.002", "line_search_steps": "1,0.5"})
    assert from_file == from_set
    f.write_text("horizon = \n")
    out = _run_cli("run", str(PENDULUM_TASK), "--options", str(f))
    assert out.returncode == 1 and "not valid TOML" in out.stderr and out.stderr.count("\n") == 1
    out = _run_cli("run", str(PENDULUM_TASK), "--options", str(tmp_path / "missing.toml"))
    assert out.returncode == 1 and "cannot read it" in out.stderr


def test_target_keys_move_a_point_goal_in_every_planner_cost():
    from contactopt.tasks import load_task

    task = load_task("acrobot").task()
    plant = task.load_plant()
    keys = registry.cost_target_keys(task.cost_terms(plant))
    assert keys, "the acrobot's tip term is a point residual"
    key = keys[0]
    options, overrides = registry.parse_settings("ilqg", task, {key: "0.1, 0, 3.5"})
    assert overrides[key] == (0.1, 0.0, 3.5)
    cost = registry.task_cost(task, plant, 0.01, overrides)
    moved = [t for t in cost.running.terms if registry.is_point_residual(t.residual)]
    np.testing.assert_array_equal(moved[0].residual.target, [0.1, 0.0, 3.5])
    fresh = [t for t in task.cost_terms(plant) if registry.is_point_residual(t.residual)]
    assert not np.allclose(fresh[0].residual.target, [0.1, 0.0, 3.5])  # the task is untouched
    with pytest.raises(ParameterError, match=r"expected three finite numbers"):
        registry.parse_settings("ilqg", task, {key: "1,2"})
    assert any(row[0] == key for row in registry.settings_help("idto", task))


def test_run_lists_tasks_with_a_header():
    out = _run_cli("run")
    assert out.returncode == 0
    header = out.stdout.splitlines()[0].split()
    assert header[:3] == ["task", "model", "planners"]


@pytest.mark.slow
def test_run_file_writes_the_trajectory(tmp_path):
    npz = tmp_path / "traj.npz"
    out = _run_cli("run", str(PENDULUM_TASK), "--planner", "ilqg", "--seconds", "0.5", "--json",
                   "--save-trajectory", str(npz), "--set", "weight.qpos=2")
    assert out.returncode in (0, 3), out.stderr
    report = json.loads(out.stdout)
    assert report["task"] == "pendulum-swingup" and report["planner"] == "ilqg"
    data = np.load(npz)
    assert data["qpos"].shape[1] == 1 and data["time"].shape[0] == data["ctrl"].shape[0]
    assert data["update_compute_time"].size == report["updates"]
    assert np.all(np.isfinite(data["update_cost"][data["update_ok"]]))


@pytest.mark.realtime
@pytest.mark.slow
@pytest.mark.parametrize("planner, needed", [("ilqg", 8), ("idto", 7)])
def test_pendulum_example_swings_up_on_seeds_0_to_7(planner, needed):
    """The README's task file, verbatim, with the default settings (sync mode, measured lag).  Each
    run ends once success has held (the same outcome: a success is latched, the task has no failure
    test)."""
    from contactopt.mpc.task_runner import run_task

    task = contactopt.load_task_file(PENDULUM_TASK)
    wins = sum(run_task(task, planner, seed=seed, stop_on_success=True).result.success for seed in range(8))
    assert wins >= needed


def test_gdd_refuses_a_swing_up_it_cannot_do_in_one_line():
    """The example's motor (2 N·m) cannot hold the pendulum part of the way up: goal-directed
    dynamics, which has no horizon, says so before the run instead of pushing one way for ever."""
    out = _run_cli("run", str(PENDULUM_TASK), "--planner", "gdd")
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "planner 'gdd' cannot run task pendulum-swingup" in lines[0]
    assert "beyond its range [-2, 2]" in lines[0]


def _strong_pendulum(tmp_path):
    """The example with a 10 N·m motor, which can hold the pendulum anywhere (mgl = 5.9 N·m)."""
    xml = (EXAMPLE / "pendulum.xml").read_text().replace('ctrlrange="-2 2"', 'ctrlrange="-10 10"')
    (tmp_path / "pendulum.xml").write_text(xml)
    task_file = tmp_path / "task.py"
    task_file.write_text(PENDULUM_TASK.read_text())
    return contactopt.load_task_file(task_file)


@pytest.mark.realtime
@pytest.mark.slow
@pytest.mark.parametrize("planner", ["gdd", "ilqg", "idto"])
def test_every_planner_swings_up_a_pendulum_that_can_be_held(tmp_path, planner):
    from contactopt.mpc.task_runner import run_task

    task = _strong_pendulum(tmp_path)
    wins = sum(run_task(task, planner, seed=seed, stop_on_success=True).result.success for seed in range(4))
    assert wins >= 3


@pytest.mark.realtime
@pytest.mark.parametrize("planner", ["ilqg", "idto"])
def test_user_code_that_raises_is_one_line_naming_it(tmp_path, capsys, planner):
    """A user residual or success function that raises (a wrong signature, a bug) is a one-line
    error naming the residual or the task function, never a traceback."""
    from contactopt.cli import main

    header = ("import numpy as np, contactopt\n"
              "from contactopt.costs import CostTerm, Qvel, UserResidual\n")
    files = {
        "sig.py": header + "def cost(m):\n"
                  "    return [CostTerm(UserResidual(m, lambda model, data: np.zeros(1), 1, name='mine'))]\n"
                  "TASK = contactopt.Task(name='sig', model='acrobot', cost=cost, duration=0.2)\n",
        "succ.py": header + "TASK = contactopt.Task(name='succ', model='acrobot', cost=lambda m: [CostTerm(Qvel(m))],"
                   " duration=0.2, success=lambda m, d: 1 / 0)\n",
    }
    needles = {"sig.py": "residual mine: fn(model, data, x, u) raised TypeError",
               "succ.py": "task succ: success raised ZeroDivisionError"}
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        assert main(["run", str(path), "--planner", planner, "--seconds", "0.05"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("contactopt: error: ") and err.count("\n") == 1 and needles[name] in err, err


def test_a_zero_timestep_or_horizon_is_refused_not_taken_for_the_default(capsys):
    from contactopt.cli import main

    for planner in ("ilqg", "idto"):
        for key in ("timestep", "horizon"):
            assert main(["run", str(PENDULUM_TASK), "--planner", planner, "--set", f"{key}=0", "--seconds", "0.05"]) == 1
            err = capsys.readouterr().err
            assert err == f"contactopt: error: {key} must be positive [s], got 0.0\n", err
