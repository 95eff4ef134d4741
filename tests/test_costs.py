"""Costs: every norm and residual against finite differences (tangent space), stage and
trajectory assembly, the time-step convention, and bad input."""

import mujoco
import numpy as np
import pytest

from contactopt import ParameterError, ShapeError, NonFiniteError, load_model, state_integrate
from contactopt.testing import check_derivatives, finite_difference_jacobian
from contactopt.costs import (
    L2,
    OneSidedQuadratic,
    BodyPosition,
    CenterOfMass,
    CenterOfMassVelocity,
    Combination,
    Control,
    Cosh,
    CostTerm,
    LinearQuadraticCost,
    MechanicalEnergy,
    Qpos,
    Quadratic,
    Qvel,
    SitePosition,
    SmoothAbs,
    StageCost,
    TrajectoryCost,
    UserResidual,
)

from conftest import random_configuration

NORMS = [Quadratic(), SmoothAbs(0.3), Cosh(0.7), L2(0.2)]


# --------------------------------------------------------------------------- helpers


def random_state(model, rng, vel_scale=1.0):
    q = random_configuration(model, rng)
    v = rng.normal(scale=vel_scale, size=model.nv)
    a = rng.normal(size=model.na)
    return np.concatenate([q, v, a])


def state_retract(model):
    """Tangent-space perturbation of a state ``x ⊕ dx`` (``dx`` of size ``2 nv + na``)."""
    return lambda x, dx: state_integrate(model, x, dx)


def fd_state_jacobian(fn, model, x, eps=1e-6):
    """Central differences of ``fn(x)`` in the tangent space: ``(fn(x ⊕ εe_j) − fn(x ⊕ −εe_j)) / 2ε``."""
    return finite_difference_jacobian(fn, x, eps=eps, retract=state_retract(model), dim=2 * model.nv + model.na)


def fd_control_jacobian(fn, u, eps=1e-6):
    return finite_difference_jacobian(fn, u, eps=eps)


def residual_with_jacobians(res, x, u):
    """Evaluate a residual the way the stage cost does (kinematics + comPos on a fresh MjData)."""
    model = res.model
    data = mujoco.MjData(model)
    nq, nv = model.nq, model.nv
    data.qpos[:] = x[:nq]
    data.qvel[:] = x[nq:nq + nv]
    data.act[:] = x[nq + nv:]
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    r, jx, ju = res.evaluate(data, x, u, True)
    ndx = 2 * nv + model.na
    jx = np.zeros((res.size, ndx)) if jx is None else jx
    ju = np.zeros((res.size, model.nu)) if ju is None else ju
    return r, jx, ju


# --------------------------------------------------------------------------- norms


@pytest.mark.parametrize("norm", NORMS, ids=lambda n: type(n).__name__)
def test_norm_gradient_and_hessian_match_finite_differences(norm, rng):
    R = rng.normal(scale=1.5, size=(7, 4))
    g = norm.gradient(R)
    H = norm.hessian(R)
    for n in range(R.shape[0]):
        assert finite_difference_jacobian(norm.value, R[n]) == pytest.approx(g[n], rel=1e-6, abs=1e-8)
        check_derivatives(norm.gradient, R[n], H[n], rtol=1e-5, atol=1e-7, name=f"{type(norm).__name__} Hessian")
    # batched evaluation equals one-by-one evaluation, diagonal accessor agrees
    np.testing.assert_allclose(norm.value(R), [norm.value(r) for r in R])
    np.testing.assert_allclose(norm.hessian_diagonal(R), np.diagonal(H, axis1=1, axis2=2))
    # a norm: zero at zero, positive elsewhere, convex (PSD Hessian)
    assert norm.value(np.zeros(4)) == pytest.approx(0.0, abs=1e-15)
    assert np.all(norm.value(R) > 0)
    assert np.all(np.linalg.eigvalsh(H) > -1e-12)


def test_norm_closed_forms():
    r = np.array([3.0, -4.0])
    assert Quadratic().value(r) == pytest.approx(12.5)
    assert SmoothAbs(1e-9).value(r) == pytest.approx(7.0)            # → Σ|r|
    assert L2(1e-9).value(r) == pytest.approx(5.0)                   # → ‖r‖
    assert L2(1.0).value(r) == pytest.approx(np.sqrt(26.0) - 1.0)
    assert Cosh(2.0).value(np.array([1.0])) == pytest.approx(4.0 * (np.cosh(0.5) - 1.0))
    # curvature at the origin: cosh → 1 (like ½r²), smooth-abs → 1/α, L2 → 1/p
    np.testing.assert_allclose(Cosh(0.3).hessian(np.zeros(2)), np.eye(2))
    np.testing.assert_allclose(SmoothAbs(0.5).hessian(np.zeros(2)), 2.0 * np.eye(2))
    np.testing.assert_allclose(L2(0.25).hessian(np.zeros(3)), 4.0 * np.eye(3))
    # smooth-abs is linear (slope 1) far from the origin: unit-preserving
    assert SmoothAbs(0.01).gradient(np.array([10.0]))[0] == pytest.approx(1.0, abs=1e-5)
    # cosh overflows to inf rather than NaN
    with np.errstate(all="raise"):
        assert np.isinf(Cosh(0.01).value(np.array([100.0])))


@pytest.mark.parametrize("upper", [False, True])
def test_one_sided_quadratic_is_a_soft_bound(upper, rng):
    """Zero on the allowed side, ½ r² beyond; gradient and Hessian against finite differences."""
    norm = OneSidedQuadratic(upper=upper)
    R = rng.normal(scale=1.5, size=(7, 4))
    R[np.abs(R) < 1e-3] = 0.5  # keep the finite differences off the kink at 0
    bad = R > 0 if upper else R < 0
    np.testing.assert_allclose(norm.value(R), 0.5 * np.sum(np.where(bad, R, 0.0) ** 2, axis=-1))
    np.testing.assert_array_equal(norm.hessian_diagonal(R), bad.astype(float))
    for n in range(R.shape[0]):
        assert finite_difference_jacobian(norm.value, R[n]) == pytest.approx(norm.gradient(R[n]), rel=1e-6, abs=1e-9)
        check_derivatives(norm.gradient, R[n], norm.hessian(R[n]), rtol=1e-7, atol=1e-7, name="Hessian")
    allowed = -np.abs(R) if upper else np.abs(R)
    assert np.all(norm.value(allowed) == 0.0) and np.all(norm.gradient(allowed) == 0.0)
    with pytest.raises(ParameterError, match="upper"):
        OneSidedQuadratic(upper="yes")


@pytest.mark.parametrize("cls", [SmoothAbs, Cosh, L2])
@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_norm_rejects_nonpositive_parameter(cls, bad):
    with pytest.raises(ParameterError, match="alpha|p "):
        cls(bad)


def test_norm_rejects_nan_parameter():
    with pytest.raises(NonFiniteError, match="alpha"):
        SmoothAbs(float("nan"))


# --------------------------------------------------------------------------- residuals


def mixed_residuals(model):
    """One of every residual kind on the conftest model (free, ball, hinge, slide joints)."""
    target_q = random_configuration(model, np.random.default_rng(7))

    def user_fn(m, d, x, u):
        # nonlinear in q, v and u: a site height times a control, plus a velocity product
        tip = d.site_xpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "tip")]
        nq = m.nq
        return np.array([tip[2] * u[0] + np.sin(x[nq]) * x[nq + 1], tip[0] ** 2 - u[2]])

    return [
        SitePosition(model, "tip", [0.1, -0.2, 0.5]),
        SitePosition(model, "tip", axes="xz"),
        BodyPosition(model, "elbow", [0.0, 0.0, 1.0]),
        BodyPosition(model, "slider", point="com"),
        CenterOfMass(model),
        CenterOfMass(model, "ball", axes="z"),
        CenterOfMassVelocity(model),
        CenterOfMassVelocity(model, "elbow", axes=[0, 2]),
        Qpos(model, target_q),
        Qpos(model, target_q, joints=["ball", "slide"]),
        Qpos(model, target_q, joints=["hinge", "slide", "h2"]),  # plain coordinates: batched
        Qpos(model, target_q, dofs=[2, 0]),  # a free joint's translation: batched
        Qvel(model, np.arange(3.0), dofs=[0, 4, 7]),
        Control(model, [0.1, 0.2], actuators=["hinge_motor", "tendon_motor"]),
        Combination([(1.0, CenterOfMass(model)), (-0.5, SitePosition(model, "tip")),
                     (2.0, BodyPosition(model, "pendulum"))], offset=[0.0, 0.1, 0.2]),
        UserResidual(model, user_fn, 2, uses_control=True),
    ]


def test_every_residual_jacobian_matches_finite_differences(mixed_model, rng):
    model = mixed_model
    residuals = mixed_residuals(model)
    for trial in range(3):
        x = random_state(model, rng)
        u = rng.normal(size=model.nu)
        for res in residuals:
            r, jx, ju = residual_with_jacobians(res, x, u)
            assert r.shape == (res.size,)
            np.testing.assert_allclose(r, res(x, u), atol=1e-12)
            tol = 1e-4 if isinstance(res, CenterOfMassVelocity) else 1e-6  # forward-difference q block
            check_derivatives(lambda xx: res(xx, u), x, jx, rtol=tol, atol=tol, retract=state_retract(model),
                              name=f"{res.name} J_x, trial {trial}")
            check_derivatives(lambda uu: res(x, uu), u, ju, rtol=1e-7, atol=1e-6, name=f"{res.name} J_u")


def test_qpos_residual_quaternion_jacobian_far_from_target(rng):
    """Large rotations (up to ~π) exercise the full inverse right Jacobian of SO(3)."""
    model = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body>"
        "<body pos='1 0 0'><joint type='ball'/><geom size='.1'/></body></worldbody></mujoco>")
    target = model.qpos0.copy()
    res = Qpos(model, target)
    for angle in (0.0, 1e-8, 0.5, 2.0, 3.0):
        q = model.qpos0.copy()
        for adr in (3, 7):
            axis = rng.normal(size=3)
            axis /= np.linalg.norm(axis)
            q[adr:adr + 4] = np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])
        x = np.concatenate([q, np.zeros(model.nv)])
        r, jx, _ = residual_with_jacobians(res, x, None)
        assert np.linalg.norm(r[3:6]) == pytest.approx(angle, abs=1e-9)
        check_derivatives(res, x, jx, rtol=1e-7, atol=1e-6, retract=state_retract(model), name=f"angle {angle}")


def test_residual_values_have_the_documented_meaning(mixed_model, rng):
    model = mixed_model
    data = mujoco.MjData(model)
    x = random_state(model, rng)
    data.qpos[:] = x[:model.nq]
    data.qvel[:] = x[model.nq:]
    mujoco.mj_forward(model, data)
    target = np.array([0.3, 0.2, 0.1])
    np.testing.assert_allclose(SitePosition(model, "tip", target)(x), data.site("tip").xpos - target)
    np.testing.assert_allclose(CenterOfMass(model)(x), data.subtree_com[0])
    mujoco.mj_subtreeVel(model, data)
    np.testing.assert_allclose(CenterOfMassVelocity(model)(x), data.subtree_linvel[0], atol=1e-12)
    np.testing.assert_allclose(Qpos(model, x[:model.nq])(x), np.zeros(model.nv), atol=1e-12)
    np.testing.assert_allclose(Qvel(model, dofs=[2])(x), x[model.nq + 2])


def test_com_velocity_without_position_jacobian_keeps_velocity_block(mixed_model, rng):
    model = mixed_model
    x = random_state(model, rng)
    full = residual_with_jacobians(CenterOfMassVelocity(model), x, None)[1]
    short = residual_with_jacobians(CenterOfMassVelocity(model, position_jacobian=False), x, None)[1]
    nv = model.nv
    np.testing.assert_allclose(short[:, nv:], full[:, nv:])
    assert np.all(short[:, :nv] == 0)


# --------------------------------------------------------------------------- stage cost


def mixed_stage_cost(model):
    res = mixed_residuals(model)
    norms = [Quadratic(), SmoothAbs(0.2), L2(0.1), Cosh(0.5)]
    return StageCost(model, [CostTerm(r, norms[i % 4], 0.5 + i) for i, r in enumerate(res)])


def test_stage_cost_gradient_is_exact_and_hessian_is_gauss_newton(mixed_model, rng):
    model = mixed_model
    cost = mixed_stage_cost(model)
    x = random_state(model, rng, vel_scale=0.5)
    u = rng.normal(scale=0.5, size=model.nu)
    d = cost.evaluate(x, u)
    assert d.l == pytest.approx(cost.value(x, u))
    check_derivatives(lambda xx: cost.value(xx, u), x, d.lx, rtol=1e-5, atol=1e-5, retract=state_retract(model),
                      name="l_x")
    check_derivatives(lambda uu: cost.value(x, uu), u, d.lu, rtol=1e-6, atol=1e-6, name="l_u")
    # Gauss-Newton Hessian Σ w J_xᵀ H(r) J_x assembled from finite-difference Jacobians
    lxx = np.zeros_like(d.lxx)
    luu = np.zeros_like(d.luu)
    lux = np.zeros_like(d.lux)
    for t in cost.terms:
        r = t.residual(x, u)
        jx = fd_state_jacobian(lambda xx: t.residual(xx, u), model, x)
        ju = fd_control_jacobian(lambda uu: t.residual(x, uu), u)
        H = t.norm.hessian(r)
        lxx += t.weight * jx.T @ H @ jx
        luu += t.weight * ju.T @ H @ ju
        lux += t.weight * ju.T @ H @ jx
    np.testing.assert_allclose(d.lxx, lxx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d.luu, luu, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d.lux, lux, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d.lxx, d.lxx.T, atol=1e-12)
    assert np.linalg.eigvalsh(d.lxx).min() > -1e-9


def test_stage_cost_of_linear_residual_has_exact_hessian(mixed_model, rng):
    """For residuals linear in (v, u) the Gauss-Newton Hessian is the true Hessian."""
    model = mixed_model
    cost = StageCost(model, [CostTerm(Qvel(model), Quadratic(), 2.0),
                             CostTerm(Control(model), Cosh(0.4), 3.0)])
    x = random_state(model, rng)
    u = rng.normal(size=model.nu)
    d = cost.evaluate(x, u)
    check_derivatives(lambda xx: cost.evaluate(xx, u).lx, x, d.lxx, rtol=1e-7, atol=1e-6,
                      retract=state_retract(model), name="l_xx")
    check_derivatives(lambda uu: cost.evaluate(x, uu).lu, u, d.luu, rtol=1e-6, atol=1e-6, name="l_uu")


# --------------------------------------------------------------------------- trajectory cost


def test_trajectory_cost_time_step_convention_and_shapes(mixed_model, rng):
    model = mixed_model
    h = 0.01
    running = StageCost(model, [CostTerm(SitePosition(model, "tip"), SmoothAbs(0.1), 2.0),
                                CostTerm(Control(model), Quadratic(), 0.5)])
    terminal = StageCost(model, [CostTerm(Qvel(model), Quadratic(), 7.0)])
    T = 4
    X = np.stack([random_state(model, rng) for _ in range(T + 1)])
    U = rng.normal(size=(T, model.nu))
    explicit = TrajectoryCost(running, terminal, timestep=h)
    implied = TrajectoryCost(running, timestep=h)
    l = explicit.stage_values(X, U)
    np.testing.assert_allclose(l[:T], [h * running.value(X[i], U[i]) for i in range(T)])
    assert l[T] == pytest.approx(terminal.value(X[T]))                  # terminal: not scaled
    assert implied.stage_values(X, U)[T] == pytest.approx(h * running.state_terms().value(X[T]))
    assert explicit.total(X, U) == pytest.approx(l.sum())
    d = explicit.evaluate(X, U)
    ndx = 2 * model.nv + model.na
    assert d.l.shape == (T + 1,) and d.lx.shape == (T + 1, ndx) and d.lu.shape == (T, model.nu)
    assert d.lxx.shape == (T + 1, ndx, ndx) and d.luu.shape == (T, model.nu, model.nu)
    assert d.lux.shape == (T, model.nu, ndx)
    assert d.total == pytest.approx(explicit.total(X, U))
    for i in (0, T - 1):
        s = running.evaluate(X[i], U[i])
        np.testing.assert_allclose(d.lx[i], h * s.lx)
        np.testing.assert_allclose(d.luu[i], h * s.luu)
        np.testing.assert_allclose(d.lux[i], h * s.lux)
    np.testing.assert_allclose(d.lxx[T], terminal.evaluate(X[T]).lxx)
    # default time step is the model's
    assert TrajectoryCost(running).timestep == model.opt.timestep


def test_linear_quadratic_cost_derivatives(rng):
    n, m, T = 3, 2, 5
    M = rng.normal(size=(n, n))
    Q = M @ M.T
    R = np.diag([0.5, 2.0])
    cost = LinearQuadraticCost(Q, R, 3 * Q, x_ref=rng.normal(size=n), u_ref=rng.normal(size=m))
    X = rng.normal(size=(T + 1, n))
    U = rng.normal(size=(T, m))
    d = cost.evaluate(X, U)
    eps = 1e-6
    for i in (0, T):
        def total_at(xi, i=i):
            Xi = X.copy()
            Xi[i] = xi
            return cost.total(Xi, U)
        assert d.lx[i] == pytest.approx(finite_difference_jacobian(total_at, X[i], eps=eps), rel=1e-6)
    Up = U.copy()
    Up[2, 1] += eps
    Um = U.copy()
    Um[2, 1] -= eps
    assert d.lu[2, 1] == pytest.approx((cost.total(X, Up) - cost.total(X, Um)) / (2 * eps), rel=1e-6)
    with pytest.raises(ParameterError, match="symmetric"):
        LinearQuadraticCost(np.triu(np.ones((2, 2))), np.eye(1))
    with pytest.raises(ParameterError, match="semi-definite"):
        LinearQuadraticCost(-np.eye(2), np.eye(1))


# --------------------------------------------------------------------------- bad input


def test_unknown_names_are_reported(mixed_model):
    with pytest.raises(ParameterError, match="no site named 'nose'.*tip"):
        SitePosition(mixed_model, "nose")
    with pytest.raises(ParameterError, match="no body named"):
        BodyPosition(mixed_model, "wing")
    with pytest.raises(ParameterError, match="no joint named 'knee'"):
        Qpos(mixed_model, joints=["knee"])
    with pytest.raises(ParameterError, match="no actuator named"):
        Control(mixed_model, actuators=["jet"])
    with pytest.raises(ParameterError, match="site index 99 out of range"):
        SitePosition(mixed_model, 99)
    with pytest.raises(ParameterError, match="axes"):
        SitePosition(mixed_model, "tip", axes="xw")
    with pytest.raises(ParameterError, match="dof indices"):
        Qvel(mixed_model, dofs=[100])


def test_bad_targets_weights_and_terms(mixed_model):
    with pytest.raises(ShapeError, match="target"):
        SitePosition(mixed_model, "tip", [0.0, 1.0])
    with pytest.raises(NonFiniteError, match="target"):
        CenterOfMass(mixed_model, target=[0.0, np.nan, 0.0])
    with pytest.raises(ParameterError, match="weight of site\\[tip\\] must be non-negative"):
        CostTerm(SitePosition(mixed_model, "tip"), Quadratic(), -1.0)
    with pytest.raises(NonFiniteError, match="weight"):
        CostTerm(SitePosition(mixed_model, "tip"), Quadratic(), np.inf)
    with pytest.raises(ParameterError, match="Norm"):
        CostTerm(SitePosition(mixed_model, "tip"), "quadratic")
    other = load_model("acrobot")
    with pytest.raises(ParameterError, match="different model"):
        StageCost(mixed_model, [CostTerm(SitePosition(other, "tip"))])
    with pytest.raises(ShapeError, match="size"):
        Combination([(1.0, SitePosition(mixed_model, "tip")), (1.0, Qvel(mixed_model))])
    running = StageCost(mixed_model, [CostTerm(Control(mixed_model))])
    with pytest.raises(ParameterError, match="terminal cost must not depend on the control"):
        TrajectoryCost(running, running)
    with pytest.raises(ParameterError, match="timestep"):
        TrajectoryCost(running, timestep=0.0)


def test_bad_states_and_controls_raise_naming_the_argument(mixed_model, rng):
    model = mixed_model
    cost = TrajectoryCost(StageCost(model, [CostTerm(SitePosition(model, "tip")),
                                            CostTerm(Control(model))]))
    T = 3
    X = np.stack([random_state(model, rng) for _ in range(T + 1)])
    U = np.zeros((T, model.nu))
    bad = X.copy()
    bad[2, 0] = np.nan
    with pytest.raises(NonFiniteError, match="X"):
        cost.total(bad, U)
    with pytest.raises(ShapeError, match="X: expected shape \\(4, "):
        cost.evaluate(X[:-1], U)
    with pytest.raises(ShapeError, match="U"):
        cost.total(X, np.zeros((T, model.nu + 1)))
    with pytest.raises(ParameterError, match="at least one step"):
        cost.total(X[:1], np.zeros((0, model.nu)))
    with pytest.raises(ParameterError, match="needs a control"):
        Control(model)(X[0])


def test_user_residual_failures_name_the_term(mixed_model, rng):
    model = mixed_model
    x = random_state(model, rng)
    nan_res = UserResidual(model, lambda m, d, x, u: np.array([np.nan]), 1, name="broken")
    with pytest.raises(NonFiniteError, match="broken"):
        StageCost(model, [CostTerm(nan_res)]).value(x)
    wrong = UserResidual(model, lambda m, d, x, u: np.zeros(3), 2, name="wrong_size")
    with pytest.raises(ShapeError, match="wrong_size"):
        StageCost(model, [CostTerm(wrong)]).value(x)
    with pytest.raises(ParameterError, match="callable"):
        UserResidual(model, None, 1)
    with pytest.raises(ParameterError, match="size"):
        UserResidual(model, lambda *a: 0, 0)


# --------------------------------------------------------------------------- batched evaluation


def test_batched_residuals_equal_stage_by_stage_evaluation(mixed_model, rng):
    """``batch_evaluate`` over N stages equals ``evaluate`` stage by stage (values and Jacobians)."""
    from contactopt.costs.stage import _JAC_KINDS, _POINT_KINDS

    model = mixed_model
    residuals = mixed_residuals(model) + [
        CenterOfMassVelocity(model, position_jacobian=False),
        Combination([(1.0, Control(model)), (-2.0, Control(model, [0.3, 0.1, -0.2]))], offset=[1, 2, 3]),
    ]
    N = 6
    X = np.stack([random_state(model, rng) for _ in range(N)])
    U = rng.normal(size=(N, model.nu))
    data = mujoco.MjData(model)
    nbatched = 0
    for jacobian in (False, True):
        for res in residuals:
            req = res.batch_requests(jacobian)
            if req is None:
                continue
            nbatched += 1
            kin = {key: np.empty((N, 3) if key[0] in _POINT_KINDS else (N, 3, model.nv)) for key in req}
            ref = []
            for i in range(N):
                data.qpos[:] = X[i, :model.nq]
                data.qvel[:] = X[i, model.nq:model.nq + model.nv]
                data.act[:] = X[i, model.nq + model.nv:]
                mujoco.mj_kinematics(model, data)
                mujoco.mj_comPos(model, data)
                for kind, oid in req:
                    if kind in _POINT_KINDS:
                        kin[(kind, oid)][i] = getattr(data, kind)[oid]
                    else:
                        _JAC_KINDS[kind](model, data, kin[(kind, oid)][i], oid)
                ref.append(res.evaluate(data, X[i], U[i], jacobian))
            r, jx, ju = res.batch_evaluate(kin, X, U, jacobian)
            assert r.shape == (N, res.size)
            np.testing.assert_allclose(r, [x[0] for x in ref], rtol=1e-13, atol=1e-14, err_msg=res.name)
            if not jacobian:
                assert jx is None and ju is None
                continue
            for got, k, size in ((jx, 1, 2 * model.nv + model.na), (ju, 2, model.nu)):
                want = np.stack([np.zeros((res.size, size)) if x[k] is None else x[k] for x in ref])
                got = np.zeros_like(want) if got is None else got
                np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14, err_msg=res.name)
    # only Qpos with a rotation DoF, UserResidual, the Combination holding them and the FD COM
    # velocity stay per stage
    assert nbatched >= 2 * 10


def assert_batched_equals_reference(cost, data, X, U, derivatives, rtol):
    """``_evaluate_stages`` on its batched path equals its stage-by-stage reference
    (``batched=False``) to ``rtol``, with an absolute floor of ``rtol`` times each array's scale."""
    from contactopt.costs.stage import _evaluate_stages

    got = _evaluate_stages(cost, data, X, U, derivatives)
    want = _evaluate_stages(cost, data, X, U, derivatives, batched=False)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * (np.abs(w).max() + 1))


def test_batched_stage_cost_equals_stage_by_stage_reference(mixed_model, rng):
    """The stage cost's batched path gives the stage-by-stage values and derivatives (to roundoff)."""
    from contactopt.costs.stage import _evaluate_stages

    model = mixed_model
    all_batched = StageCost(model, [
        CostTerm(SitePosition(model, "tip", [0.1, 0.0, 0.3]), SmoothAbs(0.2), 2.0),
        CostTerm(BodyPosition(model, "slider", point="com", axes="xy"), L2(0.1), 1.5),
        CostTerm(CenterOfMassVelocity(model, axes="xy", position_jacobian=False), Quadratic(), 0.7),
        CostTerm(Combination([(1.0, CenterOfMass(model)), (-1.0, BodyPosition(model, "elbow"))]),
                 SmoothAbs(0.1), 3.0),
        CostTerm(Qvel(model), Quadratic(), 0.1),
        CostTerm(Control(model), Cosh(0.5), 0.2),
    ])
    N = 9
    X = np.stack([random_state(model, rng) for _ in range(N)])
    U = rng.normal(size=(N, model.nu))
    for cost in (all_batched, mixed_stage_cost(model)):
        data = mujoco.MjData(model)
        for derivatives in (False, True):
            assert_batched_equals_reference(cost, data, X, U, derivatives, rtol=1e-12)
        # the terminal (control-free) path
        state_only = cost.state_terms()
        got = _evaluate_stages(state_only, data, X, None, True)
        want = _evaluate_stages(state_only, data, X, None, True, batched=False)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[3], want[3], rtol=1e-12, atol=1e-12 * (np.abs(want[3]).max() + 1))


def test_subclass_overriding_evaluate_is_not_batched(mixed_model, rng):
    """A residual subclass with its own ``evaluate`` keeps being evaluated by it (stage by stage)."""
    from contactopt.costs.residuals import _batch_requests

    class Shifted(SitePosition):
        def evaluate(self, data, x, u, jacobian):
            r, jx, ju = super().evaluate(data, x, u, jacobian)
            return r + 1.0, jx, ju

    model = mixed_model
    plain, shifted = SitePosition(model, "tip"), Shifted(model, "tip")
    assert _batch_requests(plain, True) is not None and _batch_requests(shifted, True) is None
    assert _batch_requests(Combination([(1.0, shifted), (1.0, plain)]), False) is None
    x = random_state(model, rng)
    cost = StageCost(model, [CostTerm(shifted, Quadratic(), 1.0)])
    ref = StageCost(model, [CostTerm(plain, Quadratic(), 1.0)])
    r = plain(x) + 1.0
    assert cost.value(x) == pytest.approx(0.5 * r @ r, rel=1e-12)
    assert cost.value(x) != pytest.approx(ref.value(x))


def test_compiled_kinematics_pass_equals_python_loop_bit_for_bit(mixed_model, rng, monkeypatch):
    """The compiled per-stage MuJoCo loop of the batched evaluation (positions, the four
    Jacobian kinds) gives exactly the numbers of the Python loop."""
    import contactopt.costs.stage as costs_module
    from contactopt import native
    from contactopt.costs.stage import _evaluate_stages

    if not native.NATIVE:
        pytest.skip("compiled MuJoCo loops not available on this installation")
    model = mixed_model
    cost = StageCost(model, [
        CostTerm(SitePosition(model, "tip", [0.1, 0.0, 0.3]), SmoothAbs(0.2), 2.0),
        CostTerm(BodyPosition(model, "elbow", axes="xz"), Quadratic(), 1.0),
        CostTerm(BodyPosition(model, "slider", point="com", axes="xy"), L2(0.1), 1.5),
        CostTerm(CenterOfMassVelocity(model, axes="xy", position_jacobian=False), Quadratic(), 0.7),
        CostTerm(Combination([(1.0, CenterOfMass(model)), (-1.0, CenterOfMass(model, "ball"))]),
                 SmoothAbs(0.1), 3.0),
        CostTerm(Qvel(model), Quadratic(), 0.1),
        CostTerm(Control(model), Cosh(0.5), 0.2),
    ])
    N = 7
    X = np.stack([random_state(model, rng) for _ in range(N)])
    U = rng.normal(size=(N, model.nu))
    data = mujoco.MjData(model)
    for derivatives in (False, True):
        got = _evaluate_stages(cost, data, X, U, derivatives)
        monkeypatch.setattr(costs_module, "NATIVE_KINEMATICS", False)
        want = _evaluate_stages(cost, data, X, U, derivatives)
        monkeypatch.setattr(costs_module, "NATIVE_KINEMATICS", True)
        for g, w in zip(got, want):
            if w is None:
                assert g is None
            else:
                np.testing.assert_array_equal(g, w)
    # the gathered rows themselves
    points = [("site_xpos", 0), ("xpos", 2), ("xipos", 3), ("subtree_com", 0)]
    jacs = [("jac_site", 0), ("jac_body", 2), ("jac_bodycom", 3), ("jac_subtreecom", 1)]
    P, J = native.native_kinematics(model, data, X, points, jacs)
    for i in range(N):
        d = mujoco.MjData(model)
        nq, nv = model.nq, model.nv
        d.qpos[:], d.qvel[:] = X[i, :nq], X[i, nq:nq + nv]
        d.act[:] = X[i, nq + nv:]
        mujoco.mj_kinematics(model, d)
        mujoco.mj_comPos(model, d)
        for k, (kind, oid) in enumerate(points):
            np.testing.assert_array_equal(P[k, i], getattr(d, kind)[oid])
        jac = np.empty((3, nv))
        for k, (kind, oid) in enumerate(jacs):
            if kind == "jac_subtreecom":
                mujoco.mj_jacSubtreeCom(model, d, jac, oid)
            else:
                fn = {"jac_site": mujoco.mj_jacSite, "jac_body": mujoco.mj_jacBody,
                      "jac_bodycom": mujoco.mj_jacBodyCom}[kind]
                fn(model, d, jac, None, oid)
            np.testing.assert_array_equal(J[k, i], jac)


def test_rotation_vector_difference_equals_mujoco_subquat(rng):
    """The vectorized ``log(q_refˉ¹ ⊗ q)`` equals ``mju_subQuat`` on random, unnormalized,
    sign-flipped, identical and nearly opposite quaternions (angles close to ±π)."""
    from contactopt.rotations import quat_from_axis_angle, quat_multiply, rotation_vector_difference

    refs, qs = [], []
    for k in range(40):
        ref = rng.normal(size=4)
        ref /= np.linalg.norm(ref)
        if k < 10:
            q = rng.normal(size=4) * rng.uniform(0.5, 2.0)                # unnormalized
        elif k < 20:
            angle = [0.0, 1e-9, 1e-5, np.pi - 1e-6, np.pi + 1e-6][k % 5]  # edges of the branches
            q = quat_multiply(ref, quat_from_axis_angle(rng.normal(size=3), angle))
        else:
            q = quat_multiply(ref, quat_from_axis_angle(rng.normal(size=3), rng.uniform(-4, 4)))
        refs.append(ref)
        qs.append(-q if k % 3 == 0 else q)                                 # q and −q: one rotation
    got = rotation_vector_difference(np.array(qs), np.array(refs))
    want = np.empty((len(qs), 3))
    for i, (q, ref) in enumerate(zip(qs, refs)):
        mujoco.mju_subQuat(want[i], q, ref)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rotation_vector_difference(qs[5], refs[5]), want[5], atol=1e-12)


def test_qpos_over_rotations_is_batched_like_the_stage_by_stage_reference(mixed_model, rng):
    """A configuration error over ball and free-joint rotations is evaluated over all stages at
    once (it ran stage by stage, which kept the whole cost on the Python loop) and gives the
    values and Jacobians of ``evaluate`` (``mj_differentiatePos`` and ``J_r⁻¹``) — on any subset
    of DoFs in any order, on the target itself, and with a moving target."""
    from contactopt.costs.residuals import _batch_requests

    model = mixed_model
    N = 10
    X = np.stack([random_state(model, rng) for _ in range(N)])
    target = random_configuration(model, rng)
    X[0, :model.nq] = target                                  # zero error: the small-angle branch
    X[1, 3:7] = target[3:7] * 1.7                           # an unnormalized free-joint quaternion

    def moving(t, t0, x0):
        q = target.copy()
        q[7:11] = [np.cos(t), np.sin(t), 0.0, 0.0]              # the ball's target turns about x
        return q

    selections = [dict(), dict(dofs=[4, 9, 3, 7, 0]), dict(joints=["ball", "hinge"]),
                  dict(dofs=[8])]
    for sel in selections:
        for reference in (None, moving):
            res = Qpos(model, target, reference=reference, **sel)
            assert _batch_requests(res, True) is not None
            cost = StageCost(model, [CostTerm(res, SmoothAbs(0.3), 2.0),
                                     CostTerm(Qvel(model), Quadratic(), 0.1)])
            if reference is not None:
                cost.schedule(0.05 * np.arange(N), 0.0, X[0])
            data = mujoco.MjData(model)
            for derivatives in (False, True):
                U = rng.normal(size=(N, model.nu))
                assert_batched_equals_reference(cost, data, X, U, derivatives, rtol=1e-12)


def test_compiled_mechanical_energy_equals_the_stage_by_stage_reference(mixed_model, rng):
    """``MechanicalEnergy`` over many stages (one compiled loop) gives the energies of
    :meth:`~MechanicalEnergy.evaluate` stage by stage and its Jacobian to the roundoff of a
    forward difference; both Jacobians agree with central differences of the energy on the
    manifold (free and ball joints included), and a stage cost holding the term gives the
    reference path's derivatives."""
    from contactopt import native

    if not native.NATIVE:
        pytest.skip("compiled MuJoCo loops not available on this installation")
    model = mixed_model
    res = MechanicalEnergy(model, 0.3)
    assert res.batch_requests(True) == ()
    N = 6
    X = np.stack([random_state(model, rng) for _ in range(N)])
    r, jx, ju = res.batch_evaluate({}, X, None, True)
    assert r.shape == (N, 1) and jx.shape == (N, 1, 2 * model.nv + model.na) and ju is None
    r_only, none_x, none_u = res.batch_evaluate({}, X, None, False)
    assert none_x is None and none_u is None
    np.testing.assert_array_equal(r_only, r)
    data = mujoco.MjData(model)
    for i in range(N):
        data.qpos[:] = X[i, :model.nq]
        data.qvel[:] = X[i, model.nq:model.nq + model.nv]
        data.act[:] = X[i, model.nq + model.nv:]
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        want_r, want_jx, _ = res.evaluate(data, X[i], None, True)
        np.testing.assert_allclose(r[i], want_r, rtol=1e-13)
        # roundoff of the kinetic energy (a sum in another order) divided by the 1e-6 step
        np.testing.assert_allclose(jx[i], want_jx, rtol=0, atol=1e-8 * (1 + np.abs(want_jx).max()))
        numeric = fd_state_jacobian(lambda x: res(x), model, X[i])
        np.testing.assert_allclose(jx[i], numeric, rtol=1e-4,
                                   atol=1e-4 * (1 + np.abs(numeric).max()))
    cost = StageCost(model, [CostTerm(res, Quadratic(), 2.0),
                             CostTerm(SitePosition(model, "tip"), L2(0.1))])
    assert_batched_equals_reference(cost, data, X, None, True, rtol=1e-7)


def test_nonfinite_residual_is_reported_by_name_with_the_combined_check(mixed_model, rng):
    from contactopt.costs.stage import _evaluate_stages

    model = mixed_model
    cost = StageCost(model, [CostTerm(Control(model), Quadratic(), 1.0),
                             CostTerm(Qvel(model, name="speed"), Quadratic(), 1.0)])
    X = np.stack([random_state(model, rng) for _ in range(4)])
    X[2, model.nq + 1] = np.inf      # bypasses the input validation of the public methods
    with pytest.raises(NonFiniteError, match=r"speed.*stage 2"):
        _evaluate_stages(cost, mujoco.MjData(model), X, np.zeros((4, model.nu)), True)


def test_single_component_terms_accumulate_exactly_like_einsum_and_matmul(mixed_model, rng):
    """Terms with one residual component take an elementwise shortcut in the Gauss-Newton sums;
    it reproduces numpy's einsum / matmul accumulation bit for bit."""
    from contactopt.costs.stage import _evaluate_stages

    model = mixed_model
    terms = [CostTerm(SitePosition(model, "tip", [0.0, 0.0, 0.4], axes="z"), SmoothAbs(0.2), 2.0),
             CostTerm(Qpos(model, dofs=[9]), OneSidedQuadratic(), 30.0),
             CostTerm(Qvel(model, dofs=[1]), L2(0.1), 0.5),                 # non-diagonal Hessian path
             CostTerm(Control(model, actuators=["hinge_motor"]), Cosh(0.5), 0.3),
             CostTerm(Qvel(model, dofs=[0, 4]), Quadratic(), 0.1)]          # two components: einsum
    cost = StageCost(model, terms)
    N = 6
    X = np.stack([random_state(model, rng) for _ in range(N)])
    U = rng.normal(size=(N, model.nu))
    got = _evaluate_stages(cost, mujoco.MjData(model), X, U, True)
    ndx, nu = cost.ndx, cost.nu
    lx, lu = np.zeros((N, ndx)), np.zeros((N, nu))
    lxx, luu, lux = np.zeros((N, ndx, ndx)), np.zeros((N, nu, nu)), np.zeros((N, nu, ndx))
    data = mujoco.MjData(model)
    for t in terms:
        R, JX, JU = [], [], []
        for i in range(N):
            x = X[i]
            data.qpos[:], data.qvel[:] = x[:model.nq], x[model.nq:model.nq + model.nv]
            data.act[:] = x[model.nq + model.nv:]
            mujoco.mj_kinematics(model, data)
            mujoco.mj_comPos(model, data)
            r, jx, ju = t.residual.evaluate(data, x, U[i], True)
            R.append(r)
            JX.append(np.zeros((t.residual.size, ndx)) if jx is None else jx)
            JU.append(np.zeros((t.residual.size, nu)) if ju is None else ju)
        r, jx, ju = np.array(R), np.array(JX), np.array(JU)
        g = t.weight * t.norm.gradient(r)
        if t.norm.diagonal_hessian:
            h = t.weight * t.norm.hessian_diagonal(r)
            hjx, hju = h[:, :, None] * jx, h[:, :, None] * ju
        else:
            H = t.weight * t.norm.hessian(r)
            hjx, hju = H @ jx, H @ ju
        lx += np.einsum("nmi,nm->ni", jx, g)
        lxx += np.swapaxes(jx, 1, 2) @ hjx
        lu += np.einsum("nmi,nm->ni", ju, g)
        luu += np.swapaxes(ju, 1, 2) @ hju
        lux += np.swapaxes(ju, 1, 2) @ hjx
    for a, b in zip(got[1:], (lx, lu, lxx, luu, lux)):
        np.testing.assert_array_equal(a, b)
