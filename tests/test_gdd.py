"""Goal-directed dynamics: inverse constraint force, solver, cost terms, stepping helper."""

from __future__ import annotations

import dataclasses
import json

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.errors import NonFiniteError, ParameterError
from contactopt.simulate import SimulationError
from contactopt.solvers.gdd import (
    AccelerationTarget,
    CenterOfMassAcceleration,
    CenterOfPressure,
    ContactForce,
    Cost,
    Damping,
    EndEffectorAcceleration,
    GDDSettings,
    GDDSolver,
    GDDStatus,
    MinimumJerk,
    PostureTarget,
    SpringDamper,
    gdd_step,
)
from contactopt.solvers.gdd import kernels as K
from contactopt.testing import check_derivatives, finite_difference_jacobian

# --------------------------------------------------------------------------- fixtures


def humanoid_standing(cone="pyramidal"):
    """Humanoid standing on the floor (pelvis lowered 3 mm so both feet touch)."""
    m = contactopt.load_model("humanoid")
    if cone == "elliptic":
        m.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    d = mujoco.MjData(m)
    contactopt.reset_to_keyframe(m, d, "home")
    d.qpos[2] -= 0.003
    mujoco.mj_forward(m, d)
    return m, d


def hand_holding_ball(cone="pyramidal"):
    """Hand with the fingertips and palm in contact with the ball (fingers closed by 0.15 s of torque)."""
    m = contactopt.load_model("hand")
    if cone == "elliptic":
        m.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    d = mujoco.MjData(m)
    contactopt.reset_to_keyframe(m, d, "home")
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in range(m.nu)]
    d.ctrl[:] = [0.0 if "abd" in n else 0.25 for n in names]
    d.ctrl[names.index("thumb_rot")] = 0.2
    for _ in range(150):
        mujoco.mj_step(m, d)
    mujoco.mj_forward(m, d)
    return m, d


def posture_policy(model, qref, kp=50.0, kd=10.0):
    """External acceleration policy: PD toward ``qref`` on the configuration manifold."""
    dq = np.zeros(model.nv)

    def policy(problem):
        mujoco.mj_differentiatePos(model, dq, 1.0, problem.data.qpos, qref)
        return kp * dq - kd * problem.data.qvel

    return policy


def reach_cost(m, d, site="right_hand", offset=(0.3, -0.1, 0.35), w_ee=200.0, w_post=30.0):
    sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, site)
    goal = d.site_xpos[sid] + np.asarray(offset)
    ee = EndEffectorAcceleration(m, site=site, weight=w_ee,
                                 target=SpringDamper(goal, stiffness=40.0, max_acceleration=10.0))
    cost = Cost(ee, AccelerationTarget(m, posture_policy(m, d.qpos.copy()), weight=w_post),
                Damping(0.1, 5.0))
    return cost, goal, sid


def cold_forward(m, d, ctrl):
    """Forward acceleration for ``ctrl`` with a cold start and a tight solver tolerance."""
    m2 = contactopt.load_model(m)
    m2.opt.tolerance = 1e-15
    m2.opt.iterations = 500
    m2.opt.ls_tolerance = 1e-6
    m2.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_WARMSTART
    d2 = mujoco.MjData(m2)
    d2.qpos[:] = d.qpos
    d2.qvel[:] = d.qvel
    d2.time = d.time
    d2.ctrl[:] = ctrl
    mujoco.mj_forward(m2, d2)
    return d2.qacc.copy()


def inverse_residual(m, d, qacc, ctrl):
    """``‖qfrc_inverse(qacc) − qfrc_actuator(ctrl)‖``: the physics residual of (qacc, ctrl)."""
    d2 = mujoco.MjData(m)
    d2.qpos[:] = d.qpos
    d2.qvel[:] = d.qvel
    d2.ctrl[:] = ctrl
    mujoco.mj_forward(m, d2)
    qfrc_act = d2.qfrc_actuator.copy()
    d2.qacc[:] = qacc
    mujoco.mj_inverse(m, d2)
    return float(np.linalg.norm(d2.qfrc_inverse - qfrc_act))


ARM_XML = """
<mujoco model="arm">
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="l1" pos="0 0 1">
      <joint name="j1" type="hinge" axis="0 0 1" damping="0.2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" contype="0" conaffinity="0"/>
      <body name="l2" pos="0.3 0 0">
        <joint name="j2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.03" contype="0" conaffinity="0"/>
        <body name="l3" pos="0.25 0 0">
          <joint name="j3" type="hinge" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.025" contype="0" conaffinity="0"/>
          <site name="tip" pos="0.2 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="j1" gear="2"/>
    <motor joint="j2" gear="3"/>
    <motor joint="j3"/>
  </actuator>
</mujoco>
"""


# --------------------------------------------------------------------------- kernels


def test_kernel_cholesky_matches_numpy_and_rejects_indefinite_matrices():
    """The kernels' Cholesky factor (lower triangle of A only) against numpy's, strict upper zeroed."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 27, 40):
        B = rng.normal(size=(n, n))
        A = B @ B.T + n * np.eye(n)
        A_lower = np.tril(A) + np.triu(rng.normal(size=(n, n)), 1)  # garbage above the diagonal
        L = np.full((n, n), np.nan)
        assert K.cholesky(A_lower, L)
        np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=1e-12, atol=1e-12)
        assert np.all(np.triu(L, 1) == 0.0)
        x = np.empty(n)
        b = rng.normal(size=n)
        K.chol_solve(L, b, x)
        np.testing.assert_allclose(A @ x, b, rtol=1e-10, atol=1e-10)
    indefinite = np.diag([1.0, -1.0, 2.0])
    assert not K.cholesky(indefinite, np.zeros((3, 3)))
    assert not K.cholesky(np.array([[np.nan]]), np.zeros((1, 1)))


def test_kernel_gram_lower_triangle_matches_numpy():
    """Q + Z Zᵀ from the rows of a wider workspace (columns past ncol hold garbage), every
    remainder of a row's four-column blocks; nothing above the diagonal is written."""
    rng = np.random.default_rng(4)
    for nv, ncol in ((1, 1), (3, 5), (7, 0), (22, 29), (30, 40)):
        Q = rng.normal(size=(nv, nv))
        ZT = rng.normal(size=(nv, ncol + 7))
        out = np.full((nv, nv), np.nan)
        K._gram_lower(Q, ZT, ncol, out)
        want = Q + ZT[:, :ncol] @ ZT[:, :ncol].T
        low = np.tril_indices(nv)
        np.testing.assert_allclose(out[low], want[low], rtol=1e-13, atol=1e-12)
        assert np.isnan(out[np.triu_indices(nv, 1)]).all()


def test_kernel_forward_substitution_of_right_hand_side_rows():
    """L⁻¹ applied to each row of XT (1 to 9 right-hand sides: every remainder of the groups
    of four), against numpy."""
    rng = np.random.default_rng(5)
    for n in (1, 5, 22):
        L = np.tril(rng.normal(size=(n, n)), -1) + np.diag(rng.uniform(0.5, 2.0, size=n))
        for m in (1, 4, 6, 9):
            XT = rng.normal(size=(m, n))
            want = np.linalg.solve(L, XT.T).T
            K._lower_solve_rhs_rows(L, XT)
            np.testing.assert_allclose(XT, want, rtol=1e-11, atol=1e-11)


def test_kernel_ldl_reproduces_mujocos_factor_and_solves():
    """``ldl_factor`` on MuJoCo's sparse ``d.M`` gives ``d.qLD`` / ``d.qLDiagInv`` (same algorithm,
    same layout); ``ldl_solve`` with it and ``ldl_dense`` of the dense M both solve M x = b."""
    import mujoco

    from contactopt.model import load_model
    from contactopt.solvers.gdd.problem import _full_inertia

    rng = np.random.default_rng(5)
    for name in ("humanoid", "hand"):
        m = load_model(name)
        d = mujoco.MjData(m)
        d.qpos[:] = m.qpos0
        d.qpos[7:] += rng.uniform(-0.3, 0.3, m.nq - 7) if name == "humanoid" else 0.0
        mujoco.mj_fwdPosition(m, d)
        nv = m.nv
        M = np.zeros((nv, nv))
        _full_inertia(m, d, M)
        rn, ra, ci = (np.asarray(x, dtype=np.int64) for x in (m.M_rownnz, m.M_rowadr, m.M_colind))
        q, dinv = d.M.copy(), np.empty(nv)
        assert K.ldl_factor(rn, ra, ci, q, dinv)
        np.testing.assert_allclose(q, d.qLD, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(dinv, d.qLDiagInv, rtol=1e-12)
        b = rng.normal(size=nv)
        x = np.empty(nv)
        K.ldl_solve(rn, ra, ci, d.qLD, d.qLDiagInv, b, x)
        np.testing.assert_allclose(M @ x, b, rtol=1e-10, atol=1e-10)
        tri = nv * (nv + 1) // 2
        rn2, ra2, ci2 = np.empty(nv, np.int64), np.empty(nv, np.int64), np.empty(tri, np.int64)
        q2, dinv2 = np.empty(tri), np.empty(nv)
        assert K.ldl_dense(M, rn2, ra2, ci2, q2, dinv2)
        x2 = b.copy()
        K.ldl_solve(rn2, ra2, ci2, q2, dinv2, x2, x2)  # aliased in/out
        np.testing.assert_allclose(x2, x, rtol=1e-9, atol=1e-12)
    n = 3
    rn2, ra2, ci2 = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(6, np.int64)
    assert not K.ldl_dense(np.diag([1.0, -1.0, 2.0]), rn2, ra2, ci2, np.empty(6), np.empty(n))
    assert not K.ldl_dense(np.array([[np.nan]]), rn2[:1], ra2[:1], ci2[:1], np.empty(1), np.empty(1))


# --------------------------------------------------------------------------- inverse constraint force


@pytest.mark.parametrize("make", [humanoid_standing, hand_holding_ball])
@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
def test_constraint_force_matches_mj_inverse(make, cone, rng):
    m, d = make(cone)
    solver = GDDSolver(m)
    problem = solver.problem(d)
    assert problem.nefc > 0
    states_seen = set()
    for scale in (0.3, 3.0, 30.0):
        for _ in range(8):
            a = d.qacc + rng.normal(scale=scale, size=m.nv)
            d.qacc[:] = a
            mujoco.mj_inverse(m, d)
            f = problem.constraint_force(a)
            g = problem.inverse_dynamics(a)
            fscale = 1.0 + np.abs(d.efc_force).max()
            gscale = 1.0 + np.abs(d.qfrc_inverse).max()
            assert np.abs(f - d.efc_force).max() <= 1e-10 * fscale
            assert np.abs(g - d.qfrc_inverse).max() <= 1e-10 * gscale
            states_seen.update(d.efc_state.tolist())
    # the random accelerations exercise both sides of the one-sided rows (and the cone zone)
    assert {int(mujoco.mjtConstraintState.mjCNSTRSTATE_SATISFIED),
            int(mujoco.mjtConstraintState.mjCNSTRSTATE_QUADRATIC)} <= states_seen
    if cone == "elliptic":
        assert int(mujoco.mjtConstraintState.mjCNSTRSTATE_CONE) in states_seen


def test_constraint_force_jacobian_matches_finite_differences(rng):
    m, d = hand_holding_ball()
    problem = GDDSolver(m).problem(d)
    a = d.qacc + rng.normal(scale=0.5, size=m.nv)
    f, dfda = problem.constraint_force(a, jacobian=True)
    check_derivatives(problem.constraint_force, a, dfda, eps=1e-7, rtol=1e-6, atol=1e-6 * np.abs(dfda).max(),
                      name="df/da")


# --------------------------------------------------------------------------- closed form


@pytest.mark.parametrize("moving", [False, True])
def test_fully_actuated_end_effector_closed_form_eq12(moving, rng):
    """No constraints, full actuation: a = (M + JᵀJ)⁻¹(Jᵀ(a* − J̇v) − c) (GDD eq. 12)."""
    m = mujoco.MjModel.from_xml_string(ARM_XML)
    d = mujoco.MjData(m)
    d.qpos[:] = [0.3, -0.4, 0.8]
    if moving:
        d.qvel[:] = rng.normal(size=m.nv)
    mujoco.mj_forward(m, d)
    assert d.nefc == 0
    a_star = np.array([0.5, -1.0, 2.0])
    ee = EndEffectorAcceleration(m, site="tip", target=a_star, weight=1.0)
    solver = GDDSolver(m)
    res = solver.solve(d, Cost(ee))
    assert res.status == GDDStatus.CONVERGED
    problem = solver.problem(d)
    M, c = problem.M, problem.c
    jac = np.zeros((3, m.nv))
    mujoco.mj_jacSite(m, d, jac, None, ee.site_id)
    jdv = ee.bias_acceleration(problem)
    expected = np.linalg.solve(M + jac.T @ jac, jac.T @ (a_star - jdv) - c)
    assert np.allclose(res.qacc, expected, rtol=1e-10, atol=1e-10)
    assert res.iterations <= 2
    # the control reproduces the acceleration through MuJoCo's forward dynamics
    solver.forward(d, res)
    assert res.physics_violation <= 1e-10


# --------------------------------------------------------------------------- solution quality


def test_standing_humanoid_reach_is_physical_and_stationary():
    m, d = humanoid_standing()
    cost, goal, sid = reach_cost(m, d)
    solver = GDDSolver(m)
    res = solver.solve(d, cost)
    assert res.status == GDDStatus.CONVERGED
    assert res.nefc > 0 and res.ncon >= 2
    assert res.residual_gradient <= 1e-6
    # no force on the unactuated (root) directions
    assert np.abs(res.unactuated_force).max() <= 1e-8
    # physics: the clamped control reproduces a_gdd through MuJoCo's forward dynamics
    solver.forward(d, res)
    assert res.physics_violation <= 1e-8
    a_cold = cold_forward(m, d, res.ctrl)
    assert np.linalg.norm(a_cold - res.qacc) <= 1e-8
    assert inverse_residual(m, d, res.qacc, res.ctrl) <= 1e-7
    # stationarity (KKT) checked independently of the solver's multipliers:
    # ∇[½gᵀM⁻¹g + ℓ](a*) must lie in the span of Pᵀ Z (the unactuated directions)
    problem = solver.problem(d)
    a = res.qacc
    jar = problem.J @ a - problem.aref
    assert np.abs(jar).min() > 1e-6  # smooth neighbourhood for finite differences

    def objective(x):
        g = problem.inverse_dynamics(x)
        return 0.5 * g @ np.linalg.solve(problem.M, g) + cost.evaluate(problem, x)[0]

    eps = 1e-6
    grad = finite_difference_jacobian(objective, a, eps=eps)
    _, dfda = problem.constraint_force(a, jacobian=True)
    P = problem.M - problem.J.T @ dfda
    basis = P.T @ problem.actuation.Zt.T
    coef, *_ = np.linalg.lstsq(basis, grad, rcond=None)
    assert np.linalg.norm(grad - basis @ coef) <= 1e-5 * max(1.0, np.linalg.norm(grad))


def test_box_constraints_are_respected_at_convergence():
    m, d = humanoid_standing()
    arm = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, n)
           for n in ("right_shoulder_y", "right_shoulder_x", "right_elbow")]
    m.actuator_ctrlrange[arm] = [[-0.05, 0.05]] * 3
    # a forward/outward hand acceleration the weakened arm cannot produce
    ee = EndEffectorAcceleration(m, site="right_hand", target=[20.0, -10.0, 0.0], weight=100.0)
    cost = Cost(ee, AccelerationTarget(m, posture_policy(m, d.qpos.copy()), weight=30.0),
                Damping(0.1, 5.0))
    solver = GDDSolver(m)
    res = solver.solve(d, cost)
    assert res.status == GDDStatus.CONVERGED
    act = solver.problem(d).actuation
    w = res.actuator_force
    span = act.force_hi - act.force_lo
    tol = 1e-9 * np.where(np.isfinite(span), span, 1.0)
    assert np.all(w >= act.force_lo - tol) and np.all(w <= act.force_hi + tol)
    at_bound = np.isclose(w, act.force_hi, atol=1e-6) | np.isclose(w, act.force_lo, atol=1e-6)
    assert at_bound[arm].any()  # the reduced limits do bind
    assert np.abs(res.unactuated_force).max() <= 1e-8
    ctrl = res.ctrl[arm]
    assert np.all(np.abs(ctrl) <= 0.05 + 1e-12)
    solver.forward(d, res)
    assert res.physics_violation <= 1e-6


def test_general_actuation_tendon_gear_and_position_servo(mixed_model):
    """B from MuJoCo: geared motor, position servo (affine bias) and a tendon motor (non-selection Z)."""
    m = mixed_model
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    solver = GDDSolver(m)
    problem = solver.problem(d)
    Zt = problem.actuation.Zt
    assert Zt.shape[0] == m.nv - 3
    assert not np.all(np.isin(np.abs(Zt), [0.0, 1.0]))  # the tendon makes Z a general basis
    cost = Cost(EndEffectorAcceleration(m, site="tip", target=[0.0, 0.0, 1.0], weight=10.0),
                AccelerationTarget(m, np.zeros(m.nv), metric="identity", weight=0.01))
    res = solver.solve(d, cost)
    assert res.status == GDDStatus.CONVERGED
    assert np.abs(res.unactuated_force).max() <= 1e-8
    solver.forward(d, res)
    assert res.physics_violation <= 1e-8
    assert inverse_residual(m, d, res.qacc, res.ctrl) <= 1e-7


@pytest.mark.parametrize("make, site, offset, w", [
    (humanoid_standing, "right_hand", (0.3, -0.1, 0.35), 200.0),
    (hand_holding_ball, "index_tip_site", (0.0, 0.0, 0.02), 1.0),
])
def test_exact_line_search_matches_one_dimensional_search(make, site, offset, w):
    m, d = make()
    cost, _, _ = reach_cost(m, d, site=site, offset=offset, w_ee=w, w_post=w / 5)
    exact = GDDSolver(m).solve(d, cost)
    brute = GDDSolver(m, line_search="newton1d").solve(d, cost)
    assert exact.status == GDDStatus.CONVERGED
    assert np.allclose(exact.qacc, brute.qacc, rtol=1e-8, atol=1e-8)


def test_first_order_dual_updates_reach_the_same_solution():
    m, d = humanoid_standing()
    cost, _, _ = reach_cost(m, d)
    newton = GDDSolver(m).solve(d, cost)
    first = GDDSolver(m, dual_update="first_order", max_dual_updates=50, max_iterations=200).solve(d, cost)
    assert first.status == GDDStatus.CONVERGED
    assert first.dual_updates >= newton.dual_updates
    assert np.allclose(first.qacc, newton.qacc, atol=1e-7)


def test_elliptic_cones_use_the_fallback_search_and_stay_physical():
    m, d = humanoid_standing("elliptic")
    cost, _, _ = reach_cost(m, d)
    solver = GDDSolver(m)
    res = solver.solve(d, cost)
    assert res.status == GDDStatus.CONVERGED
    assert res.breakpoints == 0  # no piecewise-quadratic sweep with elliptic cones
    assert np.abs(res.unactuated_force).max() <= 1e-8
    solver.forward(d, res)
    assert res.physics_violation <= 1e-6
    assert inverse_residual(m, d, res.qacc, res.ctrl) <= 1e-6


# --------------------------------------------------------------------------- cost terms


def _fd_check(term, problem, a, eps=1e-6, rtol=1e-5):
    value, grad, hess = term.evaluate(problem, a)
    gs = max(1.0, np.abs(grad).max())
    hs = max(1.0, np.abs(hess).max())
    assert np.isfinite(value)
    # errors bounded relative to the largest entry: rtol · max(1, max|·|) as an absolute tolerance
    check_derivatives(lambda x: term.evaluate(problem, x)[0], a, grad, eps=eps, rtol=0.0, atol=rtol * gs,
                      name="gradient")
    check_derivatives(lambda x: term.evaluate(problem, x)[1], a, hess, eps=eps, rtol=0.0, atol=rtol * hs,
                      name="Hessian")
    assert np.allclose(hess, hess.T)


def _terms_humanoid(m, d):
    goal = d.site_xpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "left_hand")] + [0.1, 0.2, 0.3]
    quat = np.array([np.cos(0.3), 0.0, np.sin(0.3), 0.0])
    return [
        EndEffectorAcceleration(m, site="left_hand", target=SpringDamper(goal, stiffness=30.0), weight=3.0),
        EndEffectorAcceleration(m, body="torso", weight=2.0,
                                target=SpringDamper(goal, orientation=quat, stiffness=20.0)),
        EndEffectorAcceleration(m, site="head", target=MinimumJerk(goal, 1.0), weight=1.5),
        Damping(0.7, 4.0),
        CenterOfMassAcceleration(m, target=SpringDamper([0.02, 0.01, 0.9], stiffness=10.0), weight=5.0),
        CenterOfPressure(m, [0.03, -0.01], weight=50.0),
        ContactForce(m, "left_foot", [0.0, 0.0, 200.0], weight=1e-3),
        AccelerationTarget(m, np.linspace(-1, 1, m.nv), weight=0.3),
        AccelerationTarget(m, np.linspace(1, -1, m.nv), metric="identity", dofs=[0, 3, 7, 20], weight=2.0),
    ]


@pytest.mark.parametrize("index", range(9))
def test_cost_term_derivatives_match_finite_differences(index, rng):
    m, d = humanoid_standing()
    d.qvel[:] = rng.normal(scale=0.3, size=m.nv)
    mujoco.mj_forward(m, d)
    term = _terms_humanoid(m, d)[index]
    problem = GDDSolver(m).problem(d)
    a = d.qacc + rng.normal(scale=0.5, size=m.nv)
    jar = problem.J @ a - problem.aref
    assert np.abs(jar).min() > 1e-4  # away from the kinks of f(a)
    _fd_check(term, problem, a)


def test_sum_of_terms_derivatives_and_weights(rng):
    m, d = hand_holding_ball()
    terms = [
        EndEffectorAcceleration(m, site="thumb_tip_site", target=[0.1, 0.2, -0.3], weight=2.0),
        ContactForce(m, "ball", [0.0, 0.0, 0.5], weight=4.0),
        Damping(0.5, 2.0),
    ]
    cost = Cost(terms[0]) + terms[1] + terms[2]
    problem = GDDSolver(m).problem(d)
    a = d.qacc + rng.normal(scale=0.2, size=m.nv)
    _fd_check(cost, problem, a)
    total = cost.evaluate(problem, a)[0]
    assert total == pytest.approx(sum(t.evaluate(problem, a)[0] for t in terms), rel=1e-12)
    # weights scale linearly; an inactive term contributes nothing
    v1 = terms[1].evaluate(problem, a)[0]
    terms[1].weight = 8.0
    assert terms[1].evaluate(problem, a)[0] == pytest.approx(2 * v1, rel=1e-12)
    terms[1].active = False
    assert cost.evaluate(problem, a)[0] == pytest.approx(total - v1, rel=1e-9)


def _time_derivative(m, d, quantity, h=1e-6):
    """Central difference of quantity(data) along q(t) = q ⊕ v t with a = 0."""
    vals = []
    for s in (-h, h):
        d2 = mujoco.MjData(m)
        d2.qpos[:] = d.qpos
        mujoco.mj_integratePos(m, d2.qpos, d.qvel, s)
        d2.qvel[:] = d.qvel
        mujoco.mj_forward(m, d2)
        vals.append(quantity(d2))
    return (vals[1] - vals[0]) / (2 * h)


def test_bias_accelerations_match_time_derivatives(rng):
    m, d = humanoid_standing()
    d.qvel[:] = rng.normal(scale=0.5, size=m.nv)
    mujoco.mj_forward(m, d)
    problem = GDDSolver(m).problem(d)
    ee = EndEffectorAcceleration(m, site="right_hand", target=np.zeros(6), weight=1.0)
    jac = np.zeros((6, m.nv))

    def site_velocity(dd):
        mujoco.mj_jacSite(m, dd, jac[:3], jac[3:], ee.site_id)
        return jac @ dd.qvel

    assert np.allclose(ee.bias_acceleration(problem), _time_derivative(m, d, site_velocity), atol=1e-5)
    com = CenterOfMassAcceleration(m, target=np.zeros(3))
    jc = np.zeros((3, m.nv))

    def com_velocity(dd):
        mujoco.mj_jacSubtreeCom(m, dd, jc, 0)
        return jc @ dd.qvel

    assert np.allclose(com.bias_acceleration(problem), _time_derivative(m, d, com_velocity), atol=1e-5)


def test_contact_force_and_center_of_pressure_decode_the_rows():
    m, d = hand_holding_ball()
    problem = GDDSolver(m).problem(d)
    ball = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "ball")
    G = ContactForce(m, "ball", [0, 0, 0]).force_matrix(problem)
    expected = np.zeros(3)
    frc = np.zeros(6)
    for c in range(d.ncon):
        mujoco.mj_contactForce(m, d, c, frc)
        world = d.contact.frame[c].reshape(3, 3).T @ frc[:3]
        b1, b2 = m.geom_bodyid[d.contact.geom[c]]
        if b2 == ball:
            expected += world
        elif b1 == ball:
            expected -= world
    assert np.allclose(G @ d.efc_force, expected, atol=1e-10)
    # the ball is held: the contacts carry (about) its weight and accelerate it
    mass = m.body_mass[ball]
    assert np.allclose(expected, mass * (d.qacc[-6:-3] - m.opt.gravity), atol=1e-6)

    m2, d2 = humanoid_standing()
    problem2 = GDDSolver(m2).problem(d2)
    cop = CenterOfPressure(m2, [0.0, 0.0])
    p = cop.center_of_pressure(problem2, d2.efc_force)
    fn = np.array([d2.efc_force[d2.contact.efc_address[c]:d2.contact.efc_address[c] + 4].sum()
                   for c in range(d2.ncon)])
    assert np.allclose(p, fn @ d2.contact.pos[:, :2] / fn.sum())
    at_cop = CenterOfPressure(m2, p)
    assert at_cop.evaluate(problem2, d2.qacc)[0] == pytest.approx(0.0, abs=1e-20)


def test_minimum_jerk_profile():
    mj = MinimumJerk([1.0, 0.0, 0.0], 2.0, start=[0.0, 0.0, 0.0], start_time=0.0)
    x0, v0, a0 = mj.reference(0.0)
    x1, v1, a1 = mj.reference(1.0)
    x2, v2, a2 = mj.reference(2.0)
    assert np.allclose(x0, 0) and np.allclose(v0, 0) and np.allclose(a0, 0)
    assert np.allclose(x1, [0.5, 0, 0]) and v1[0] == pytest.approx(1.875 / 2)
    assert np.allclose(x2, [1, 0, 0]) and np.allclose(v2, 0) and np.allclose(a2, 0)
    h = 1e-6
    assert np.allclose((mj.reference(0.7 + h)[0] - mj.reference(0.7 - h)[0]) / (2 * h),
                       mj.reference(0.7)[1], atol=1e-6)
    assert np.allclose((mj.reference(0.7 + h)[1] - mj.reference(0.7 - h)[1]) / (2 * h),
                       mj.reference(0.7)[2], atol=1e-5)


# --------------------------------------------------------------------------- goal-directed simulation


def test_humanoid_reaches_for_a_goal_while_standing():
    m, d = humanoid_standing()
    cost, goal, sid = reach_cost(m, d)
    # keep the centre of mass over the feet, so both feet stay on the ground
    cost = cost + CenterOfMassAcceleration(m, target=SpringDamper(d.subtree_com[0].copy(), stiffness=20.0),
                                           weight=2000.0)
    solver = GDDSolver(m)
    left = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "left_foot")
    right = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "right_foot")
    d0 = np.linalg.norm(d.site_xpos[sid] - goal)
    results = []
    for _ in range(200):  # 1 s
        results.append(gdd_step(m, d, cost, solver))
        feet = {int(m.geom_bodyid[g]) for c in range(d.ncon) for g in d.contact.geom[c]}
        assert {left, right} <= feet  # both feet on the ground throughout
    dist = np.linalg.norm(d.site_xpos[sid] - goal)
    assert dist < 0.3 * d0
    assert d.qpos[2] > 0.9  # still standing, pelvis upright
    assert d.xmat[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "pelvis")][8] > 0.95
    status = np.array([r.status for r in results])
    assert np.mean(status == GDDStatus.CONVERGED) >= 0.95
    iters = np.array([r.iterations for r in results])
    assert np.median(iters) <= 5
    viol = np.array([r.physics_violation for r in results])
    assert np.median(viol) <= 1e-8 and np.percentile(viol, 95) <= 1e-6
    assert np.percentile([r.residual_gradient for r in results], 95) <= 1e-6
    assert json.dumps(results[-1].summary())


# --------------------------------------------------------------------------- bad input


def test_unknown_names_and_bad_targets_raise():
    m, d = humanoid_standing()
    with pytest.raises(ParameterError, match="no body named 'nope'"):
        EndEffectorAcceleration(m, body="nope", target=np.zeros(3))
    with pytest.raises(ParameterError, match="no site named"):
        EndEffectorAcceleration(m, site="left_hnd", target=np.zeros(3))
    with pytest.raises(ParameterError, match="exactly one"):
        EndEffectorAcceleration(m, target=np.zeros(3))
    with pytest.raises(NonFiniteError):
        SpringDamper([np.nan, 0.0, 1.0])
    with pytest.raises(ParameterError):
        EndEffectorAcceleration(m, site="head", target=np.zeros(4))
    with pytest.raises(ParameterError):
        ContactForce(m, "no_such_body", [0, 0, 1])
    with pytest.raises(ParameterError):
        Damping(-1.0)
    with pytest.raises(ParameterError):
        GDDSettings(max_iterations=0)
    with pytest.raises(ParameterError):
        GDDSolver(m, line_search="bisection")
    with pytest.raises(ParameterError):
        GDDSolver(m).solve(d, "not a cost")


def test_data_of_another_model_is_rejected():
    """The compiled step runs MuJoCo on (model, data) through raw pointers: an MjData made for
    another model (here the hand's, with the humanoid's nq, nv and nu) is refused, not solved."""
    m, d = humanoid_standing()
    solver = GDDSolver(m)
    cost = Cost(Damping(0.1, 5.0))
    solver.solve(d, cost)
    other = mujoco.MjData(contactopt.load_model("hand"))
    with pytest.raises(ParameterError, match="different model"):
        solver.solve(other, cost)
    assert solver.solve(d, cost).converged  # the solver still works on its own data


def test_model_without_actuators_is_rejected():
    m = mujoco.MjModel.from_xml_string(ARM_XML.split("<actuator>")[0] + "</mujoco>")
    with pytest.raises(ParameterError, match="no actuators"):
        GDDSolver(m)


def test_non_finite_cost_raises_and_never_steps():
    m, d = humanoid_standing()
    policy = AccelerationTarget(m, lambda problem: np.full(m.nv, np.nan), weight=1.0, name="broken policy")
    cost = Cost(policy, Damping(0.1, 5.0))
    solver = GDDSolver(m)
    t0, ctrl0, qpos0 = d.time, d.ctrl.copy(), d.qpos.copy()
    with pytest.raises(NonFiniteError, match="broken policy"):
        gdd_step(m, d, cost, solver)
    assert d.time == t0 and np.array_equal(d.ctrl, ctrl0) and np.array_equal(d.qpos, qpos0)
    with pytest.raises(NonFiniteError):
        AccelerationTarget(m, np.full(m.nv, np.inf))


def test_non_finite_state_raises_and_never_steps():
    m, d = humanoid_standing()
    cost, _, _ = reach_cost(m, d)
    d.qvel[3] = np.nan
    t0 = d.time
    with pytest.raises(NonFiniteError, match="state"):
        gdd_step(m, d, cost, GDDSolver(m))
    assert d.time == t0 and np.isnan(d.qvel[3])


def test_apply_refuses_a_failed_result():
    m, d = humanoid_standing()
    cost, _, _ = reach_cost(m, d)
    solver = GDDSolver(m)
    res = solver.solve(d, cost)
    res.ctrl[0] = np.nan
    ctrl0 = d.ctrl.copy()
    with pytest.raises(SimulationError):
        solver.apply(d, res)
    assert np.array_equal(d.ctrl, ctrl0)


def test_result_log_and_warm_start():
    m, d = humanoid_standing()
    cost, _, _ = reach_cost(m, d)
    solver = GDDSolver(m)
    first = solver.solve(d, cost)
    assert len(first.log) == first.iterations >= 1 and isinstance(first.log, tuple)
    assert first.log[0].factored and first.log[0].alpha > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.log[0].alpha = 0.0
    t = first.timing()   # the keys shared by the three solvers
    assert set(t) == {"derivatives", "solve", "line_search", "total"}
    assert t["solve"] == t["total"] == first.solve_time > 0 and t["derivatives"] == t["line_search"] == 0
    again = solver.solve(d, cost)  # warm start from the solution of the same state
    assert again.iterations <= 1 and again.dual_updates <= 1
    assert np.allclose(again.qacc, first.qacc, atol=1e-9)
    solver.reset()
    cold = solver.solve(d, cost)
    assert np.allclose(cold.qacc, first.qacc, atol=1e-8)
    assert K.ST_NSTAT == len(solver._stats)


def test_planner_reports_the_shared_breakdown_and_status_name():
    from contactopt.mpc.gdd_planner import GDDPlanner
    from contactopt.mpc.runner import BREAKDOWN_KEYS

    m, d = humanoid_standing()
    cost, _, _ = reach_cost(m, d)
    planner = GDDPlanner(m, cost)
    upd = planner.reset(0.0, np.concatenate([d.qpos, d.qvel, d.act]))
    assert upd.policy is not None
    assert set(upd.breakdown) == set(BREAKDOWN_KEYS) == {"derivatives", "solve", "line_search"}
    assert upd.breakdown["solve"] == planner.result.solve_time
    assert upd.message == planner.result.status.name


def test_spring_damper_fast_path_matches_generic_targets():
    """The compiled spring-damper residual equals the generic FrameState path (capped and not)."""
    m, d = humanoid_standing()
    d.qvel[:] = np.random.default_rng(3).normal(scale=0.3, size=m.nv)
    mujoco.mj_forward(m, d)
    problem = GDDSolver(m).problem(d)

    class Generic:  # same law, but a plain callable: takes the FrameState path
        def __init__(self, sd):
            self.sd, self.dim = sd, 3

        def __call__(self, frame):
            return self.sd(frame)

    for cap in (None, 0.5):
        sd = SpringDamper(d.site_xpos[4] + 0.2, stiffness=30.0, max_acceleration=cap)
        for make in (lambda t: EndEffectorAcceleration(m, site="right_hand", target=t),
                     lambda t: EndEffectorAcceleration(m, body="left_foot", target=t),
                     lambda t: CenterOfMassAcceleration(m, target=t),
                     lambda t: CenterOfMassAcceleration(m, body="torso", target=t)):
            fast, slow = make(sd).term_model(problem), make(Generic(sd)).term_model(problem)
            assert np.allclose(fast.Ka, slow.Ka, atol=1e-14)
            assert np.allclose(fast.e, slow.e, rtol=1e-12, atol=1e-12)
    sd.position = [0.1, 0.2, 0.3]  # assignable, validated
    assert sd.position.dtype == float and sd.position.shape == (3,)
    with pytest.raises(Exception):
        sd.position = [0.0, 1.0]


def test_workspace_is_reused_across_states_with_different_constraint_counts():
    """The kernel workspace grows for more constraint rows and is reused for fewer (same results)."""
    m, d = humanoid_standing()
    cost, _, _ = reach_cost(m, d)
    d_air = mujoco.MjData(m)
    d_air.qpos[:] = d.qpos
    d_air.qpos[2] += 0.5
    mujoco.mj_forward(m, d_air)
    solver = GDDSolver(m, warm_start=False)
    air = solver.solve(d_air, cost)  # small workspace
    ground = solver.solve(d, cost)  # grown
    air_again = solver.solve(d_air, cost)  # the larger workspace reused
    fresh = GDDSolver(m, warm_start=False).solve(d, cost)
    assert ground.nefc > air.nefc
    assert all(r.converged for r in (air, ground, air_again, fresh))
    assert np.allclose(ground.qacc, fresh.qacc, rtol=0, atol=1e-10)
    assert np.allclose(air_again.qacc, air.qacc, rtol=0, atol=1e-10)
    assert np.allclose(ground.ctrl, fresh.ctrl, rtol=0, atol=1e-10)


# --------------------------------------------------------------------------- compiled step, safeguard


def _builtin_cost(m, d, *, xfrc=False):
    """Built-in terms only (the compiled step): two frame terms, a CoM spring on two axes, a
    posture PD target (mass metric), a fixed diagonal target and damping."""
    sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "right_hand")
    ee = EndEffectorAcceleration(m, site="right_hand", weight=200.0,
                                 target=SpringDamper(d.site_xpos[sid] + [0.2, -0.1, 0.2], stiffness=40.0,
                                                     max_acceleration=10.0))
    foot = EndEffectorAcceleration(m, body="left_foot", weight=50.0, target=np.array([0.0, 0.1, -0.2]))
    com = CenterOfMassAcceleration(m, weight=1e3, target=SpringDamper(np.r_[d.subtree_com[0, :2], 0.0],
                                                                      stiffness=100.0, axes=(1, 1, 0)))
    posture = AccelerationTarget(m, PostureTarget(m, d.qpos.copy(), kp=30.0), weight=40.0)
    arms = AccelerationTarget(m, np.linspace(-1, 1, m.nv), weight=5.0, metric="identity", dofs=[6, 7, 8])
    return Cost(ee, foot, com, posture, arms, Damping(0.1, 5.0))


def test_compiled_step_matches_the_general_path(rng):
    """The one-call compiled step (problem + built-in terms in the kernel) equals the general path."""
    m, d = humanoid_standing()
    cost = _builtin_cost(m, d)
    for trial in range(3):
        d.qvel[:] = rng.normal(scale=0.3, size=m.nv)
        d.xfrc_applied[:] = 0.0
        if trial:
            d.xfrc_applied[rng.integers(1, m.nbody)] = rng.normal(size=6)
        mujoco.mj_forward(m, d)
        fast_solver = GDDSolver(m, warm_start=False)
        fast = fast_solver.solve(d, cost)
        assert fast_solver._plan is not None and fast_solver._plan.ok
        slow_solver = GDDSolver(m, warm_start=False)
        slow = slow_solver.solve(d, cost, problem=slow_solver.problem(d))
        assert fast.converged and slow.converged
        assert np.allclose(fast.qacc, slow.qacc, rtol=0, atol=1e-8 * (1 + np.abs(slow.qacc).max()))
        assert np.allclose(fast.ctrl, slow.ctrl, rtol=0, atol=1e-8 * (1 + np.abs(slow.ctrl).max()))
    # weights, activity and goals are read by the compiled step without rebuilding its plan
    solver = GDDSolver(m, warm_start=False)
    solver.solve(d, cost)
    plan = solver._plan
    cost.terms[0].target.position[:] += 0.05
    cost.terms[1].active = False
    cost.terms[3].weight = 10.0
    fast = solver.solve(d, cost)
    assert solver._plan is plan
    slow = GDDSolver(m, warm_start=False)
    slow_res = slow.solve(d, cost, problem=slow.problem(d))
    assert np.allclose(fast.qacc, slow_res.qacc, rtol=0, atol=1e-8 * (1 + np.abs(slow_res.qacc).max()))
    # replacing a target object rebuilds the plan; a callable target takes the general path
    cost.terms[1].target = SpringDamper(d.xpos[5], stiffness=10.0)
    solver.solve(d, cost)
    assert solver._plan is not plan and solver._plan.ok
    cost.terms[3].set_target(np.zeros(m.nv))
    generic = Cost(*cost.terms, AccelerationTarget(m, lambda problem: np.zeros(m.nv)))
    solver.solve(d, generic)
    assert not solver._plan.ok


@pytest.mark.parametrize("body", [None, "pelvis", "torso", "right_upper_arm", "left_shin"])
def test_compiled_center_of_mass_rows_match_the_general_term(body, rng):
    """The compiled step's per-dof centre-of-mass Jacobian (subtree_com and subtree masses) and
    its one-pass bias equal the term's own rows (mj_jacSubtreeCom, body-by-body bias), for the
    whole model and for subtrees below the floating base."""
    m, d = humanoid_standing()
    d.qvel[:] = rng.normal(scale=0.5, size=m.nv)
    mujoco.mj_forward(m, d)
    com = CenterOfMassAcceleration(m, body=body, weight=3.0,
                                   target=SpringDamper(np.array([0.1, -0.2, 0.9]), stiffness=20.0))
    cost = Cost(com, Damping(0.1, 5.0))
    solver = GDDSolver(m)
    solver.solve(d, cost)
    assert solver._plan.ok
    general = cost.arrays(solver.problem(d))
    km, kd, m1, m2 = general.dims
    assert m1 == 3
    Ka1, e1 = general.Ka1, general.e1
    o = km * (m.nv + 1) + kd * (2 * m.nv + 1)
    fast_Ka1 = solver._plan.costbuf[o:o + 3 * m.nv].reshape(3, m.nv)
    fast_e1 = solver._plan.costbuf[o + 3 * m.nv:o + 3 * m.nv + 3]
    assert np.abs(Ka1).max() > 0.1 and np.abs(e1).max() > 0.1
    assert np.allclose(fast_Ka1, Ka1, rtol=0, atol=1e-12)
    assert np.allclose(fast_e1, e1, rtol=0, atol=1e-12 * (1 + np.abs(e1).max()))
    assert np.allclose(solver._plan.costbuf, general.buffer, rtol=0, atol=1e-11)


def _humanoid_with_friction_loss():
    m, d = humanoid_standing()
    m.dof_frictionloss[6:12] = 0.5  # friction-loss rows (read through their own mjData field)
    mujoco.mj_forward(m, d)
    return m, d


@pytest.mark.parametrize("make", [humanoid_standing, hand_holding_ball])
def test_outputs_after_an_incremental_evaluation_match_mj_inverse(make):
    """A step that crosses no breakpoint updates g, M⁻¹g and the constraint rows along the line
    instead of re-evaluating them (kernels._evaluate_step); the forces reported at the solution
    must still be MuJoCo's inverse dynamics at the solution's acceleration."""
    m, d = make()
    humanoid = make is humanoid_standing
    cost = _builtin_cost(m, d) if humanoid else Cost(Damping(0.1, 5.0))
    solver = GDDSolver(m)
    rng = np.random.default_rng(3)
    q0, stepped = d.qpos.copy(), 0
    for k in range(12):
        d.qpos[:] = q0
        d.qvel[:] = rng.normal(scale=0.3, size=m.nv)
        res = solver.solve(d, cost)  # (a hard sequence: one solve of the humanoid stalls at 2e-5 N)
        assert res.status in (GDDStatus.CONVERGED, GDDStatus.STALLED)
        stepped += bool(res.log) and res.log[-1].breakpoints == 0  # the last step: no breakpoint
        d.qacc[:] = res.qacc
        mujoco.mj_inverse(m, d)  # stages as in the solve: the same rows
        assert d.nefc == res.nefc
        fscale = 1.0 + np.abs(d.efc_force).max()
        assert np.abs(res.efc_force - d.efc_force).max() <= 1e-9 * fscale
        gscale = 1.0 + np.abs(d.qfrc_inverse).max()
        assert np.abs(res.qfrc - (d.qfrc_inverse - d.qfrc_applied)).max() <= 1e-9 * gscale
        differ = res.efc_state != d.efc_state  # only rows on a kink (zero force) may differ
        assert np.abs(d.efc_force[differ]).max(initial=0.0) <= 1e-9 * fscale
    assert stepped >= 6  # so the solution was evaluated incrementally (unless a row was pinned)


@pytest.mark.parametrize("make", [humanoid_standing, hand_holding_ball, _humanoid_with_friction_loss])
def test_native_step_equals_the_step_staged_from_python(make, rng):
    """The native entry (stages and constraint rows read in the compiled call) gives bit for bit
    the results of the step whose stages and row views come from Python — also when a state has
    more constraint rows than any before (its outputs grow) and when the stages are given."""
    from contactopt.solvers.gdd import solver as solver_module

    m, d = make()
    assert solver_module._efc_layout() is not None  # this installation runs the native entry
    humanoid = make is not hand_holding_ball
    cost = _builtin_cost(m, d) if humanoid else Cost(Damping(0.1, 5.0))
    native, staged = GDDSolver(m), GDDSolver(m)
    staged._use_native = False
    assert native._fast_ok and GDDSolver(m)._plan is None
    q0 = d.qpos.copy()
    lifts = [0.5, 0.0, 0.0, 0.3, 0.0] if humanoid else [0.0] * 5
    for k, lift in enumerate(lifts):
        outs = []
        for solver in (native, staged):
            d.qpos[:] = q0
            d.qpos[2] += lift
            d.qvel[:] = np.random.default_rng(k).normal(scale=0.2, size=m.nv)
            if k == 4:  # stages computed by the caller
                mujoco.mj_fwdPosition(m, d)
                mujoco.mj_fwdVelocity(m, d)
                outs.append(solver.solve(d, cost, compute_stages=False))
            else:
                outs.append(solver.solve(d, cost))
        a, b = outs
        assert native._plan.native is not None and staged._plan.native is None
        assert native._plan.floss == (make is _humanoid_with_friction_loss)
        assert a.nefc == b.nefc and a.status == b.status and a.iterations == b.iterations
        for name in ("qacc", "ctrl", "qfrc", "efc_force", "efc_state", "actuator_force"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert a.residual_gradient == b.residual_gradient


def test_compiled_stages_skip_mj_island_and_leave_the_model_as_it_was():
    """The compiled step's stages run without mj_island (the flag is set only for that call);
    MuJoCo's forward solver then gives the same acceleration as with islands.  With sleeping
    enabled (it uses the islands) or islands already disabled nothing is skipped or changed."""
    m, d = humanoid_standing()
    cost = _builtin_cost(m, d)
    flags = (m.opt.disableflags, m.opt.enableflags)
    solver = GDDSolver(m)
    solver.solve(d, cost)  # (the first solve of a plan stages from Python: its native entry
    res = solver.solve(d, cost)  # is made then)
    assert solver._plan.native is not None
    assert res.converged and (m.opt.disableflags, m.opt.enableflags) == flags
    assert d.nefc > 0 and d.nisland == 0
    full = mujoco.MjData(m)
    for dd in (d, full):
        dd.ctrl[:] = res.ctrl
        dd.qacc_warmstart[:] = res.qacc
    full.qpos[:], full.qvel[:] = d.qpos, d.qvel
    mujoco.mj_forward(m, full)
    assert full.nisland >= 1
    mujoco.mj_forwardSkip(m, d, int(mujoco.mjtStage.mjSTAGE_VEL), 0)
    assert np.allclose(d.qacc, full.qacc, rtol=0, atol=1e-10 * (1 + np.abs(full.qacc).max()))
    sleep = getattr(mujoco.mjtEnableBit, "mjENBL_SLEEP", None)
    variants = [("disableflags", int(mujoco.mjtDisableBit.mjDSBL_ISLAND), 0)]
    if sleep is not None:
        variants.append(("enableflags", int(sleep), 1))
    for field, bit, islands in variants:
        m, d = humanoid_standing()
        setattr(m.opt, field, getattr(m.opt, field) | bit)
        flags = (m.opt.disableflags, m.opt.enableflags)
        solver = GDDSolver(m)
        cost = _builtin_cost(m, d)
        solver.solve(d, cost)
        assert solver.solve(d, cost).converged and solver._plan.native is not None
        assert (m.opt.disableflags, m.opt.enableflags) == flags
        assert (d.nisland >= 1) == bool(islands), field


def test_posture_target_matches_mj_differentiate_pos(rng):
    """The compiled configuration difference (free, ball, hinge joints) equals MuJoCo's."""
    xml = """<mujoco><worldbody>
      <body><freejoint/><geom size="0.1"/>
        <body pos="0 0 0.3"><joint type="ball"/><geom size="0.05"/>
          <body pos="0 0 0.3"><joint type="hinge" axis="0 1 0"/><joint type="slide" axis="1 0 0"/>
            <geom size="0.05"/></body></body></body>
      </worldbody><actuator><motor joint="0" gear="1"/></actuator></mujoco>""".replace('joint="0"', 'joint="j"')
    xml = xml.replace('<joint type="hinge" axis="0 1 0"/>', '<joint name="j" type="hinge" axis="0 1 0"/>')
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    from contactopt.solvers.gdd.fast_plan import _FastPlan

    for _ in range(5):
        q1 = rng.normal(size=m.nq)
        q2 = rng.normal(size=m.nq)
        for q in (q1, q2):
            q[3:7] /= np.linalg.norm(q[3:7])
            q[7:11] /= np.linalg.norm(q[7:11])
        expected = np.zeros(m.nv)
        mujoco.mj_differentiatePos(m, expected, 1.0, q1, q2)
        pt = PostureTarget(m, q2, kp=2.0, kd=0.5)
        term = AccelerationTarget(m, pt)
        plan = _FastPlan(GDDSolver(m), Cost(term))
        out = np.zeros(m.nv)
        K.differentiate_pos(plan.si, q1, 0, pt.qref, out)
        assert np.allclose(out, expected, atol=1e-12)
        d.qpos[:] = q1
        d.qvel[:] = rng.normal(size=m.nv)
        mujoco.mj_forward(m, d)
        problem = GDDSolver(m).problem(d)
        assert np.allclose(pt(problem), 2.0 * expected - 0.5 * d.qvel, atol=1e-12)


def test_non_finite_goal_on_the_compiled_step_raises_and_never_steps():
    m, d = humanoid_standing()
    cost = _builtin_cost(m, d)
    cost.terms[0].target.position[:] = np.nan
    solver = GDDSolver(m)
    t0, ctrl0 = d.time, d.ctrl.copy()
    with pytest.raises(NonFiniteError, match="right_hand"):
        gdd_step(m, d, cost, solver)
    assert d.time == t0 and np.array_equal(d.ctrl, ctrl0)


def test_safeguard_replaces_an_absurd_initial_guess(rng):
    """A first guess blown up by roundoff (1e12 m/s²) is replaced by the free acceleration."""
    m, d = humanoid_standing()
    cost = _builtin_cost(m, d)
    ref = GDDSolver(m, warm_start=False).solve(d, cost)
    assert ref.converged and ref.safeguards == 0
    guess = rng.normal(size=m.nv) * 1e12
    res = GDDSolver(m, warm_start=False).solve(d, cost, initial_qacc=guess)
    assert res.safeguards >= 1 and res.converged
    assert np.allclose(res.qacc, ref.qacc, rtol=0, atol=1e-7 * (1 + np.abs(ref.qacc).max()))
    # a poisoned warm start is caught the same way
    solver = GDDSolver(m)
    solver.solve(d, cost)
    solver._qacc = np.full(m.nv, 1e13)
    again = solver.solve(d, cost)
    assert again.safeguards >= 1 and again.converged and np.isfinite(again.ctrl).all()
    assert np.allclose(again.qacc, ref.qacc, rtol=0, atol=1e-7 * (1 + np.abs(ref.qacc).max()))


def test_safeguard_restarts_a_failed_solve_from_the_free_acceleration():
    """A first attempt that does not converge from a non-neutral guess is restarted once from
    the free acceleration; the outcome is reported (status, safeguards), never hidden."""
    m, d = humanoid_standing()
    cost = _builtin_cost(m, d)
    guess = np.full(m.nv, 1e3)
    off = GDDSolver(m, warm_start=False, safeguard=False, max_iterations=2).solve(d, cost, initial_qacc=guess)
    on = GDDSolver(m, warm_start=False, max_iterations=2).solve(d, cost, initial_qacc=guess)
    assert off.safeguards == 0 and on.safeguards == 1
    assert on.status == GDDStatus.MAX_ITERATIONS and on.iterations <= 2
    assert np.isfinite(on.qacc).all() and np.isfinite(on.ctrl).all()
    full = GDDSolver(m, warm_start=False).solve(d, cost, initial_qacc=guess)
    assert full.converged


def test_a_warm_started_solve_equals_a_cold_one_after_the_force_limits_let_go():
    """A warm start carries the box multipliers of the last solve.  After a solve where the
    force-limited servos saturate, a state where they do not must not keep the old multipliers
    pushing the solution (the dual loop checks complementarity, not only feasibility): the warm
    solve equals a cold solve of the same state.  Before the fix 2 of these 30 pairs differed,
    and in closed loop the reacher came to rest 10 cm from its goal."""
    from pathlib import Path

    from contactopt.solvers.gdd import EndEffectorAcceleration, SpringDamper

    m = contactopt.load_model(Path(__file__).resolve().parents[1] / "examples" / "style" / "reacher" / "reacher.xml")
    d = mujoco.MjData(m)

    def cost():
        spring = SpringDamper(m.site("target").pos.copy(), stiffness=40.0)
        return Cost(EndEffectorAcceleration(m, site="fingertip", target=spring, weight=500.0), Damping(0.1, 5.0))

    kp, kv = m.actuator_gainprm[:, 0], -m.actuator_biasprm[:, 2]

    def saturated(result):  # the servo force kp (u − q) − kv q̇ at a force limit
        force = kp * (result.ctrl - d.qpos) - kv * d.qvel
        return bool(np.any(np.abs(force) >= m.actuator_forcerange[:, 1] * (1 - 1e-6)))

    warm_cost, warm = cost(), GDDSolver(m)
    rng = np.random.default_rng(0)
    released = 0
    for _ in range(30):
        d.qpos[:] = rng.uniform(-2.5, 2.5, m.nq)  # far from the goal and fast
        d.qvel[:] = rng.uniform(-8.0, 8.0, m.nv)
        was_saturated = saturated(warm.solve(d, warm_cost))
        d.qpos[:] = rng.uniform(-0.5, 0.5, m.nq)  # near the goal, at rest
        d.qvel[:] = 0.0
        a = warm.solve(d, warm_cost)
        b = GDDSolver(m).solve(d, cost())
        released += was_saturated and not saturated(b)
        assert a.status == b.status == GDDStatus.CONVERGED
        np.testing.assert_allclose(a.ctrl, b.ctrl, rtol=1e-7, atol=1e-9)
        assert a.cost == pytest.approx(b.cost, rel=1e-7, abs=1e-9)
    assert released >= 3  # the case: multipliers loaded, then a state inside the limits
