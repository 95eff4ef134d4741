"""Tests of the IDTO core: compliant contact, problem (residuals, Jacobians) and the trust-region solver."""

import copy
import dataclasses
import math

import mujoco
import numpy as np
import pytest
import scipy.linalg

from contactopt.contact.compliant import (
    CompliantContactModel,
    ContactParameters,
    hunt_crossley_factor,
    regularized_friction,
    softplus_normal_force,
)
from contactopt.testing import check_derivatives, finite_difference_jacobian
from contactopt.errors import NonFiniteError, ParameterError, ShapeError
from contactopt.model import integrate_position, load_model
from contactopt.solvers.idto import (
    BandedHessian,
    IDTOProblem,
    IDTOSettings,
    IDTOSolver,
    IDTOStatus,
    gauss_newton_system,
)

from conftest import dense_fd_jacobian

# --------------------------------------------------------------------------- contact laws


def test_softplus_far_zero_deep_asymptote_and_spring_limit():
    k, s = 800.0, 0.01
    f, df = softplus_normal_force(np.array([1.0, 0.5]), k, s)
    assert np.all(f < 1e-15) and np.all(np.abs(df) < 1e-15)
    # deep: exactly −kφ beyond the asymptote switch, and within 1e-12 relative just before it
    phi = np.array([-0.5, -0.36, -0.1])
    f, df = softplus_normal_force(phi, k, s)
    np.testing.assert_allclose(f, -k * phi + s * k * np.log1p(np.exp(phi / s)), rtol=1e-14)
    np.testing.assert_allclose(f[:2], -k * phi[:2], rtol=1e-14)
    assert f[0] == -k * phi[0]
    assert f[2] - (-k * phi[2]) == pytest.approx(s * k * math.exp(-10), rel=1e-4)
    np.testing.assert_allclose(df[:2], -k, rtol=1e-14)
    # at φ = 0 the force is σ k log 2
    assert softplus_normal_force(0.0, k, s)[0] == pytest.approx(s * k * math.log(2))
    # σ → 0: linear spring k max(0, −φ)
    for p in (-0.01, 0.02):
        assert softplus_normal_force(p, k, 1e-7)[0] == pytest.approx(k * max(0.0, -p), abs=1e-3)
    # φ_max: the force there equals the threshold
    params = ContactParameters(stiffness=k, smoothing=s)
    fmax = softplus_normal_force(params.max_distance, k, s)[0]
    assert fmax == pytest.approx(params.force_threshold, rel=1e-6)
    assert params.max_distance > 0


def test_contact_law_derivatives_match_finite_differences(rng):
    k, s, vd, vs = 500.0, 0.02, 0.1, 0.05
    phi = rng.uniform(-0.1, 0.1, 20)
    eps = 1e-7
    f, df = softplus_normal_force(phi, k, s)
    np.testing.assert_allclose(df, (softplus_normal_force(phi + eps, k, s)[0] - softplus_normal_force(phi - eps, k, s)[0]) / (2 * eps), rtol=1e-6, atol=1e-6)
    vn = np.array([-0.3, -0.05, 0.03, 0.1, 0.19, 0.25, 0.5])
    d, dd = hunt_crossley_factor(vn, vd)
    np.testing.assert_allclose(dd, (hunt_crossley_factor(vn + eps, vd)[0] - hunt_crossley_factor(vn - eps, vd)[0]) / (2 * eps), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(d, [4.0, 1.5, (0.3 - 2) ** 2 / 4, 0.25, 0.0025, 0.0, 0.0], atol=1e-12)
    vt = rng.normal(scale=0.1, size=(6, 2))
    fn = rng.uniform(1, 10, 6)
    ft, dvt, dfn = regularized_friction(vt, fn, 0.7, vs)
    # one shared 2-D slip perturbation for every contact: ∂f_t/∂v_t per contact, (6, 2, 2)
    check_derivatives(lambda dv: regularized_friction(vt + dv, fn, 0.7, vs)[0], np.zeros(2), dvt, eps=eps,
                      rtol=1e-5, atol=1e-7, name="friction dvt")
    np.testing.assert_allclose(dfn, ft / fn[:, None], rtol=1e-12)
    # friction opposes sliding and stays inside the cone
    assert np.all(np.sum(ft * vt, axis=1) < 0)
    assert np.all(np.linalg.norm(ft, axis=1) < 0.7 * fn)


def test_contact_model_on_ball(rng):
    m = load_model("ball")
    params = ContactParameters(stiffness=1000.0, smoothing=0.001, dissipation_velocity=0.1, stiction_velocity=0.05, friction=0.5)
    cm = CompliantContactModel(m, params)
    d = mujoco.MjData(m)
    # far away: no pairs, zero force
    d.qpos[:] = [0, 0, 1.1, 1, 0, 0, 0]
    out = cm.forces(d, np.zeros(6), derivative=True)
    assert out.gamma.shape == (0, 3) and np.all(out.generalized == 0)
    # 5 mm penetration at rest: normal force ≈ k·0.005 upward, no friction
    d.qpos[:] = [0, 0, 0.095, 1, 0, 0, 0]
    out = cm.forces(d, np.zeros(6))
    assert out.gamma.shape[0] == 1
    assert out.generalized[2] == pytest.approx(1000 * 0.005 + 1.0 * math.log1p(math.exp(-5)), rel=1e-6)
    np.testing.assert_allclose(out.generalized[[0, 1, 3, 4, 5]], 0, atol=1e-9)
    # sliding in +x: friction along −x, and the rolling moment about y from it
    v = np.array([0.3, 0, 0, 0, 0, 0])
    out = cm.forces(d, v, derivative=True)
    assert out.generalized[0] < 0
    assert abs(out.generalized[0]) < 0.5 * out.generalized[2]
    # ∂F/∂v against central differences
    v = rng.normal(scale=0.05, size=6)
    out = cm.forces(d, v, derivative=True)
    fd = np.empty((6, 6))
    for i in range(6):
        e = np.zeros(6)
        e[i] = 1e-7
        fd[:, i] = (cm.generalized_force(d, v + e) - cm.generalized_force(d, v - e)) / 2e-7
    np.testing.assert_allclose(out.dforce_dv, fd, rtol=1e-5, atol=1e-5)


def test_contact_parameters_and_bodies_validation():
    m = load_model("hopper")
    for bad in (dict(stiffness=0), dict(smoothing=-1), dict(stiction_velocity=float("nan")), dict(friction=-0.1),
                dict(dissipation_velocity="x")):
        with pytest.raises(ParameterError):
            ContactParameters(**bad)
    with pytest.raises(ParameterError, match="unknown body"):
        CompliantContactModel(m, bodies=["no_such_body"])
    # a filter that excludes the foot's body removes the foot contact
    d = mujoco.MjData(m)
    d.qpos[:] = m.key_qpos[0]
    d.qpos[1] -= 0.01
    assert np.abs(CompliantContactModel(m, bodies=["shank"]).generalized_force(d, np.zeros(5))).max() > 1
    assert np.all(CompliantContactModel(m, bodies=["torso"]).generalized_force(d, np.zeros(5)) == 0)


# --------------------------------------------------------------------------- problem


def _hopper_problem(T=4, **kw):
    m = load_model("hopper")
    cm = CompliantContactModel(m, ContactParameters(stiffness=800, smoothing=0.01, friction=1.0, stiction_velocity=0.05))
    q0 = m.key_qpos[0].copy()
    qn = q0.copy()
    qn[0] += 0.3
    args = dict(q_nom=qn, Qq=[10, 10, 10, 0.1, 0.1], Qv=1.0, R=0.01, Qf_q=100.0, Qf_v=1.0, contact=cm)
    args.update(kw)
    return m, IDTOProblem(m, T, 0.05, q0, **args)


def test_inverse_dynamics_matches_mj_inverse(rng):
    m = load_model("acrobot")
    pr = IDTOProblem(m, 3, 0.05, np.zeros(2))
    m2 = copy.deepcopy(m)
    m2.opt.integrator = int(mujoco.mjtIntegrator.mjINT_RK4)  # no discrete-time correction in mj_inverse
    m2.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
    d2 = mujoco.MjData(m2)
    q, v, a = rng.normal(size=2), rng.normal(size=2), rng.normal(size=2)
    d2.qpos[:], d2.qvel[:], d2.qacc[:] = q, v, a
    mujoco.mj_inverse(m2, d2)
    tau, fc = pr.inverse_dynamics(q, v, a)
    np.testing.assert_allclose(tau, d2.qfrc_inverse, rtol=1e-10, atol=1e-10)
    assert np.all(fc == 0)


def test_quaternion_aware_velocities_on_free_body():
    m = load_model("ball")
    q0 = np.array([0, 0, 1.1, 1, 0, 0, 0.0])
    h = 0.05
    w = np.array([0.2, -0.1, 0.05, 1.5, -2.0, 0.7])  # linear (world) + angular (local) velocity
    q = [q0]
    for _ in range(3):
        q.append(integrate_position(m, q[-1], w, h))
    q = np.array(q)
    pr = IDTOProblem(m, 3, h, q0, v_init=w, R=1.0)
    tr = pr.trajectory(q)
    np.testing.assert_allclose(tr.v, np.tile(w, (4, 1)), atol=1e-9)
    np.testing.assert_allclose(tr.a, 0, atol=1e-7)
    # naive (q_t − q_{t−1})/h is the wrong length and wrong value for the rotation
    assert tr.v.shape == (4, 6)
    # a free-flying body at constant velocity needs τ = gravity compensation only (no contact far away)
    np.testing.assert_allclose(tr.tau[:, 2], 9.81 * m.body_mass[1], rtol=1e-3)


@pytest.mark.parametrize("name", ["hopper", "ball"])
def test_banded_hessian_and_gradient_match_dense_reference(name, rng):
    if name == "hopper":
        m, pr = _hopper_problem(T=4)
        q = np.tile(pr.q_init, (5, 1))
        q[1:, 1] -= np.linspace(0.001, 0.01, 4)  # foot in contact, moving
        q[1:, 0] += np.linspace(0.0, 0.02, 4)
    else:
        m = load_model("ball")
        q0 = np.array([0, 0, 0.098, 1, 0, 0, 0.0])
        cm = CompliantContactModel(m, ContactParameters(stiffness=1000, smoothing=0.005, friction=0.5))
        pr = IDTOProblem(m, 3, 0.05, q0, v_init=[0.1, 0, 0, 0, 0, 0], Qq=1.0, Qv=0.5, R=0.1, Qf_q=10, contact=cm)
        q = [q0]
        for _ in range(3):
            q.append(integrate_position(m, q[-1], rng.normal(scale=[0.05, 0.05, 0.002, 0.5, 0.5, 0.5]), 1.0))
        q = np.array(q)
    lin = pr.linearize(q)
    H, g = gauss_newton_system(pr, lin)
    J = dense_fd_jacobian(pr, q)
    r = pr.residuals(q)
    np.testing.assert_allclose(lin.r, r)
    Hd = J.T @ J
    scale = np.abs(Hd).max()
    np.testing.assert_allclose(H.to_dense(), Hd, atol=2e-5 * scale)
    np.testing.assert_allclose(g, J.T @ r, atol=2e-5 * np.abs(J.T @ r).max())
    # the block storage is exactly JᵀJ of the assembled block Jacobian
    Jb = pr.dense_jacobian(lin)
    np.testing.assert_allclose(H.to_dense(), Jb.T @ Jb, atol=1e-9 * scale)
    # pentadiagonal structure: blocks more than two steps apart vanish in the reference too
    nv = pr.nv
    for a in range(pr.T):
        for b in range(a + 3, pr.T):
            assert np.abs(Hd[a * nv:(a + 1) * nv, b * nv:(b + 1) * nv]).max() < 1e-6 * scale
    assert pr.cost(q) == pytest.approx(0.5 * r @ r)


def test_banded_storage_solves_like_dense(rng):
    T, n = 6, 3
    A = rng.normal(size=(T * n, T * n))
    band = np.abs(np.arange(T * n)[:, None] // n - np.arange(T * n)[None, :] // n) <= 2
    Hd = (A @ A.T) * band + T * n * np.eye(T * n)
    blocks = np.zeros((T, 3, n, n))
    for k in range(T):
        for d in range(3):
            if k + d < T:
                blocks[k, d] = Hd[k * n:(k + 1) * n, (k + d) * n:(k + d + 1) * n]
    H = BandedHessian(blocks)
    np.testing.assert_allclose(H.to_dense(), Hd)
    x = rng.normal(size=T * n)
    np.testing.assert_allclose(H.matvec(x), Hd @ x, atol=1e-10)
    sol = scipy.linalg.solveh_banded(H.to_banded(), x)
    np.testing.assert_allclose(sol, np.linalg.solve(Hd, x), atol=1e-10)
    D = rng.uniform(0.5, 1.5, T * n)
    np.testing.assert_allclose(H.scaled(D).to_dense(), D[:, None] * Hd * D[None, :], atol=1e-10)


# --------------------------------------------------------------------------- solver


def test_acrobot_reaches_target_monotonically():
    m = load_model("acrobot")
    T, h = 20, 0.05
    target = np.array([0.4, -0.3])
    pr = IDTOProblem(m, T, h, np.zeros(2), q_nom=target, Qq=0.1, Qv=0.01, R=0.01, Qf_q=100.0, Qf_v=10.0,
                     unactuated_penalty=100.0)
    solver = IDTOSolver(pr, IDTOSettings(max_iterations=60))
    res = solver.solve(np.zeros((T + 1, 2)))
    assert res.status is IDTOStatus.CONVERGED, res.status
    costs = [it.cost for it in res.log if it.accepted] + [res.cost]
    assert all(b <= a for a, b in zip(costs, costs[1:]))
    assert res.cost < 0.05 * res.log[0].cost
    np.testing.assert_allclose(res.q[-1], target, atol=0.05)
    assert np.abs(res.v[-1]).max() < 0.2
    # the shoulder (unactuated) force is small relative to the elbow's
    assert pr.unactuated_violation(res.tau) < 0.2 * np.abs(res.tau[:, 1]).max()
    # log carries the breakdown
    it = res.log[0]
    assert set(it.times) >= {"residual", "jacobian", "assemble", "factor", "trial"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        it.cost = 0.0                                   # frozen records in a tuple, frozen result
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.status = IDTOStatus.MAX_ITERATIONS
    assert isinstance(res.log, tuple) and res.iterations == len(res.log)
    # timings with the keys shared by the three solvers
    t = res.timing()
    assert set(t) == {"derivatives", "solve", "line_search", "total"}
    assert t["derivatives"] > 0 and t["solve"] > 0 and t["line_search"] > 0
    assert t["total"] >= t["derivatives"] + t["solve"] + t["line_search"] - 1e-9
    assert it.radius == pytest.approx(0.1)
    # warm start: one iteration from the solution keeps the radius and does not increase the cost
    r2 = solver.solve_from_warm_start(res.q)
    assert r2.iterations == 1 and r2.log[0].radius == res.trust_radius
    assert r2.cost <= res.cost + 1e-12


@pytest.mark.slow
def test_hopper_moves_forward_with_contact():
    m, pr = _hopper_problem(T=20)
    res = IDTOSolver(pr, IDTOSettings(max_iterations=60)).solve(np.tile(pr.q_init, (21, 1)))
    assert res.status is IDTOStatus.CONVERGED
    costs = [it.cost for it in res.log if it.accepted] + [res.cost]
    assert all(b <= a for a, b in zip(costs, costs[1:]))
    assert res.cost < 1e-4 * res.log[0].cost
    assert res.q[-1, 0] > 0.2  # moved forward toward x = 0.3
    assert np.abs(res.contact).max() > 10  # it used the ground


def test_nominal_update_changes_cost():
    m = load_model("acrobot")
    pr = IDTOProblem(m, 5, 0.05, np.zeros(2), Qq=1.0)
    q = np.zeros((6, 2))
    c0 = pr.cost(q)
    pr.set_nominal(np.array([0.5, 0.0]))
    assert pr.cost(q) > c0
    with pytest.raises(ShapeError):
        pr.set_nominal(np.zeros((3, 2)))


# --------------------------------------------------------------------------- bad input


def test_bad_inputs_raise_clear_errors():
    m = load_model("acrobot")
    pr = IDTOProblem(m, 5, 0.05, np.zeros(2), Qq=1.0)
    solver = IDTOSolver(pr)
    with pytest.raises(ShapeError, match="q_guess"):
        solver.solve(np.zeros((5, 2)))
    with pytest.raises(ShapeError):
        solver.solve(np.zeros((6, 3)))
    with pytest.raises(ParameterError, match="q_init"):
        solver.solve(np.full((6, 2), 0.1))
    q = np.zeros((6, 2))
    q[3, 1] = np.nan
    with pytest.raises(NonFiniteError):
        solver.solve(q)
    for kw in (dict(Qq=-1.0), dict(R=[1.0, -1.0]), dict(Qf_v=[1.0, 2.0, 3.0])):
        with pytest.raises((ParameterError, ShapeError)):
            IDTOProblem(m, 5, 0.05, np.zeros(2), **kw)
    for h in (0.0, -0.05, float("nan")):
        with pytest.raises((ParameterError, NonFiniteError)):
            IDTOProblem(m, 5, h, np.zeros(2))
    with pytest.raises(ParameterError):
        IDTOProblem(m, 0, 0.05, np.zeros(2))
    with pytest.raises(ParameterError):
        IDTOProblem(m, 5, 0.05, np.zeros(2), unactuated_penalty=-1)
    with pytest.raises(ShapeError):
        IDTOProblem(m, 5, 0.05, np.zeros(3))
    with pytest.raises(ParameterError, match="different MjModel"):
        IDTOProblem(m, 5, 0.05, np.zeros(2), contact=CompliantContactModel(load_model("acrobot")))
    with pytest.raises(ParameterError):
        IDTOSettings(initial_radius=0)
    with pytest.raises(ParameterError):
        IDTOSettings(scaling="cubic")


@pytest.mark.parametrize("mode", ["penalty", "constrained"])
def test_an_overflowing_guess_stops_with_non_finite_not_an_exception(mode):
    """A finite but absurd guess (as a diverged sampled rollout gives the MPC planner) overflows the
    inverse dynamics: the solve stops with ``NON_FINITE`` and an infinite cost, without raising
    (scipy's ``cho_factor`` once raised ``ValueError`` on the NaN multiplier system) or warning."""
    import warnings

    m = load_model("acrobot")
    T, h = 20, 0.05
    pr = IDTOProblem(m, T, h, np.zeros(2), q_nom=np.array([0.4, -0.3]), Qq=0.1, Qv=0.01, R=0.01)
    q = np.zeros((T + 1, 2))
    q[1:] = 1e150 * np.random.default_rng(0).standard_normal((T, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = IDTOSolver(pr, IDTOSettings(max_iterations=5, underactuation=mode)).solve(q)
    assert res.status is IDTOStatus.NON_FINITE and res.iterations == 0 and not np.isfinite(res.cost)
    # the same solver from a sane guess is unaffected
    ok = IDTOSolver(pr, IDTOSettings(max_iterations=5, underactuation=mode)).solve(np.zeros((T + 1, 2)))
    assert ok.status is not IDTOStatus.NON_FINITE and np.isfinite(ok.cost)


# --------------------------------------------------------------------------- equality-constrained underactuation


def test_constrained_underactuation_drives_violation_to_zero():
    m = load_model("acrobot")
    T, h = 20, 0.05
    target = np.array([0.4, -0.3])
    results = {}
    for mode in ("penalty", "constrained"):
        pr = IDTOProblem(m, T, h, np.zeros(2), q_nom=target, Qq=0.1, Qv=0.01, R=0.01, Qf_q=100.0, Qf_v=10.0,
                         unactuated_penalty=100.0)
        solver = IDTOSolver(pr, IDTOSettings(max_iterations=80, underactuation=mode))
        assert solver.constrained == (mode == "constrained")
        res = solver.solve(np.zeros((T + 1, 2)))
        assert res.status is IDTOStatus.CONVERGED, (mode, res.status)
        results[mode] = (pr, res)
    pr_p, res_p = results["penalty"]
    pr_c, res_c = results["constrained"]
    viol_c = pr_c.unactuated_violation(res_c.tau)
    viol_p = pr_p.unactuated_violation(res_p.tau)
    assert viol_c < 1e-6
    assert viol_p > 1e-4 and viol_p > 100 * viol_c
    # both reach the target; the constrained one only moves with the elbow torque
    np.testing.assert_allclose(res_c.q[-1], target, atol=0.05)
    np.testing.assert_allclose(res_c.tau[:, 0], 0, atol=1e-6)
    # the log records the constraint violation and multipliers per iteration
    viols = [it.violation for it in res_c.log]
    assert len(viols) == res_c.iterations and all(np.isfinite(viols))
    assert max(viols) > 1e-2  # infeasible along the way (the guess is not dynamically feasible)
    assert all(it.multiplier_norm > 0 for it in res_c.log[1:])
    assert all(it.multiplier_norm == 0 for it in res_p.log)
    # the constrained cost has no penalty rows: it equals the penalty problem's cost minus the penalty term
    assert res_c.cost == pytest.approx(pr_c.cost(res_c.q) - h * 100.0 * np.sum((res_c.tau @ pr_c.Z) ** 2), rel=1e-9)


@pytest.mark.parametrize("multipliers", ["schur", "banded"])
def test_constrained_step_satisfies_linearized_constraints(rng, multipliers):
    """The full Gauss–Newton step of the multiplier dogleg is the KKT solution (dense check, small
    problem), with the multipliers from the dense Schur complement or the banded KKT system."""
    m = load_model("acrobot")
    T = 5
    pr = IDTOProblem(m, T, 0.05, np.zeros(2), q_nom=np.array([0.3, 0.2]), Qq=1.0, Qv=0.1, R=0.1, Qf_q=10.0,
                     unactuated_penalty=10.0)
    solver = IDTOSolver(pr, IDTOSettings(underactuation="constrained", scaling="none",
                                         multipliers=multipliers))
    q = np.vstack([np.zeros(2), rng.normal(scale=0.1, size=(T, 2))])
    lin = solver._cost_rows(pr.linearize(q))
    assert lin.Jtau.shape[2] == pr.nv  # penalty rows dropped
    H, g = gauss_newton_system(pr, lin)
    cb, shift = solver._factor(H)
    assert shift == 0.0
    Ab = solver._constraint_jacobian(lin)
    hval = pr.unactuated_forces(lin.tau)
    lam, gl = solver._multipliers(cb, H, g, np.ones(T * 2), Ab, hval)
    p = -scipy.linalg.cho_solve_banded((cb, False), gl)
    # dense KKT reference
    Hd = H.to_dense()
    A = np.zeros((T, T * 2))
    for t in range(T):
        for slot in range(3):
            k = t - 2 + slot
            if k >= 0:
                A[t, 2 * k:2 * k + 2] = Ab[t, slot]
    K = np.block([[Hd, A.T], [A, np.zeros((T, T))]])
    sol = np.linalg.solve(K, np.concatenate([-g, -hval]))
    np.testing.assert_allclose(p, sol[:2 * T], rtol=1e-7, atol=1e-9 * np.abs(sol).max())
    np.testing.assert_allclose(lam, sol[2 * T:], rtol=1e-7, atol=1e-9 * np.abs(sol).max())
    np.testing.assert_allclose(A @ p, -hval, atol=1e-8 * max(1.0, np.abs(hval).max()))
    # the constraint Jacobian matches finite differences of Zᵀτ
    check_derivatives(lambda qq: pr.unactuated_forces(pr.trajectory(qq).tau), q, A, eps=1e-6,
                      rtol=1e-4, atol=1e-4 * np.abs(A).max(), retract=pr.retract, name="Z^T tau")
    with pytest.raises(ParameterError):
        IDTOSettings(underactuation="lagrange")


# --------------------------------------------------------------------------- inverse-dynamics backends


def _mujoco_rollout(T, h, rng):
    m = load_model("hopper")
    mm = copy.deepcopy(m)
    mm.opt.timestep = h
    mm.opt.integrator = int(mujoco.mjtIntegrator.mjINT_EULER)
    mm.opt.tolerance = 1e-14  # tight forward solve: the recovery error is then round-off
    mm.opt.iterations = 200
    d = mujoco.MjData(mm)
    d.qpos[:] = m.key_qpos[0]
    q, u = [d.qpos.copy()], []
    for _ in range(T):
        d.ctrl[:] = rng.uniform(-0.5, 0.5, m.nu)
        mujoco.mj_step(mm, d)
        u.append(d.qfrc_actuator.copy())  # evaluated at the pre-step state
        q.append(d.qpos.copy())
    return m, np.array(q), np.array(u)


def _convex_rollout(T, h, rng):
    from contactopt.contact import ConvexDynamics

    m = load_model("hopper")
    mh = copy.deepcopy(m)
    mh.opt.timestep = h
    cd = ConvexDynamics(mh)
    q, v, u = [m.key_qpos[0].copy()], np.zeros(m.nv), []
    for _ in range(T):
        ut = rng.normal(scale=5.0, size=m.nv)
        st = cd.forward(q[-1], v, qfrc_applied=ut)
        q.append(st.qpos)
        v = st.qvel
        u.append(ut)
    return m, np.array(q), np.array(u)


@pytest.mark.parametrize("backend", ["mujoco", "convex"])
def test_backend_recovers_applied_forces(backend, rng):
    T, h = 30, 0.01
    m, q, u = (_mujoco_rollout if backend == "mujoco" else _convex_rollout)(T, h, rng)
    pr = IDTOProblem(m, T, h, q[0], backend=backend)
    tr = pr.trajectory(q)
    assert np.abs(tr.contact).max() > 10  # the foot hit the ground during the rollout
    np.testing.assert_allclose(tr.tau, u, rtol=0, atol=1e-8 * np.abs(u).max())
    # the compliant backend (another contact model, implicit-in-state) does not reproduce them
    assert np.abs(IDTOProblem(m, T, h, q[0]).trajectory(q).tau - u).max() > 1e-3 * np.abs(u).max()


@pytest.mark.parametrize("backend", ["compliant", "mujoco", "convex"])
def test_solver_lowers_cost_with_each_backend(backend):
    m = load_model("hopper")
    T = 4
    q0 = m.key_qpos[0].copy()
    qn = q0.copy()
    qn[0] += 0.05
    kw = dict(q_nom=qn, Qq=[10, 10, 10, 0.1, 0.1], Qv=1.0, R=0.01, Qf_q=100.0, Qf_v=1.0)
    if backend == "compliant":
        kw["contact"] = CompliantContactModel(m, ContactParameters(stiffness=800, smoothing=0.01, friction=1.0))
    pr = IDTOProblem(m, T, 0.02, q0, backend=backend, **kw)
    assert pr.backend == backend
    res = IDTOSolver(pr, IDTOSettings(max_iterations=8)).solve(np.tile(q0, (T + 1, 1)))
    costs = [it.cost for it in res.log if it.accepted] + [res.cost]
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:]))
    assert res.cost < 0.5 * res.log[0].cost
    assert np.all(np.isfinite(res.tau))


def test_backend_validation():
    m = load_model("hopper")
    with pytest.raises(ParameterError, match="backend"):
        IDTOProblem(m, 3, 0.01, m.key_qpos[0], backend="rigid")
    with pytest.raises(ParameterError, match="contact=None"):
        IDTOProblem(m, 3, 0.01, m.key_qpos[0], backend="mujoco", contact=CompliantContactModel(m))
    with pytest.raises(ParameterError, match="convex_contact"):
        IDTOProblem(m, 3, 0.01, m.key_qpos[0], backend="convex", convex_contact="x")


def test_banded_kkt_multipliers_equal_the_schur_complement_and_solve_alike(monkeypatch):
    """The banded KKT multipliers (``multipliers="banded"``) equal the dense Schur complement's
    on a scaled hopper problem with contact (3 unactuated directions, 30 knots), a singular KKT
    system falls back to the Schur complement, and a constrained solve with either converges to
    the same plan."""
    m, pr = _hopper_problem(T=30)
    q = np.tile(pr.q_init, (31, 1))
    q[1:, 0] += np.linspace(0.0, 0.2, 30)  # an infeasible guess: the constraints are violated
    solvers = {k: IDTOSolver(pr, IDTOSettings(max_iterations=100, underactuation="constrained",
                                              multipliers=k))
               for k in ("schur", "banded")}
    s = solvers["schur"]
    lin = s._cost_rows(pr.linearize(q))
    H, g = gauss_newton_system(pr, lin)
    D = s._scaling(H.diagonal())
    Hs, gs = H.scaled(D), D * g
    cb, shift = s._factor(Hs)
    Ab, hval = s._constraint_jacobian(lin), pr.unactuated_forces(lin.tau)
    assert np.abs(hval).max() > 1.0
    lam_s, gl_s = s._multipliers(cb, Hs, gs, D, Ab, hval, shift)
    lam_b, gl_b = solvers["banded"]._multipliers(cb, Hs, gs, D, Ab, hval, shift)
    np.testing.assert_allclose(lam_b, lam_s, rtol=1e-6, atol=1e-8 * np.abs(lam_s).max())
    np.testing.assert_allclose(gl_b, gl_s, rtol=1e-6, atol=1e-8 * np.abs(gl_s).max())
    # a singular KKT system (LAPACK's zero pivot) falls back to the Schur complement
    import contactopt.solvers.idto.solver as solver_module

    def singular(*args):
        raise np.linalg.LinAlgError("banded LU of a singular matrix: zero pivot 1")

    monkeypatch.setattr(solver_module, "banded_lu_solve", singular)
    lam_f, gl_f = solvers["banded"]._multipliers(cb, Hs, gs, D, Ab, hval, shift)
    monkeypatch.undo()
    np.testing.assert_array_equal(lam_f, lam_s)
    np.testing.assert_array_equal(gl_f, gl_s)
    res = {k: sv.solve(np.tile(pr.q_init, (31, 1))) for k, sv in solvers.items()}
    for k, r in res.items():
        assert r.status is IDTOStatus.CONVERGED, (k, r.status)
        assert pr.unactuated_violation(r.tau) < 1e-6
    assert res["banded"].cost == pytest.approx(res["schur"].cost, rel=1e-6)
    np.testing.assert_allclose(res["banded"].q, res["schur"].q, atol=1e-5)


def test_banded_kkt_multipliers_use_the_shifted_hessian_of_the_step():
    """Where ``H̃`` is singular (the style ball-plate: no cost on the free ball's spin) the step
    solves with ``H̃ + s·I``; the banded multipliers use the same shift, so both methods solve
    the plan alike (without it the banded steps left the linearized constraints and the trust
    region collapsed)."""
    from pathlib import Path

    from contactopt.planners import make
    from contactopt.task import load_task_file

    task = load_task_file(Path(__file__).parents[1] / "examples/style/ball_plate/task.py")
    planner = make("idto", task)
    pr = planner.problem
    data = mujoco.MjData(pr.model)
    task.initial_state(pr.model, data, np.random.default_rng(0))
    q = np.tile(data.qpos, (pr.T + 1, 1))
    pr.q_init = data.qpos.copy()
    base = planner.solver.options  # constrained, l1 steps, Δ₀ from the first step
    solver = IDTOSolver(pr, base)
    H, _ = gauss_newton_system(pr, solver._cost_rows(pr.linearize(q)))
    D = solver._scaling(H.diagonal())
    assert solver._factor(H.scaled(D))[1] > 0  # the shifted case
    res = {k: IDTOSolver(pr, dataclasses.replace(base, multipliers=k)).solve(q, max_iterations=30)
           for k in ("schur", "banded")}
    for k, r in res.items():
        assert r.status is IDTOStatus.MAX_ITERATIONS, (k, r.status)
        assert pr.unactuated_violation(r.tau) < 1e-5
    assert res["banded"].cost == pytest.approx(res["schur"].cost, rel=1e-5)


def test_constrained_hopper_with_contact():
    m, pr = _hopper_problem(T=20)
    res = IDTOSolver(pr, IDTOSettings(max_iterations=100, underactuation="constrained")).solve(
        np.tile(pr.q_init, (21, 1)))
    assert res.status is IDTOStatus.CONVERGED, res.status
    assert pr.unactuated_violation(res.tau) < 1e-6  # 3 unactuated directions (the floating base)
    assert res.q[-1, 0] > 0.2
    assert np.abs(res.contact).max() > 10


@pytest.mark.parametrize("backend", ["mujoco", "convex"])
def test_backend_jacobian_threads_match_serial(backend, rng):
    m, q, _ = (_mujoco_rollout if backend == "mujoco" else _convex_rollout)(6, 0.01, rng)
    lin1 = IDTOProblem(m, 6, 0.01, q[0], backend=backend, Qq=1.0, R=0.1).linearize(q)
    lin2 = IDTOProblem(m, 6, 0.01, q[0], backend=backend, Qq=1.0, R=0.1, workers=2).linearize(q)
    np.testing.assert_allclose(lin2.Jtau, lin1.Jtau, rtol=1e-12, atol=1e-12 * np.abs(lin1.Jtau).max())
    np.testing.assert_allclose(lin2.r, lin1.r)


@pytest.mark.parametrize("backend", ["mujoco", "convex"])
def test_backend_jacobian_matches_dense_reference(backend, rng):
    m = load_model("acrobot")
    T = 4
    pr = IDTOProblem(m, T, 0.05, np.zeros(2), v_init=[0.3, -0.2], Qq=1.0, Qv=0.1, R=0.1, Qf_q=10.0,
                     backend=backend)
    q = np.vstack([np.zeros(2), rng.normal(scale=0.2, size=(T, 2))])
    lin = pr.linearize(q)
    J = dense_fd_jacobian(pr, q)
    Jb = pr.dense_jacobian(lin)
    np.testing.assert_allclose(Jb, J, atol=1e-5 * np.abs(J).max())


# --------------------------------------------------------------------------- speed paths (issue 5)


def _contact_states(m, q0, rng, K, scale, vscale):
    qs = np.tile(q0, (K, 1))
    for i in range(K):
        mujoco.mj_integratePos(m, qs[i], rng.normal(scale=scale, size=m.nv), 1.0)
    return qs, rng.normal(scale=vscale, size=(K, m.nv))


@pytest.mark.parametrize("name", ["hopper", "ball", "spinner"])
def test_contact_batch_matches_contact_model(name, rng):
    from contactopt.contact.compliant_batch import CompliantContactBatch

    m = load_model(name)
    if name == "hopper":
        q0 = m.key_qpos[0].copy()
        q0[1] -= 0.005
        cms = [CompliantContactModel(m, ContactParameters(stiffness=800, smoothing=0.01)),  # μ from MuJoCo
               CompliantContactModel(m, ContactParameters(stiffness=800, smoothing=0.01, friction=0.3), bodies=["torso"])]
    elif name == "ball":
        q0 = np.array([0, 0, 0.097, 1, 0, 0, 0.0])
        cms = [CompliantContactModel(m, ContactParameters(stiffness=1000, smoothing=0.003, friction=0.5))]
    else:
        q0 = np.array([0.3, 1.58, 0.0])  # fingertip touching the spinner
        cms = [CompliantContactModel(m, ContactParameters(stiffness=200, smoothing=0.01, friction=0.5))]
    qs, vs = _contact_states(m, q0, rng, 12, 0.01, 0.2)
    qs[-1, :3] += 5.0  # far from everything (no pair in range) for the free ball / hopper / spinner
    d = mujoco.MjData(m)
    counts = []
    for cm in cms:
        bf = CompliantContactBatch(cm).forces(qs, vs, dv=True, dq=True)
        counts.append(int(bf.count[:-1].sum()))
        assert bf.F.shape == (12, m.nv) and bf.dFdq.shape == (12, m.nv, m.nv)
        for k in range(12):
            d.qpos[:] = qs[k]
            ref = cm.forces(d, vs[k], derivative=True)
            assert bf.count[k] == ref.gamma.shape[0]
            assert bf.dofs[k].any() == (bf.count[k] > 0)  # dofs that move a body in contact
            np.testing.assert_allclose(bf.F[k], ref.generalized, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(bf.dFdv[k], ref.dforce_dv, rtol=1e-12, atol=1e-10)
        assert bf.count[-1] == 0
    assert counts[0] > 0  # contacts were exercised


def _central_dq(m, cb, q, v, eps=1e-6):
    """Central differences of CompliantContactBatch forces w.r.t. tangent perturbations, (K, nv, nv)."""
    def retract(qq, dq):  # the same tangent perturbation of every configuration
        for k in range(qq.shape[0]):
            mujoco.mj_integratePos(m, qq[k], dq, 1.0)
        return qq

    return finite_difference_jacobian(lambda qq: cb.forces(qq, v).F, q, eps=eps, retract=retract, dim=m.nv)


def test_analytic_contact_position_derivative(rng):
    """Closed-form ∂F/∂q: exact for spheres, capsules and planes (here a free ball sliding and
    spinning on the ground, a hopper foot, the spinner's capsule finger on its sphere)."""
    from contactopt.contact.compliant_batch import CompliantContactBatch

    m = load_model("ball")
    cb = CompliantContactBatch(CompliantContactModel(m, ContactParameters(stiffness=1000, smoothing=0.003, friction=0.5)))
    q = np.array([[0, 0, 0.097, 1, 0, 0, 0.0], [0.1, -0.2, 0.101, 0.9, 0.1, -0.3, 0.2]])
    q[1, 3:] /= np.linalg.norm(q[1, 3:])
    for v in (np.zeros((2, 6)), np.array([[0.3, -0.1, -0.05, 1.0, 2.0, -0.5]] * 2)):
        bf = cb.forces(q, v, dq=True)
        fd = _central_dq(m, cb, q, v)
        assert bf.exact.all() and np.abs(fd[:, 2, 2]).min() > 100  # the stiff term is there
        np.testing.assert_allclose(bf.dFdq, fd, rtol=0, atol=1e-6 * np.abs(fd).max())
    for name, q0, k in (("hopper", None, 800.0), ("spinner", np.array([0.42, 1.3, 0.0]), 200.0)):
        m = load_model(name)
        q0 = m.key_qpos[0] - [0, 0.01, 0, 0, 0] if q0 is None else q0
        cb = CompliantContactBatch(CompliantContactModel(m, ContactParameters(stiffness=k, smoothing=0.01, friction=0.7)))
        qs, vs = _contact_states(m, q0, rng, 6, 0.01, 0.5)
        bf = cb.forces(qs, vs, dq=True)
        fd = _central_dq(m, cb, qs, vs)
        assert bf.exact.all() and np.abs(bf.F).max() > 1
        for j in range(6):
            np.testing.assert_allclose(bf.dFdq[j], fd[j], rtol=0, atol=1e-6 * max(np.abs(fd[j]).max(), 1e-9))


_CYLINDER_XML = """
<mujoco>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    <body pos="0 0 .2">
      <freejoint/>
      <geom name="box" type="box" size=".1 .2 .05" pos="0 0 -.1" mass="2"/>
      <geom name="can" type="cylinder" size=".05 .1" pos=".3 0 0" euler="0 90 0" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_analytic_contact_derivative_on_other_geometry():
    """Box corners on the ground are exact; a cylinder lying on the ground keeps only the
    signed-distance term (flagged not exact), and the default "auto" mode then falls back to
    finite differences and matches "fd"."""
    from contactopt.contact.compliant_batch import CompliantContactBatch

    m = mujoco.MjModel.from_xml_string(_CYLINDER_XML)
    cm = CompliantContactModel(m, ContactParameters(stiffness=1000, smoothing=0.003, friction=0.5))
    cb = CompliantContactBatch(cm)
    v = np.array([[0.2, 0.1, 0.0, 0.5, -0.3, 0.2]])
    box_only = np.array([[0, 0, 0.148, 1, 0, 0, 0.0]])  # box 2 mm into the floor, cylinder above
    both = np.array([[0, 0, 0.048, 0.99, 0.0, 0.1, 0.0]])
    both[0, 3:] /= np.linalg.norm(both[0, 3:])
    bf = cb.forces(box_only, v, dq=True)
    fd = _central_dq(m, cb, box_only, v)
    assert bf.exact[0] and np.abs(bf.F).max() > 1
    np.testing.assert_allclose(bf.dFdq, fd, rtol=0, atol=1e-6 * np.abs(fd).max())
    bf = cb.forces(both, v, dq=True)
    assert not bf.exact[0]
    fd = _central_dq(m, cb, both, v)
    err = np.abs(bf.dFdq - fd).max() / np.abs(fd).max()
    assert 1e-6 < err < 0.5, err  # approximate, but the dominant stiff term is there
    T = 3
    q = np.tile(both[0], (T + 1, 1))
    q[1:, 0] += 0.01 * np.arange(1, T + 1)
    kw = dict(Qq=1.0, R=0.1, contact=cm)
    lin_auto = IDTOProblem(m, T, 0.05, both[0], **kw).linearize(q)
    lin_fd = IDTOProblem(m, T, 0.05, both[0], contact_derivatives="fd", **kw).linearize(q)
    np.testing.assert_allclose(lin_auto.dtau, lin_fd.dtau, rtol=0, atol=1e-9 * np.abs(lin_fd.dtau).max())


def test_analytic_difference_jacobians_on_every_joint_type(mixed_model, rng):
    m = mixed_model
    pr = IDTOProblem(m, 3, 0.05, m.qpos0)
    assert pr._quat_joints and not pr._euclidean
    for _ in range(3):
        q0, q1 = m.qpos0.copy(), m.qpos0.copy()
        mujoco.mj_integratePos(m, q0, rng.normal(size=m.nv), 1.0)
        mujoco.mj_integratePos(m, q1, rng.normal(size=m.nv), 1.0)
        A0, A1 = pr._diff_jac(q0, q1, 0.05, True, True)
        F0, F1 = pr._diff_jac_fd(q0, q1, 0.05, True, True)
        np.testing.assert_allclose(A0, F0, atol=2e-6 * np.abs(F0).max())
        np.testing.assert_allclose(A1, F1, atol=2e-6 * np.abs(F1).max())


@pytest.mark.parametrize("mode", ["auto", "fd", "analytic"])
def test_batched_compliant_jacobian_matches_per_step_reference(mode, rng):
    """The vectorized linearization (mjd_inverseFD, batched contact) against the per-step chain rule."""
    m, pr = _hopper_problem(T=5, contact_derivatives=mode)
    q = np.tile(pr.q_init, (6, 1))
    q[1:, 1] -= np.linspace(0.001, 0.012, 5)
    q[1:, 0] += np.linspace(0.0, 0.03, 5)
    q[1:, 3:] += rng.normal(scale=0.05, size=(5, 2))
    lin = pr.linearize(q)
    tr = pr.trajectory(q)
    np.testing.assert_allclose(lin.tau, tr.tau, rtol=1e-12, atol=1e-9)
    # the batched evaluation (mj_inverse + CompliantContactBatch) equals the per-step reference path
    for t in range(pr.T):
        tau_t, fc_t = pr.inverse_dynamics(q[t + 1], tr.v[t + 1], tr.a[t])
        np.testing.assert_allclose(tr.tau[t], tau_t, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(tr.contact[t], fc_t, rtol=1e-10, atol=1e-9)
    assert np.abs(tr.contact).max() > 1  # the foot is in contact
    _, _, dprev, dcur, dback = pr._kinematic_jacobians(q)
    ref = np.array([pr._tau_jac_compliant(t, q, tr.v, dprev, dcur, dback) for t in range(pr.T)])
    scale = np.abs(ref).max()
    # sphere / capsule / plane contacts: the closed form is exact, all modes agree with the reference
    np.testing.assert_allclose(lin.dtau, ref, atol=1e-5 * scale)
    # time steps in parallel threads give the same Jacobian
    _, pr2 = _hopper_problem(T=5, contact_derivatives=mode, workers=2)
    lin2 = pr2.linearize(q)
    np.testing.assert_allclose(lin2.dtau, lin.dtau, rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(lin2.r, lin.r, rtol=1e-12, atol=1e-12)


def test_contact_derivatives_option_validation_and_solver():
    m, pr = _hopper_problem(T=8, contact_derivatives="analytic")
    assert pr.contact_derivatives == "analytic"
    with pytest.raises(ParameterError, match="contact_derivatives"):
        _hopper_problem(T=3, contact_derivatives="exact")
    assert _hopper_problem(T=3)[1].contact_derivatives == "auto"
    res = IDTOSolver(pr, IDTOSettings(max_iterations=15)).solve(np.tile(pr.q_init, (9, 1)))
    costs = [it.cost for it in res.log if it.accepted] + [res.cost]
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:]))
    assert res.cost < 0.5 * res.log[0].cost
    # the BLAS thread limiter changes nothing in the result
    res2 = IDTOSolver(pr, IDTOSettings(max_iterations=15, single_thread_blas=False)).solve(np.tile(pr.q_init, (9, 1)))
    np.testing.assert_allclose(res2.q, res.q, rtol=1e-9, atol=1e-12)


def test_contact_batch_bad_input():
    from contactopt.contact.compliant_batch import CompliantContactBatch

    m = load_model("hopper")
    with pytest.raises(ParameterError, match="CompliantContactModel"):
        CompliantContactBatch(m)
    cb = CompliantContactBatch(CompliantContactModel(m))
    with pytest.raises(ShapeError):
        cb.forces(np.zeros((3, m.nq + 1)), np.zeros((3, m.nv)))
    with pytest.raises(ShapeError):
        cb.forces(np.zeros((3, m.nq)), np.zeros((2, m.nv)))
    with pytest.raises(NonFiniteError):
        cb.forces(np.full((1, m.nq), np.nan), np.zeros((1, m.nv)))
    out = cb.forces(np.zeros((0, m.nq)), np.zeros((0, m.nv)))
    assert out.F.shape == (0, m.nv)


_EDGES_XML = """
<mujoco>
  <worldbody>
    <body pos="0 0 0"><joint type="hinge" axis="0 1 0"/>
      <geom type="cylinder" size=".1 .3" euler="90 0 0"/></body>
    <body pos="1 0 0"><joint type="hinge" axis="0 0 1"/><geom type="box" size=".1 .1 .1"/></body>
    <body pos="0 0 .145"><freejoint/><geom type="sphere" size=".05"/></body>
    <body pos="1.1 0.1 .2"><freejoint/><geom type="sphere" size=".05"/></body>
  </worldbody>
</mujoco>
"""


def test_analytic_contact_derivative_cylinder_side_and_box_edge(rng):
    """Spheres against a rotating cylinder's side (a line core) and a rotating box's edge."""
    from contactopt.contact.compliant_batch import CompliantContactBatch

    m = mujoco.MjModel.from_xml_string(_EDGES_XML)
    cb = CompliantContactBatch(CompliantContactModel(m, ContactParameters(stiffness=1000, smoothing=0.003, friction=0.5)))
    q0 = m.qpos0.copy()
    q0[4] = 0.145  # sphere 1 on top of the cylinder (radius 0.1): 5 mm penetration
    q0[9:12] = [1.1 + 0.03, 0.0, 0.1 + 0.03]  # sphere 2 at the box's edge x = z = 0.1, along y
    qs, vs = _contact_states(m, q0, rng, 4, 0.003, 0.5)
    bf = cb.forces(qs, vs, dq=True)
    assert bf.exact.all() and bf.count.min() >= 2 and np.abs(bf.F).max() > 1
    fd = _central_dq(m, cb, qs, vs)
    for j in range(4):
        np.testing.assert_allclose(bf.dFdq[j], fd[j], rtol=0, atol=1e-6 * np.abs(fd[j]).max())


# --------------------------------------------------------------------------- compiled collection loop


def _collect_models():
    m_sp = load_model("spinner")
    m_qd = load_model("quadruped")
    m_hd = load_model("hand")
    q_sp = np.array([0.3, 1.58, 0.0])
    return [("spinner", m_sp, q_sp, 0.01, [0, 1, 2]),
            ("quadruped", m_qd, m_qd.key_qpos[0].copy(), 0.03, [0, 1, 2]),
            ("hand", m_hd, m_hd.key_qpos[0].copy(), 0.02, None)]


@pytest.mark.parametrize("case", [0, 1, 2], ids=["spinner", "quadruped", "hand"])
@pytest.mark.parametrize("extra", [False, True])
def test_native_collect_matches_python_loop(case, extra, rng, monkeypatch):
    """The compiled collection loop gives bit for bit the Python loop's contacts (with and without
    the geom frames of ``extra``), including configurations without contacts and a capacity
    overflow (the buffers grow mid-batch)."""
    from contactopt.contact import compliant_batch as B

    if B._LAYOUT is None:
        pytest.skip("no native MuJoCo binding on this installation")
    _, m, q0, scale, far = _collect_models()[case]
    cm = CompliantContactModel(m, ContactParameters(stiffness=500, smoothing=0.02, friction=None))
    cb = B.CompliantContactBatch(cm)
    qs, vs = _contact_states(m, q0, rng, 14, scale, 0.2)
    calls = []
    kernel = B._collect_kernel

    def counting_kernel(*args):
        calls.append(args[8])  # the first configuration of the call
        return kernel(*args)

    monkeypatch.setattr(B, "_collect_kernel", counting_kernel)
    if far is not None:  # lift / shift away from everything: no pair in range
        qs[3, far] += 5.0
        qs[-1, far] += 5.0
    w = cm.params.max_distance

    def run(native, hint):
        monkeypatch.setattr(B, "NATIVE_COLLECT", native)
        cb._scratch().per_config = hint
        return cb._collect(qs, w, extra=extra), cb._scratch().per_config, cb.forces(qs, vs, dv=True, dq=True)

    # MuJoCo's raw contact counts on the synced private copy (margins raised to w)
    s = cb._scratch()
    assert cb._sync(s, w)
    d = mujoco.MjData(s.model)
    ncon = []
    for q in qs:
        d.qpos[:] = q
        mujoco.mj_kinematics(s.model, d)
        mujoco.mj_collision(s.model, d)
        ncon.append(d.ncon)
    ncon = np.array(ncon)
    assert ncon.sum() > 16  # more than the smallest initial capacity: the buffers grow
    if far is not None:
        assert ncon[3] == 0 and ncon[-1] == 0
    for hint in (4.0, 1e-6):  # default capacity hint, and the smallest capacity (16)
        (ref, ref_hint, ref_f) = run(False, hint)
        assert not calls
        (nat, nat_hint, nat_f) = run(True, hint)
        assert calls[0] == 0
        if hint < 1:
            assert max(calls) > 0  # resumed mid-batch after growing the buffers
        calls.clear()
        assert ref_hint == nat_hint
        assert ref is not None and nat is not None
        for a, b in zip(ref[:6], nat[:6]):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
        if extra:
            for a, b in zip(ref[6], nat[6]):
                assert (a is None) == (b is None)
                if a is not None:
                    assert a.shape == b.shape and np.array_equal(a, b)
        else:
            assert ref[6] is None and nat[6] is None
        for attr in ("F", "dFdv", "dFdq", "count", "dofs", "exact"):
            assert np.array_equal(getattr(ref_f, attr), getattr(nat_f, attr)), attr
    # no contact at all: both give None
    qz = qs[[3, 3]] if far is not None else None
    if qz is not None:
        monkeypatch.setattr(B, "NATIVE_COLLECT", True)
        assert cb._collect(qz, w, extra=extra) is None


# --------------------------------------------------------------------------- compiled force evaluation


def test_scalar_contact_laws_match_array_laws():
    from contactopt.contact.compliant import (
        hunt_crossley_factor_scalar,
        softplus_normal_force_scalar,
    )

    phi = np.concatenate([np.linspace(-0.5, 0.5, 41), [-1.0, -0.37, 0.0, 0.37, 1e-9, -1e-9]])
    f, df = softplus_normal_force(phi, 700.0, 0.01)
    for i, x in enumerate(phi):
        fs, dfs = softplus_normal_force_scalar(x, 700.0, 0.01)
        assert math.isclose(fs, f[i], rel_tol=1e-14, abs_tol=1e-300)
        assert math.isclose(dfs, df[i], rel_tol=1e-14, abs_tol=1e-300)
    vn = np.concatenate([np.linspace(-1, 1, 41), [0.0, 0.2, 0.2 + 1e-12]])
    d, dd = hunt_crossley_factor(vn, 0.1)
    for i, x in enumerate(vn):
        ds, dds = hunt_crossley_factor_scalar(x, 0.1)
        assert math.isclose(ds, d[i], rel_tol=1e-14, abs_tol=1e-15)
        assert math.isclose(dds, dd[i], rel_tol=1e-14, abs_tol=1e-15)


def _native_forces_cases():
    hop = load_model("hopper")
    q_hop = hop.key_qpos[0].copy()
    q_hop[1] -= 0.005
    edges = mujoco.MjModel.from_xml_string(_EDGES_XML)
    q_edges = edges.qpos0.copy()
    q_edges[4] = 0.145
    q_edges[9:12] = [1.13, 0.0, 0.13]
    cyl = mujoco.MjModel.from_xml_string(_CYLINDER_XML)
    q_cyl = np.array([0, 0, 0.048, 0.99, 0.0, 0.1, 0.0])
    q_cyl[3:] /= np.linalg.norm(q_cyl[3:])
    cases = {name: (m, q0, scale, far) for name, m, q0, scale, far in _collect_models()}
    cases.update(hopper=(hop, q_hop, 0.01, [1]), edges=(edges, q_edges, 0.003, [4, 11]),
                 cylinder=(cyl, q_cyl, 0.01, [2]))  # far: coordinates that lift everything off
    return cases


@pytest.mark.parametrize("name, friction, bodies", [
    ("spinner", 0.5, None), ("quadruped", None, None), ("quadruped", 0.7, ["FL_calf", "HR_calf"]),
    ("hand", None, None), ("hopper", None, None), ("hopper", 0.3, ["shank"]), ("edges", 0.5, None),
    ("cylinder", 0.5, None)])
def test_native_forces_match_numpy_reference(name, friction, bodies, rng, monkeypatch):
    """The compiled force pass (NATIVE_FORCES) equals the NumPy reference to rounding: forces, ∂F/∂v,
    the closed-form ∂F/∂q (with its geometry classification and the exact flags), counts and dofs,
    for every combination of requested derivatives, with configurations out of contact."""
    from contactopt.contact import compliant_batch as B

    m, q0, scale, far = _native_forces_cases()[name]
    cm = CompliantContactModel(m, ContactParameters(stiffness=600, smoothing=0.01, friction=friction), bodies=bodies)
    cb = B.CompliantContactBatch(cm)
    qs, vs = _contact_states(m, q0, rng, 16, scale, 0.5)
    if far is not None:
        qs[5, far] += 5.0  # out of range of everything
    results = {}
    for native in (False, True):
        monkeypatch.setattr(B, "NATIVE_FORCES", native)
        results[native] = [cb.forces(qs, vs, dv=dv, dq=dq) for dv, dq in ((False, False), (True, False),
                                                                          (False, True), (True, True))]
    exercised = False
    for ref, nat in zip(results[False], results[True]):
        for attr in ("count", "dofs", "exact"):
            assert np.array_equal(getattr(ref, attr), getattr(nat, attr)), attr
        for attr in ("F", "dFdv", "dFdq"):
            a, b = getattr(ref, attr), getattr(nat, attr)
            assert (a is None) == (b is None), attr
            if a is not None:
                assert a.shape == b.shape
                np.testing.assert_allclose(b, a, rtol=0, atol=1e-12 * max(np.abs(a).max(), 1e-300), err_msg=attr)
        assert far is None or ref.count[5] == 0
        exercised |= bool(ref.count.sum() > 0 and np.abs(ref.F).max() > 1e-3)
    assert exercised
    if name == "cylinder":  # a cylinder lying on the floor is unsupported: the flag is exercised too
        assert not results[False][3].exact.all()


def test_native_forces_without_contacts(monkeypatch):
    from contactopt.contact import compliant_batch as B

    m = load_model("hopper")
    cb = B.CompliantContactBatch(CompliantContactModel(m, ContactParameters(), bodies=["torso"]))
    q = np.tile(m.key_qpos[0], (3, 1))
    q[:, 1] += 3.0
    for native in (False, True):
        monkeypatch.setattr(B, "NATIVE_FORCES", native)
        bf = cb.forces(q, np.zeros((3, m.nv)), dv=True, dq=True)
        assert not bf.F.any() and not bf.dFdv.any() and not bf.dFdq.any() and not bf.count.any()
        assert bf.exact.all() and not bf.dofs.any()
