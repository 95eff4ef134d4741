"""IDTO's defaults derived from the model (issue 20): contact parameters from the model, soft
joint limits, the trust radius scaled to the problem, and what the generic builder turns on."""

import math
from pathlib import Path

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.contact.compliant import ContactParameters, softplus_normal_force
from contactopt.costs import Control, CostTerm, Qpos, Qvel
from contactopt.errors import ParameterError
from contactopt.model import load_model
from contactopt.solvers.idto import IDTOProblem, IDTOSettings, IDTOSolver, gauss_newton_system
from contactopt.testing import check_derivatives

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = ROOT / "examples" / "cartpole" / "cartpole.xml"
RAIL = 1.8  # the cart-pole's slider range ±1.8 m


def _cartpole():
    return mujoco.MjModel.from_xml_path(str(CARTPOLE))


# --------------------------------------------------------------------------- contact parameters


def test_contact_parameters_from_model_formulas():
    m = load_model("ball")  # a free 1 kg ball of radius 0.1 m over a plane: all of it is supported
    g = float(np.linalg.norm(m.opt.gravity))
    for h in (0.01, 0.05):
        p = ContactParameters.from_model(m, h)
        assert p.smoothing == pytest.approx(0.1 / 4)
        assert p.dissipation_velocity == pytest.approx(g * h)
        assert p.stiction_velocity == pytest.approx(g * h)
        assert p.friction is None  # each pair's own MJCF coefficient
        delta = min(g * h * h, 0.05)
        # the softplus force at penetration δ carries the ball's weight
        f, _ = softplus_normal_force(-delta, p.stiffness, p.smoothing)
        assert float(f) == pytest.approx(1.0 * g, rel=1e-12)
    with pytest.raises(ParameterError):
        ContactParameters.from_model(m, 0.0)


def test_contact_parameters_supported_mass_and_size():
    # the hand: only the free ball (50 g) is supported by contact; the fingers are actuated
    hand = load_model("hand")
    p = ContactParameters.from_model(hand, 0.01)
    ball = mujoco.mj_name2id(hand, mujoco.mjtObj.mjOBJ_BODY, "ball")
    g = float(np.linalg.norm(hand.opt.gravity))
    delta = min(g * 1e-4, 2 * p.smoothing)
    f, _ = softplus_normal_force(-delta, p.stiffness, p.smoothing)
    assert float(f) == pytest.approx(hand.body_mass[ball] * g, rel=1e-9)
    # σ is a quarter of the thinnest collidable geom on a moving body
    assert p.smoothing < 0.25 * 0.0125
    # no gravity: 9.81 m/s² is the force scale
    m = load_model("ball")
    m.opt.gravity[:] = 0.0
    p0 = ContactParameters.from_model(m, 0.01)
    assert p0.dissipation_velocity == pytest.approx(9.81 * 0.01)


# --------------------------------------------------------------------------- joint limits


def _limit_problem(weight, T=8, h=0.05, **kw):
    m = _cartpole()
    args = dict(q_nom=np.array([3.0, 0.0]), Qq=1.0, Qv=0.1, R=0.01, Qf_q=10.0)
    args.update(kw)
    return IDTOProblem(m, T, h, np.zeros(2), joint_limit_weight=weight, **args)


def _beyond_rail_trajectory(T, seed=0):
    """Cart positions inside, above and below the rail's ±1.8 m (away from the kinks)."""
    rng = np.random.default_rng(seed)
    q = np.zeros((T + 1, 2))
    q[1:, 0] = np.array([1.0, 2.0, 2.3, -2.1, 0.5, -1.0, 1.95, -2.5])[:T]
    q[1:, 1] = rng.normal(scale=0.3, size=T)
    return q


def test_joint_limit_rows_and_gradient_match_finite_differences():
    T, h, w = 8, 0.05, 40.0
    pr = _limit_problem(w, T, h)
    ref = _limit_problem(0.0, T, h)
    assert pr.num_joint_limit_rows == 1 and ref.num_joint_limit_rows == 0  # the slider; the hinge is free
    assert pr.m_tau == ref.m_tau + 1
    q = _beyond_rail_trajectory(T)
    # rows: √(2hw)·excess of q_{t+1} in step t's block
    r = pr.residuals(q)
    off = 2 * (T + 1) * 2
    rows = r[off:].reshape(T, pr.m_tau)[:, ref.m_tau]
    x = q[1:, 0]
    excess = np.maximum(x - RAIL, 0) - np.maximum(-RAIL - x, 0)
    np.testing.assert_allclose(rows, math.sqrt(2 * h * w) * excess, rtol=1e-12)
    assert np.count_nonzero(excess) == 5
    # the limit term h w Σ excess² and its gradient (Gauss–Newton Jᵀr is exact for ½‖r‖²): on a
    # problem whose only cost is the limit term
    assert pr.cost(q) - ref.cost(q) == pytest.approx(h * w * np.sum(excess ** 2), rel=1e-9)
    pure = _limit_problem(w, T, h, Qq=0.0, Qv=0.0, R=0.0, Qf_q=0.0, unactuated_penalty=0.0)

    def penalty(x):
        qq = q.copy()
        qq[1:] = x.reshape(T, 2)
        return pure.cost(qq)

    assert penalty(q[1:].ravel()) == pytest.approx(h * w * np.sum(excess ** 2), rel=1e-12)
    _, grad = gauss_newton_system(pure, pure.linearize(q))
    check_derivatives(penalty, q[1:].ravel(), grad, name="joint-limit gradient")
    # the rows' block Jacobian against differences of the rows themselves
    lin = pr.linearize(q)
    Jrow = pr.dense_jacobian(lin)[off:].reshape(T, pr.m_tau, T * 2)[:, ref.m_tau]

    def limit_rows(x):
        qq = q.copy()
        qq[1:] = x.reshape(T, 2)
        return pr.residuals(qq)[off:].reshape(T, pr.m_tau)[:, ref.m_tau]

    check_derivatives(limit_rows, q[1:].ravel(), Jrow, name="joint-limit rows")


def test_joint_limits_keep_the_plan_on_the_rail():
    """A target beyond the rail: the plan stops near the end with the default-style weight and
    goes through it without."""
    ends = {}
    for w in (0.0, 1e3):
        pr = _limit_problem(w, T=20, h=0.05, Qf_q=0.05)
        res = IDTOSolver(pr, IDTOSettings(max_iterations=40)).solve(np.zeros((21, 2)))
        ends[w] = float(np.max(res.q[:, 0]))
    assert ends[0.0] > 2.5
    assert ends[1e3] < RAIL + 0.05


def test_constrained_mode_keeps_joint_limit_and_knot_rows():
    m = _cartpole()
    cost = contactopt.Task(name="t", model=m, cost=lambda mm: [
        CostTerm(Qpos(mm, [0.0, np.pi]), weight=1.0), CostTerm(Control(mm), weight=1e-3)],
    ).trajectory_cost(m, 0.05)
    pr = IDTOProblem(m, 6, 0.05, np.zeros(2), Qq=0.0, Qv=0.0, R=0.0, cost=cost, joint_limit_weight=10.0,
                     unactuated_penalty=100.0)
    rows = pr.tau_cost_rows(True)
    # R rows (2), the knot rows and the joint-limit row stay; only the penalty row goes
    kept = np.arange(pr.m_tau)[rows]
    assert pr.num_penalty_rows == 1 and 2 not in kept and kept.size == pr.m_tau - 1


# --------------------------------------------------------------------------- trust radius


def test_initial_radius_scaled_to_the_first_gauss_newton_step():
    pr = _limit_problem(0.0, T=10)
    q = np.zeros((11, 2))
    solver = IDTOSolver(pr, IDTOSettings(initial_radius=None, max_iterations=1, convergence=None))
    res = solver.solve(q)
    lin = pr.linearize(q)
    H, g = gauss_newton_system(pr, lin)
    D = solver._scaling(H.diagonal())
    pH = np.linalg.solve(H.scaled(D).to_dense(), -D * g)
    assert res.log[0].radius == pytest.approx(np.linalg.norm(pH), rel=1e-8)
    half = IDTOSolver(pr, IDTOSettings(initial_radius=None, auto_radius_scale=0.5, max_iterations=1))
    assert half.solve(q).log[0].radius == pytest.approx(0.5 * np.linalg.norm(pH), rel=1e-8)
    with pytest.raises(ParameterError):
        IDTOSettings(initial_radius=None, auto_radius_scale=0.0)


# --------------------------------------------------------------------------- the generic builder


def _cartpole_task():
    return contactopt.load_task_file(ROOT / "examples" / "cartpole" / "cartpole_task.py")


def test_builder_defaults_on_a_user_model():
    task = _cartpole_task()
    pl = contactopt.planners.make("idto", task)
    try:
        pr = pl.problem
        assert pr.num_joint_limit_rows == 1 and pr.joint_limit_weight == pytest.approx(1e3)
        assert pr.num_limit_rows == 1 and pr.actuator_limit_weight == pytest.approx(1e3)
        # actuator force u = B⁺τ in [−1, 1] (ctrlrange ±1, gain 1): a cart force of ±10 N (gear 10)
        assert pr.actuator_force_upper[0] == pytest.approx(1.0)
        assert pr.actuator_forces(np.array([[10.0, 0.0]]))[0, 0] == pytest.approx(1.0)
        assert pl.solver.options.initial_radius is None
        # the cart-pole has an unactuated hinge: Zᵀτ = 0 as constraints, ℓ1-merit steps
        assert pl.solver.constrained and pl.solver.options.constrained_step == "l1"
        # the derived 2.5 s horizon (the floor plane inflates the extent) is capped at 150 knots
        assert pr.T == 150 and pr.h == pytest.approx(0.01)
        assert pr.wrap_dofs.tolist() == [1]  # the unlimited hinge's target by the shortest difference
        assert pr.num_cost_rows == 0  # IDTO's diagonal weights (the fast path)
        assert pr.contact is not None
        assert pr.contact.params == ContactParameters.from_model(pr.model, pr.h)
    finally:
        pl.close()
    off = contactopt.planners.make("idto", task, joint_limit_weight=0.0, trust_radius=1.0, horizon=2.5,
                                   underactuation="penalty")
    try:
        assert off.problem.num_joint_limit_rows == 0 and off.solver.options.initial_radius == 1.0
        assert off.problem.T == 250 and not off.solver.constrained  # an explicit horizon is kept
    finally:
        off.close()
    with pytest.raises(ParameterError):
        contactopt.planners.make("idto", task, max_knots=0)


def test_builder_actuator_limits_cover_forcerange():
    m = _cartpole()
    m.actuator_ctrllimited[0] = 0
    m.actuator_forcelimited[0] = 1
    m.actuator_forcerange[0] = (-4.0, 6.0)
    task = contactopt.Task(name="cp-force", model=m, cost=lambda mm: [
        CostTerm(Qpos(mm, [0.0, np.pi]), weight=1.0), CostTerm(Qvel(mm), weight=0.01),
        CostTerm(Control(mm), weight=1e-3)])
    pl = contactopt.planners.make("idto", task)
    try:
        pr = pl.problem
        assert pr.num_limit_rows == 1
        np.testing.assert_allclose([pr.actuator_force_lower[0], pr.actuator_force_upper[0]], [-4.0, 6.0])
    finally:
        pl.close()


# --------------------------------------------------------------------------- hinge targets


def test_fast_path_compares_hinge_targets_by_the_shortest_difference():
    """Qpos on unlimited hinges (wrapped by default) takes IDTO's diagonal weights with
    ``wrap_dofs``: same cost and Gauss–Newton step as the general knot rows, across the wrap."""
    from contactopt.costs import StageCost, TrajectoryCost
    from contactopt.solvers.idto.knot_cost import quadratic_tracking

    h, T = 0.02, 6
    m = contactopt.load_model("acrobot", timestep=h)
    terms = [CostTerm(Qpos(m, [np.pi, 0.0]), weight=1.0), CostTerm(Qvel(m), weight=0.01),
             CostTerm(Control(m), weight=1e-2)]
    cost = TrajectoryCost(StageCost(m, terms), None, timestep=h)
    w = quadratic_tracking(cost, np.linalg.pinv(contactopt.actuation_map(m).control_gain))
    assert w is not None and list(w["wrap_dofs"]) == [0, 1]
    rng = np.random.default_rng(3)
    q0 = np.array([-2.9, 0.4])  # shoulder error −2.9 − π ≈ −6.04 rad: wrapped, ≈ +0.24 rad
    fast = IDTOProblem(m, T, h, q0, Qq=w["Qq"], Qv=w["Qv"], R=w["R"], Qf_q=w["Qf_q"], Qf_v=w["Qf_v"],
                       q_nom=w["q_nom"], v_nom=w["v_nom"], wrap_dofs=w["wrap_dofs"], unactuated_penalty=10.0)
    general = IDTOProblem(m, T, h, q0, Qq=0.0, Qv=0.0, R=0.0, cost=cost, unactuated_penalty=10.0)
    q = q0 + np.cumsum(rng.normal(size=(T + 1, 2)) * 0.05, axis=0)
    q[0] = q0
    err = q[:, 0] - np.pi
    assert np.all(err < -np.pi)  # every knot's plain error is beyond −π: wrapping changes it
    assert fast.cost(q) == pytest.approx(general.cost(q), rel=1e-10)
    Hf, gf = gauss_newton_system(fast, fast.linearize(q))
    Hg, gg = gauss_newton_system(general, general.linearize(q))
    np.testing.assert_allclose(gg, gf, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(Hg.to_dense(), Hf.to_dense(), rtol=1e-8, atol=1e-10)
    with pytest.raises(ParameterError):
        IDTOProblem(_cartpole(), 2, 0.05, np.zeros(2), wrap_dofs=[0])  # the slider is no hinge


# --------------------------------------------------------------------------- constrained steps


def test_l1_constrained_step_keeps_the_first_plan_feasible():
    """The cart-pole's first plan from rest with its soft force limit: the dogleg on ``L + λᵀh``
    drifts off ``Zᵀτ = 0`` and stalls; the scaled KKT step on the ℓ1 merit stays feasible."""
    task = _cartpole_task()
    plant = task.load_plant()
    x = np.zeros(4)
    out = {}
    for step in ("dogleg", "l1"):
        pl = contactopt.planners.make("idto", task, horizon=1.0, samples=0, constrained_step=step)
        try:
            assert pl.solver.constrained and pl.solver.options.constrained_step == step
            pl.reset(0.0, x)
            out[step] = (pl.result.cost, pl.problem.unactuated_violation(pl.result.tau))
        finally:
            pl.close()
    assert plant.nu == 1
    assert out["l1"][1] < 1e-3 < 1.0 < out["dogleg"][1]
    assert out["l1"][0] < out["dogleg"][0]
    with pytest.raises(ParameterError):
        IDTOSettings(constrained_step="scaled")
