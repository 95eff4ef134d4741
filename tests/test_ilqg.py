"""iLQG and MuJoCo finite-difference dynamics: LQR exactness, the box QP against a
brute-force reference, control limits, both regularization variants, acrobot swing-up,
derivatives against our own central differences, threads, warm starts and bad input."""

import itertools
import math

import mujoco
import numpy as np
import pytest
from scipy.optimize import minimize

from contactopt import NonFiniteError, ParameterError, ShapeError, load_model, pack_state
from contactopt.costs import (
    BodyPosition,
    CenterOfMass,
    Control,
    CostTerm,
    LinearQuadraticCost,
    Qpos,
    Quadratic,
    Qvel,
    SitePosition,
    StageCost,
    TrajectoryCost,
    UserResidual,
)
from contactopt.dynamics import Dynamics, LinearDynamics, MujocoDynamics, smooth_contacts
from contactopt.solvers import (
    ILQG,
    BoxQPStatus,
    ILQGResult,
    ILQGSettings,
    ILQGStatus,
    Regularization,
    ValueUpdate,
    decrease_regularization,
    increase_regularization,
    solve_box_qp,
)
from contactopt.testing import check_derivatives

# A small model with every state part: a hinge pendulum, a ball joint, a slide and an
# actuator with activation dynamics (na = 1), plus a contact with the floor.
SMALL_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".05"/>
      <body pos="0 0 -.5">
        <joint name="ball" type="ball" damping="0.05"/>
        <geom type="capsule" fromto="0 0 0 .3 0 -.3" size=".04"/>
      </body>
    </body>
    <body pos="0.5 0 0.1">
      <joint name="slide" type="slide" axis="0 0 1"/>
      <geom type="sphere" size=".1"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="hinge" ctrlrange="-2 2"/>
    <general joint="slide" dyntype="filter" dynprm="0.05" gainprm="20" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


@pytest.fixture
def small_model():
    return mujoco.MjModel.from_xml_string(SMALL_XML)


def small_state(model, rng):
    q = model.qpos0.copy()
    mujoco.mj_integratePos(model, q, rng.normal(scale=0.4, size=model.nv), 1.0)
    q[-1] = 0.095  # sphere slightly pressed into the floor: an active contact
    return pack_state(model, q, rng.normal(scale=0.5, size=model.nv), [0.3])


# --------------------------------------------------------------------------- dynamics


def test_mujoco_dynamics_sizes_and_limits(small_model):
    dyn = MujocoDynamics(small_model, nthread=2)
    assert isinstance(dyn, Dynamics)
    assert (dyn.nx, dyn.ndx, dyn.nu) == (small_model.nq + small_model.nv + 1, 2 * small_model.nv + 1, 2)
    np.testing.assert_allclose(dyn.control_lower, [-2, -1])
    np.testing.assert_allclose(dyn.control_upper, [2, 1])
    assert dyn.timestep == 0.01


def test_transition_derivatives_match_our_central_differences(small_model, rng):
    model = small_model
    dyn = MujocoDynamics(model, nthread=1, centered=True)
    T = 3
    X = np.stack([small_state(model, rng) for _ in range(T)])
    U = rng.uniform(-0.5, 0.5, size=(T, model.nu))
    A, B = dyn.derivatives(X, U)
    assert A.shape == (T, dyn.ndx, dyn.ndx) and B.shape == (T, dyn.ndx, dyn.nu)
    eps = 1e-6
    for i in range(T):
        x_next = dyn.step(X[i], U[i])
        check_derivatives(lambda x, i=i, x_next=x_next: dyn.state_difference(x_next, dyn.step(x, U[i])), X[i], A[i],
                          eps=eps, rtol=1e-4, atol=2e-5, retract=dyn.state_integrate, name=f"A[{i}]")
        check_derivatives(lambda u, i=i, x_next=x_next: dyn.state_difference(x_next, dyn.step(X[i], u)), U[i], B[i],
                          eps=eps, rtol=1e-4, atol=2e-5, name=f"B[{i}]")
        assert np.abs(A[i]).max() > 0.5 and np.abs(B[i]).max() > 1e-3   # not trivially zero


def test_threaded_derivatives_equal_serial_and_stride_interpolates(small_model, rng):
    model = small_model
    T = 13
    U = rng.uniform(-1, 1, size=(T, model.nu))
    serial = MujocoDynamics(model, nthread=1)
    X = serial.rollout(small_state(model, rng), U).X
    A1, B1 = serial.derivatives(X, U)
    with MujocoDynamics(model, nthread=4) as threaded:
        A4, B4 = threaded.derivatives(X, U)
        A4b, _ = threaded.derivatives(X, U)
    np.testing.assert_array_equal(A1, A4)
    np.testing.assert_array_equal(B1, B4)
    np.testing.assert_array_equal(A4, A4b)
    strided = MujocoDynamics(model, nthread=2, derivative_stride=5)
    idx = strided.derivative_indices(T)
    np.testing.assert_array_equal(idx, [0, 5, 10, 12])
    As, Bs = strided.derivatives(X, U)
    np.testing.assert_array_equal(As[idx], A1[idx])
    np.testing.assert_allclose(As[7], 0.6 * A1[5] + 0.4 * A1[10])
    np.testing.assert_allclose(Bs[11], 0.5 * B1[10] + 0.5 * B1[12])


@pytest.mark.parametrize("T, stride", [(1, 3), (2, 2), (13, 5), (160, 2), (161, 4), (50, 7)])
def test_vectorized_stride_interpolation_equals_the_reference_loop(T, stride, rng):
    from contactopt.dynamics.shared import (_interpolate_skipped_reference, derivative_indices,
                                            interpolate_skipped)

    idx = derivative_indices(T, stride)
    A, B = rng.normal(size=(T, 4, 4)), rng.normal(size=(T, 4, 2))
    A0, Ar, Br = A.copy(), A.copy(), B.copy()
    interpolate_skipped(A, B, idx)
    _interpolate_skipped_reference(Ar, Br, idx)
    np.testing.assert_allclose(A, Ar, rtol=0, atol=1e-15)
    np.testing.assert_allclose(B, Br, rtol=0, atol=1e-15)
    skipped = np.setdiff1d(np.arange(T), idx)
    np.testing.assert_array_equal(A[idx], A0[idx])
    assert not np.any(np.isclose(A[skipped], A0[skipped]).all(axis=(1, 2)))  # every skipped row filled


def test_rollout_feedback_and_step(small_model, rng):
    model = small_model
    dyn = MujocoDynamics(model, nthread=1)
    x0 = small_state(model, rng)
    U = rng.uniform(-0.5, 0.5, size=(6, model.nu))
    ref = dyn.rollout(x0, U)
    assert not ref.diverged and ref.X.shape == (7, dyn.nx)
    np.testing.assert_allclose(dyn.step(x0, U[0]), ref.X[1])
    K = rng.normal(size=(6, dyn.nu, dyn.ndx))
    same = dyn.rollout(x0, U, X_ref=ref.X, K=K)      # zero deviation: feedback inactive
    np.testing.assert_allclose(same.X, ref.X, atol=1e-12)
    # a perturbed start: the applied control is U + K (x ⊖ X_ref), clamped to ctrlrange
    x1 = dyn.state_integrate(x0, rng.normal(scale=0.1, size=dyn.ndx))
    fb = dyn.rollout(x1, U, X_ref=ref.X, K=K)
    u0 = np.clip(U[0] + K[0] @ dyn.state_difference(ref.X[0], x1), dyn.control_lower, dyn.control_upper)
    np.testing.assert_allclose(fb.U[0], u0)
    assert np.all(fb.U <= dyn.control_upper) and np.all(fb.U >= dyn.control_lower)


def test_state_arithmetic_round_trips(small_model, rng):
    dyn = MujocoDynamics(small_model, nthread=1)
    X0 = np.stack([small_state(small_model, rng) for _ in range(4)])
    dX = rng.normal(scale=0.3, size=(4, dyn.ndx))
    X1 = dyn.state_integrate(X0, dX)
    np.testing.assert_allclose(dyn.state_difference(X0, X1), dX, atol=1e-10)


@pytest.mark.parametrize("name", ["hopper", "acrobot", "humanoid"])
def test_state_arithmetic_equals_mujocos_per_row_calls(name, rng):
    """The batched path of hinge/slide-only models (hopper, acrobot) and the per-row path of
    quaternion models (humanoid) give exactly mj_differentiatePos / mj_integratePos."""
    model = load_model(name)
    dyn = MujocoDynamics(model, nthread=1)
    nq, nv = model.nq, model.nv
    X0 = np.tile(np.concatenate([model.qpos0, np.zeros(nv + model.na)]), (5, 1))
    dX = rng.normal(scale=0.3, size=(5, dyn.ndx))
    X1 = dyn.state_integrate(X0, dX)
    D = dyn.state_difference(X0, X1)
    for i in range(5):
        q = X0[i, :nq].copy()
        mujoco.mj_integratePos(model, q, dX[i, :nv], 1.0)
        np.testing.assert_array_equal(X1[i, :nq], q)
        dq = np.empty(nv)
        mujoco.mj_differentiatePos(model, dq, 1.0, X0[i, :nq], X1[i, :nq])
        np.testing.assert_array_equal(D[i, :nv], dq)
    np.testing.assert_array_equal(D[:, nv:], X1[:, nq:] - X0[:, nq:])
    np.testing.assert_array_equal(dyn.state_difference(X0[0], X1[0]), D[0])   # single rows


def test_divergent_rollout_is_reported_not_raised():
    model = mujoco.MjModel.from_xml_string(
        "<mujoco><option timestep='0.01'/><worldbody><body><joint name='j' type='slide'/>"
        "<geom size='.1' mass='1e-6'/></body></worldbody>"
        "<actuator><motor joint='j' gear='1e12'/></actuator></mujoco>")
    dyn = MujocoDynamics(model, nthread=1)
    r = dyn.rollout(np.zeros(dyn.nx), np.full((5, 1), 1e9))
    assert r.diverged and r.diverged_at is not None
    assert np.isnan(r.X[-1]).all()
    with pytest.raises(FloatingPointError, match="diverged"):
        dyn.step(np.zeros(dyn.nx), [1e9])


def test_smooth_contacts_copies_and_validates(small_model):
    soft = smooth_contacts(small_model, solref=[0.05, 1.0], solimp=[0.0, 0.95, 0.01, 0.5, 2.0],
                           timestep=0.02)
    np.testing.assert_allclose(soft.geom_solref, np.tile([0.05, 1.0], (small_model.ngeom, 1)))
    assert soft.geom_solimp[0, 0] == 0.0 and soft.opt.timestep == 0.02
    assert small_model.opt.timestep == 0.01 and small_model.geom_solimp[0, 0] != 0.0
    with pytest.raises(ParameterError, match="solimp"):
        smooth_contacts(small_model, solimp=[1.5, 0.95, 0.01, 0.5, 2.0])
    with pytest.raises(ShapeError, match="solref"):
        smooth_contacts(small_model, solref=[0.02])


def test_dynamics_bad_input(small_model):
    with pytest.raises(ParameterError, match="nthread"):
        MujocoDynamics(small_model, nthread=0)
    with pytest.raises(ParameterError, match="derivative_stride"):
        MujocoDynamics(small_model, derivative_stride=0)
    with pytest.raises(ParameterError, match="eps"):
        MujocoDynamics(small_model, eps=-1.0)
    dyn = MujocoDynamics(small_model, nthread=1)
    with pytest.raises(NonFiniteError, match="x0"):
        dyn.rollout(np.full(dyn.nx, np.nan), np.zeros((2, 2)))
    with pytest.raises(ShapeError, match="U"):
        dyn.rollout(np.zeros(dyn.nx), np.zeros((2, 3)))
    with pytest.raises(ParameterError, match="at least one step"):
        dyn.derivatives(np.zeros((1, dyn.nx)), np.zeros((0, 2)))


# --------------------------------------------------------------------------- box QP


def brute_force_box_qp(H, g, lo, hi):
    """Enumerate every (free / at lower / at upper) pattern; keep the best KKT-feasible one."""
    n = g.size
    best, best_val = None, np.inf
    for pattern in itertools.product((0, 1, 2), repeat=n):
        pattern = np.array(pattern)
        if np.any((pattern == 1) & ~np.isfinite(lo)) or np.any((pattern == 2) & ~np.isfinite(hi)):
            continue
        x = np.where(pattern == 1, lo, np.where(pattern == 2, hi, 0.0))
        f = pattern == 0
        if f.any():
            fixed = ~f
            x[f] = np.linalg.solve(H[np.ix_(f, f)], -(g[f] + H[np.ix_(f, fixed)] @ x[fixed]))
        if np.any(x < lo - 1e-12) or np.any(x > hi + 1e-12):
            continue
        val = 0.5 * x @ H @ x + g @ x
        if val < best_val:
            best, best_val = x, val
    return best, best_val


def test_box_qp_matches_enumeration(rng):
    for trial in range(60):
        n = int(rng.integers(1, 6))
        M = rng.normal(size=(n, n))
        H = M @ M.T + 0.1 * np.eye(n)
        g = rng.normal(scale=3.0, size=n)
        lo = -rng.uniform(0.1, 1.0, size=n)
        hi = rng.uniform(0.1, 1.0, size=n)
        lo[rng.random(n) < 0.2] = -np.inf
        hi[rng.random(n) < 0.2] = np.inf
        x0 = None if trial % 2 else rng.normal(size=n)
        res = solve_box_qp(H, g, lo, hi, x0)
        ref, ref_val = brute_force_box_qp(H, g, lo, hi)
        assert res.status.ok and res.status is not BoxQPStatus.MAX_ITERATIONS
        np.testing.assert_allclose(res.x, ref, atol=1e-7)
        assert res.value == pytest.approx(ref_val, abs=1e-10)
        # the free set: exactly the variables strictly inside the box at the solution
        inside = (res.x > lo + 1e-9) & (res.x < hi - 1e-9)
        np.testing.assert_array_equal(res.free, inside)
        if res.free.any():
            Hf = H[np.ix_(res.free, res.free)]
            np.testing.assert_allclose(res.chol @ res.chol.T, Hf, atol=1e-10)


def test_box_qp_indefinite_and_all_clamped():
    H = np.array([[1.0, 0.0], [0.0, -1.0]])
    res = solve_box_qp(H, np.zeros(2), -np.ones(2), np.ones(2))
    assert res.status is BoxQPStatus.NOT_POSITIVE_DEFINITE
    res = solve_box_qp(np.eye(2), np.array([10.0, -10.0]), -np.ones(2), np.ones(2))
    np.testing.assert_allclose(res.x, [-1.0, 1.0])
    assert not res.free.any() and res.chol is None


# --------------------------------------------------------------------------- LQR


def riccati(A, B, Q, R, Qf):
    """Time-varying discrete LQR: gains K_i with u_i = K_i x_i."""
    T = A.shape[0]
    P = Qf
    Ks = [None] * T
    for i in reversed(range(T)):
        K = -np.linalg.solve(R + B[i].T @ P @ B[i], B[i].T @ P @ A[i])
        P = Q + A[i].T @ P @ (A[i] + B[i] @ K)
        P = 0.5 * (P + P.T)
        Ks[i] = K
    return np.array(Ks)


def linear_problem(rng, n=4, m=2, T=25):
    A = np.eye(n) + 0.1 * rng.normal(size=(T, n, n))
    B = 0.2 * rng.normal(size=(T, n, m))
    Q = np.diag(rng.uniform(0.5, 2.0, size=n))
    R = np.diag(rng.uniform(0.1, 0.5, size=m))
    Qf = 10.0 * np.eye(n)
    return A, B, Q, R, Qf, rng.normal(size=n)


@pytest.mark.parametrize("settings", [ILQGSettings(), ILQGSettings.textbook()], ids=["improved", "textbook"])
def test_linear_quadratic_problem_is_solved_in_one_iteration(settings, rng):
    A, B, Q, R, Qf, x0 = linear_problem(rng)
    T, m = B.shape[0], B.shape[2]
    solver = ILQG(LinearDynamics(A, B), LinearQuadraticCost(Q, R, Qf), settings)
    res = solver.solve(x0, rng.normal(size=(T, m)))
    K = riccati(A, B, Q, R, Qf)
    x, U = x0.copy(), []
    for i in range(T):
        U.append(K[i] @ x)
        x = A[i] @ x + B[i] @ U[-1]
    assert res.status is ILQGStatus.CONVERGED
    assert res.log[0].accepted and res.log[0].alpha == 1.0
    assert sum(log.accepted for log in res.log) == 1      # one step reached the optimum
    np.testing.assert_allclose(res.U, np.array(U), atol=1e-9)
    np.testing.assert_allclose(res.K, K, atol=1e-9)
    np.testing.assert_allclose(res.k, 0.0, atol=1e-9)
    # the expected reduction of the step was exact for a quadratic problem
    log = res.log[0]
    assert log.cost - log.new_cost == pytest.approx(log.expected_reduction, rel=1e-9)


def test_state_regularization_keeps_feedback_when_mu_is_large(rng):
    """Eq. 10: as μ → ∞, state regularization keeps K ≠ 0 (it pins the next state) while
    control regularization (eq. 9) drives K → 0."""
    A, B, Q, R, Qf, x0 = linear_problem(rng, n=4, m=2, T=10)
    dyn, cost = LinearDynamics(A, B), LinearQuadraticCost(Q, R, Qf)
    U0 = np.zeros((10, 2))
    big = dict(mu_init=1e8, max_iterations=1)
    Ks = ILQG(dyn, cost, ILQGSettings(**big)).solve(x0, U0).K
    Kc = ILQG(dyn, cost, ILQGSettings(regularization="control", **big)).solve(x0, U0).K
    assert np.abs(Kc).max() < 1e-6
    # limit of the state-regularized gain: least-squares cancellation of A by B
    K_lim = -np.linalg.solve(B[3].T @ B[3], B[3].T @ A[3])
    np.testing.assert_allclose(Ks[3], K_lim, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("regularization", ["state", "control"])
def test_improved_value_update_predicts_the_reduction_exactly(regularization, rng):
    """Eq. 11 is the exact value of the regularized policy on an LQ problem, so the
    expected reduction ΔJ(1) equals the actual one for any μ; the standard update (eq. 7)
    cancels the regularized Q̃_uu against Q_uu and mispredicts."""
    A, B, Q, R, Qf, x0 = linear_problem(rng)
    T, m = B.shape[0], B.shape[2]
    dyn, cost = LinearDynamics(A, B), LinearQuadraticCost(Q, R, Qf)
    errors = {}
    for update in ("improved", "standard"):
        settings = ILQGSettings(mu_init=0.5, max_iterations=1, regularization=regularization,
                                value_update=update)
        log = ILQG(dyn, cost, settings).solve(x0, np.zeros((T, m))).log[0]
        assert log.accepted and log.alpha == 1.0 and log.mu == 0.5
        errors[update] = abs((log.cost - log.new_cost) / log.expected_reduction - 1.0)
    assert errors["improved"] < 1e-9
    assert errors["standard"] > 1e-3


def test_regularization_schedule_matches_the_seed():
    s = ILQGSettings()
    mu, delta = 0.0, 1.0
    seq = []
    for op in "iiiddddi":
        mu, delta = (increase_regularization if op == "i" else decrease_regularization)(mu, delta, s)
        seq.append((mu, delta))
    expected = [(1e-6, 2.0), (4e-6, 4.0), (3.2e-5, 8.0),            # Δ ← max(Δ₀, ΔΔ₀), μ ← max(μ_min, μΔ)
                (1.6e-5, 0.5), (4e-6, 0.25), (0.0, 0.125),           # Δ ← min(1/Δ₀, Δ/Δ₀), μ ← μΔ or 0
                (0.0, 0.0625), (1e-6, 2.0)]
    for (mu, delta), (mu_e, delta_e) in zip(seq, expected):
        assert mu == pytest.approx(mu_e, rel=1e-12, abs=0) and delta == pytest.approx(delta_e)


def test_many_decreases_do_not_underflow_delta():
    # an MPC loop decreases Δ at every accepted update; Δ = 0 would freeze μ at 0 for good
    s = ILQGSettings()
    mu, delta = 1.0, 1.0
    for _ in range(5000):
        mu, delta = decrease_regularization(mu, delta, s)
    assert delta > 0
    mu, delta = increase_regularization(mu, delta, s)
    assert mu == s.mu_min and delta == s.delta0


class _ConcaveControlCost(LinearQuadraticCost):
    """LQ cost with a *negative* control weight: Q_uu is indefinite where BᵀV'B is small."""

    def __init__(self, Q, Qf, m, weight):
        super().__init__(Q, np.zeros((m, m)), Qf)
        self.weight = weight

    def stage_values(self, X, U):
        l = super().stage_values(X, U)
        l[:-1] -= 0.5 * self.weight * np.sum(np.asarray(U) ** 2, axis=1)
        return l

    def evaluate(self, X, U):
        d = super().evaluate(X, U)
        return type(d)(self.stage_values(X, U), d.lx, d.lu - self.weight * np.asarray(U), d.lxx,
                       d.luu - self.weight * np.eye(self.nu), d.lux)


@pytest.mark.parametrize("settings", [ILQGSettings(), ILQGSettings.textbook()], ids=["improved", "textbook"])
def test_non_positive_definite_quu_restarts_the_backward_pass(settings, rng):
    A, B, Q, R, Qf, x0 = linear_problem(rng, n=3, m=2, T=15)
    dyn = LinearDynamics(A, B, control_lower=[-1, -1], control_upper=[1, 1])
    res = ILQG(dyn, _ConcaveControlCost(Q, Qf, 2, weight=0.05), settings).solve(x0, np.zeros((15, 2)))
    first = res.log[0]
    assert first.backward_restarts > 0 and first.mu > 0
    assert res.ok and res.cost < res.initial_cost
    assert np.all(np.abs(res.U) <= 1.0)


def test_time_limit_and_iteration_override(rng):
    A, B, Q, R, Qf, x0 = linear_problem(rng)
    T, m = B.shape[0], B.shape[2]
    solver = ILQG(LinearDynamics(A, B), LinearQuadraticCost(Q, R, Qf), ILQGSettings(time_limit=1e-9))
    res = solver.solve(x0, np.zeros((T, m)))
    assert res.status is ILQGStatus.TIME_LIMIT and res.iterations == 0 and res.log == () and res.ok
    np.testing.assert_allclose(res.U, 0.0)
    solver = ILQG(LinearDynamics(A, B), LinearQuadraticCost(Q, R, Qf), ILQGSettings(mu_init=1.0))
    res = solver.solve(x0, np.zeros((T, m)), max_iterations=1)
    assert res.status is ILQGStatus.MAX_ITERATIONS and res.iterations == 1 and len(res.log) == 1


def test_control_limited_lqr_matches_bounded_reference(rng):
    A, B, Q, R, Qf, x0 = linear_problem(rng, n=3, m=2, T=12)
    x0 = 3.0 * x0
    T, n, m = B.shape
    lo, hi = np.array([-0.4, -0.3]), np.array([0.4, 0.5])
    dyn = LinearDynamics(A, B, control_lower=lo, control_upper=hi)
    cost = LinearQuadraticCost(Q, R, Qf)
    res = ILQG(dyn, cost, ILQGSettings(tol_grad=1e-9, tol_cost=1e-14)).solve(x0, np.zeros((T, m)))
    assert res.ok and np.all(res.U >= lo - 1e-12) and np.all(res.U <= hi + 1e-12)
    at_bound = (np.isclose(res.U, lo) | np.isclose(res.U, hi))
    assert at_bound.sum() >= 3                                    # the limits are active
    # reference: minimize J(U) directly with L-BFGS-B under the same bounds
    def J(u_flat):
        U = u_flat.reshape(T, m)
        X = dyn.rollout(x0, U, lower=np.full(m, -np.inf), upper=np.full(m, np.inf)).X
        return cost.total(X, U)
    ref = minimize(J, np.zeros(T * m), method="L-BFGS-B", bounds=list(zip(np.tile(lo, T), np.tile(hi, T))),
                   options=dict(ftol=1e-15, gtol=1e-11, maxiter=5000))
    assert res.cost == pytest.approx(ref.fun, rel=1e-7)
    np.testing.assert_allclose(res.U, ref.x.reshape(T, m), atol=2e-4)
    # feedback only on free controls: clamped rows of K are zero
    assert np.all(res.K[at_bound] == 0.0)


# --------------------------------------------------------------------------- nonlinear (MuJoCo)


def acrobot_reach_problem(h=0.02, T=40):
    """Acrobot from hanging at rest to a bent equilibrium within T steps (smooth, nonlinear).

    The target (0.2, −0.839) rad puts the centre of mass under the unactuated shoulder
    (1.5 sin q1 = −0.5 sin(q1 + q2)); holding it takes 2.9 N·m at the elbow.
    """
    model = load_model("acrobot", timestep=h)
    target = np.array([0.2, -0.839])
    running = StageCost(model, [CostTerm(Control(model), Quadratic(), 0.1),
                                CostTerm(Qpos(model, target), Quadratic(), 1.0)])
    terminal = StageCost(model, [CostTerm(Qpos(model, target), Quadratic(), 50.0),
                                 CostTerm(Qvel(model), Quadratic(), 5.0)])
    return model, TrajectoryCost(running, terminal), pack_state(model, [0.0, 0.0]), T, target


@pytest.mark.parametrize("settings", [ILQGSettings(mu_init=0.1), ILQGSettings.textbook(mu_init=0.1)],
                         ids=["improved", "textbook"])
def test_both_variants_converge_on_a_nonlinear_problem(settings):
    model, cost, x0, T, target = acrobot_reach_problem()
    dyn = MujocoDynamics(model, nthread=2)
    res = ILQG(dyn, cost, settings).solve(x0, np.zeros((T, 1)))
    assert res.status is ILQGStatus.CONVERGED, res.status
    assert res.cost < 0.05 * res.initial_cost
    costs = [log.cost for log in res.log]
    assert all(b <= a for a, b in zip(costs, costs[1:]))            # monotone decrease
    assert res.log[0].mu > 0 and res.mu == 0.0               # μ was active, then released
    np.testing.assert_allclose(res.X[-1, :2], target, atol=0.05)
    assert np.all(np.abs(res.U) <= 5.0)
    # the plan is self-consistent: rolling out U reproduces X
    np.testing.assert_allclose(dyn.rollout(x0, res.U).X, res.X, atol=1e-10)
    assert res.cost == pytest.approx(cost.total(res.X, res.U))
    t = res.timing()
    assert t["derivatives"] > 0 and t["solve"] > 0 and t["line_search"] > 0
    assert t["total"] >= t["derivatives"] + t["solve"] + t["line_search"] - 1e-9
    assert res.iterations == len(res.log) and isinstance(res.log, tuple)


def test_improved_and_textbook_reach_the_same_optimum():
    model, cost, x0, T, _ = acrobot_reach_problem()
    dyn = MujocoDynamics(model, nthread=2)
    a = ILQG(dyn, cost, ILQGSettings(mu_init=1.0, tol_grad=1e-6)).solve(x0, np.zeros((T, 1)))
    b = ILQG(dyn, cost, ILQGSettings.textbook(mu_init=1.0, tol_grad=1e-6)).solve(x0, np.zeros((T, 1)))
    assert a.converged and b.converged
    assert a.cost == pytest.approx(b.cost, rel=1e-5)
    np.testing.assert_allclose(a.U, b.U, atol=1e-2)


def test_warm_start_after_convergence_is_nearly_optimal_after_one_iteration():
    model, cost, x0, T, _ = acrobot_reach_problem()
    dyn = MujocoDynamics(model, nthread=2)
    solver = ILQG(dyn, cost, ILQGSettings())
    first = solver.solve(x0, np.zeros((T, 1)))
    # the plant moved along the plan by 3 steps (plus a small disturbance)
    x_now = dyn.state_integrate(first.X[3], np.array([0.01, -0.01, 0.02, 0.0]))
    warm = solver.solve_from_warm_start(x_now, first, shift=3, max_iterations=1)
    cold_one = solver.solve(x_now, np.zeros((T, 1)), max_iterations=1)
    cold = solver.solve(x_now, np.zeros((T, 1)))
    assert warm.ok and warm.iterations == 1 == len(warm.log)
    assert warm.initial_cost < 0.1 * cold.initial_cost
    assert warm.cost == pytest.approx(cold.cost, rel=0.01)
    assert cold_one.cost > 2 * cold.cost
    # the warm start continued from the previous regularization state
    assert warm.log[0].mu == first.mu


def test_warm_start_after_a_solve_that_gave_up_restarts_the_regularization():
    """A solve that ended with μ beyond μ_max (or an overflowed schedule) does not hand its μ,
    Δ on: the next warm start begins at ``mu_init`` and Δ = 1 and improves the plan (before, a
    streak of failed MPC updates overflowed μ to inf and every later warm start was refused)."""
    import dataclasses

    model, cost, x0, T, _ = acrobot_reach_problem()
    dyn = MujocoDynamics(model, nthread=1)
    settings = ILQGSettings(mu_init=1e-3)
    solver = ILQG(dyn, cost, settings)
    first = solver.solve(x0, np.zeros((T, 1)), max_iterations=2)
    for mu, delta in ((math.inf, 1e300), (1e12, 4.0), (1e3, math.inf)):
        gave_up = dataclasses.replace(first, mu=mu, delta=delta, status=ILQGStatus.LINE_SEARCH_FAILED)
        warm = solver.solve_from_warm_start(first.X[1], gave_up, shift=1, max_iterations=1)
        assert warm.ok and warm.log[0].mu == pytest.approx(1e-3, rel=0, abs=1e-3)
        assert warm.log[0].accepted and math.isfinite(warm.mu) and math.isfinite(warm.delta)
    kept = solver.solve_from_warm_start(first.X[1], first, shift=1, max_iterations=1)
    assert kept.log[0].mu == first.mu                      # an ordinary plan keeps its μ


@pytest.mark.slow
def test_acrobot_swing_up_open_loop():
    """Swing the acrobot up from hanging at rest to balancing upright (key 'upright'),
    with the elbow torque limited to ±5 N·m (a third of what holding it level needs)."""
    h, T = 0.02, 200                                   # 4 s horizon
    model = load_model("acrobot", timestep=h)
    assert model.nu == 1 and np.allclose(model.actuator_ctrlrange, [[-5, 5]])
    upright = model.key("upright")
    tip_goal = np.array([0.0, 0.0, 4.2])
    elbow_goal = np.array([0.0, 0.0, 3.2])
    running = StageCost(model, [CostTerm(Control(model), Quadratic(), 0.01)])
    terminal = StageCost(model, [CostTerm(SitePosition(model, "tip", tip_goal), Quadratic(), 100.0),
                                 CostTerm(BodyPosition(model, "lower_arm", elbow_goal), Quadratic(), 100.0),
                                 CostTerm(Qvel(model), Quadratic(), 10.0)])
    dyn = MujocoDynamics(model)
    solver = ILQG(dyn, TrajectoryCost(running, terminal), ILQGSettings(max_iterations=150))
    rng = np.random.default_rng(0)
    x0 = pack_state(model, model.key("home").qpos)
    res = solver.solve(x0, rng.normal(scale=0.1, size=(T, 1)))
    assert res.ok
    # the open-loop plan, re-simulated, ends upright (angles modulo 2π) and nearly at rest
    X = dyn.rollout(x0, res.U).X
    err = np.mod(X[-1, :2] - upright.qpos + np.pi, 2 * np.pi) - np.pi
    assert np.abs(err).max() < 0.1, err
    assert np.abs(X[-1, 2:]).max() < 1.0
    data = mujoco.MjData(model)
    data.qpos[:] = X[-1, :2]
    mujoco.mj_kinematics(model, data)
    assert np.linalg.norm(data.site("tip").xpos - tip_goal) < 0.1
    assert np.all(np.abs(res.U) <= 5.0 + 1e-12)
    assert np.abs(res.U).max() > 4.9                    # the torque limit is actually used


# --------------------------------------------------------------------------- settings / bad input


def test_settings_validation():
    s = ILQGSettings()
    assert s.mu_min == 1e-6 and s.delta0 == 2.0 and s.regularization is Regularization.STATE
    assert s.value_update is ValueUpdate.IMPROVED
    t = ILQGSettings.textbook()
    assert t.regularization is Regularization.CONTROL and t.value_update is ValueUpdate.STANDARD
    assert ILQGSettings(regularization="control").regularization is Regularization.CONTROL
    bad = [dict(max_iterations=0), dict(c1=0.0), dict(c1=1.0), dict(mu_min=0.0), dict(delta0=1.0),
           dict(mu_max=1e-7), dict(line_search_steps=(0.5, 1.0)), dict(line_search_steps=()),
           dict(line_search_steps=(1.0, 0.0)), dict(regularization="diagonal"), dict(tol_cost=-1.0),
           dict(time_limit=0.0), dict(mu_init=float("nan"))]
    for kw in bad:
        with pytest.raises(ParameterError, match=next(iter(kw))):
            ILQGSettings(**kw)


def test_solver_bad_input(rng):
    A, B, Q, R, Qf, x0 = linear_problem(rng, T=5)
    dyn, cost = LinearDynamics(A, B), LinearQuadraticCost(Q, R, Qf)
    solver = ILQG(dyn, cost)
    with pytest.raises(NonFiniteError, match="x0"):
        solver.solve(np.array([np.nan, 0, 0, 0]), np.zeros((5, 2)))
    with pytest.raises(NonFiniteError, match="U_init"):
        solver.solve(x0, np.full((5, 2), np.inf))
    with pytest.raises(ShapeError, match="U_init"):
        solver.solve(x0, np.zeros((5, 3)))
    with pytest.raises(ParameterError, match="at least one step"):
        solver.solve(x0, np.zeros((0, 2)))
    with pytest.raises(ParameterError, match="lower > upper"):
        ILQG(dyn, cost, control_lower=[0.0, 1.0], control_upper=[1.0, 0.5])
    with pytest.raises(NonFiniteError, match="lower"):
        ILQG(dyn, cost, control_lower=[np.nan, 0.0])
    with pytest.raises(ParameterError, match="nu"):
        ILQG(dyn, LinearQuadraticCost(Q, np.eye(3), Qf))
    with pytest.raises(ParameterError, match="ILQGResult"):
        solver.solve_from_warm_start(x0, None)
    with pytest.raises(ParameterError, match="X_ref is required"):
        solver.solve(x0, np.zeros((5, 2)), K=np.zeros((5, 2, 4)))
    with pytest.raises(ShapeError, match="K"):
        solver.solve(x0, np.zeros((5, 2)), X_ref=np.zeros((6, 4)), K=np.zeros((5, 2)))


def test_planner_time_step_must_match_the_cost():
    model, cost, *_ = acrobot_reach_problem(h=0.02)
    coarse = MujocoDynamics(load_model("acrobot", timestep=0.04), nthread=1)
    with pytest.raises(ParameterError, match="time step"):
        ILQG(coarse, cost)


def test_diverging_planner_reports_status_without_nan_controls():
    model = mujoco.MjModel.from_xml_string(
        "<mujoco><option timestep='0.01'/><worldbody><body><joint name='j' type='slide'/>"
        "<geom size='.1' mass='1e-6'/></body></worldbody>"
        "<actuator><motor joint='j' gear='1e12'/></actuator></mujoco>")
    dyn = MujocoDynamics(model, nthread=1)
    cost = TrajectoryCost(StageCost(model, [CostTerm(Qvel(model))]))
    res = ILQG(dyn, cost).solve(np.zeros(dyn.nx), np.full((5, 1), 1e9))
    assert res.status is ILQGStatus.DIVERGED and not res.ok and not res.converged
    assert np.all(np.isfinite(res.U))
    with pytest.raises(ParameterError, match="DIVERGED"):
        ILQG(dyn, cost).solve_from_warm_start(np.zeros(dyn.nx), res)


def test_nan_cost_raises_naming_the_term():
    model, _, x0, T, _ = acrobot_reach_problem(T=5)
    broken = UserResidual(model, lambda m, d, x, u: np.array([np.nan if x[0] > 1e9 else 0.0, np.nan]), 2,
                          name="broken_term")
    cost = TrajectoryCost(StageCost(model, [CostTerm(broken)]))
    with pytest.raises(NonFiniteError, match="broken_term"):
        ILQG(MujocoDynamics(model, nthread=1), cost).solve(x0, np.zeros((T, 1)))


def test_result_helpers():
    model, cost, x0, T, _ = acrobot_reach_problem(T=10)
    dyn = MujocoDynamics(model, nthread=1)
    res = ILQG(dyn, cost, ILQGSettings(max_iterations=2)).solve(x0, np.zeros((T, 1)))
    assert isinstance(res, ILQGResult) and res.horizon == T
    assert res.K.shape == (T, 1, 4) and res.k.shape == (T, 1)
    dx = np.array([0.1, 0.0, 0.0, 0.2])
    np.testing.assert_allclose(res.control(2, dx), res.U[2] + res.K[2] @ dx)
    np.testing.assert_allclose(res.control(0), res.U[0])
    with pytest.raises(ParameterError, match="step index"):
        res.control(T)
    with pytest.raises(Exception):
        res.log[0].cost = 0.0                  # frozen log records
    assert res.status in (ILQGStatus.MAX_ITERATIONS, ILQGStatus.CONVERGED)


# --------------------------------------------------------------------------- compiled kernels


def test_box_qp_kernel_matches_the_python_reference(rng):
    """The numba box QP makes the reference's decisions: same x, free set, status, iterations, factor."""
    from contactopt.solvers.ilqg import kernels

    statuses = list(BoxQPStatus)
    active = 0
    for trial in range(200):
        n = int(rng.integers(1, 17))
        M = rng.normal(size=(n, n))
        H = M @ M.T + 0.05 * np.eye(n)
        g = rng.normal(scale=4.0, size=n)
        lo = -rng.uniform(0.05, 1.0, size=n)
        hi = rng.uniform(0.05, 1.0, size=n)
        lo[rng.random(n) < 0.15] = -np.inf
        hi[rng.random(n) < 0.15] = np.inf
        x0 = rng.normal(size=n) if trial % 3 else np.zeros(n)
        ref = solve_box_qp(H, g, lo, hi, x0)
        x, free, L, nfree, status, iters, value = kernels.box_qp_kernel(
            H, g, lo, hi, x0, 100, 1e-8, 1e-8, 0.6, 1e-22, 0.1)
        assert statuses[status] is ref.status
        assert iters == ref.iterations
        np.testing.assert_array_equal(free, ref.free)
        np.testing.assert_allclose(x, ref.x, rtol=0, atol=1e-10)
        assert value == pytest.approx(ref.value, rel=1e-12, abs=1e-12)
        if ref.chol is None:
            assert nfree == 0
        else:
            assert nfree == int(ref.free.sum())
            np.testing.assert_allclose(np.tril(L[:nfree, :nfree]), np.tril(ref.chol), atol=1e-10)
        active += int((~ref.free).any())
    assert active > 50  # most problems have active bounds
    x, free, L, nfree, status, iters, value = kernels.box_qp_kernel(
        np.diag([1.0, -1.0]), np.zeros(2), -np.ones(2), np.ones(2), np.zeros(2), 100, 1e-8, 1e-8, 0.6, 1e-22, 0.1)
    assert statuses[status] is BoxQPStatus.NOT_POSITIVE_DEFINITE


def _random_linearization(rng, T, n, m, state_reg):
    from contactopt.costs import CostDerivatives
    from contactopt.solvers.ilqg.solver import _Linearization

    A = np.eye(n) + 0.1 * rng.normal(size=(T, n, n))
    B = 0.3 * rng.normal(size=(T, n, m))
    Jx = rng.normal(size=(T + 1, n + 2, n))
    Ju = rng.normal(size=(T, m + 1, m))
    Jc = rng.normal(size=(T, 3, n))
    Jcu = rng.normal(size=(T, 3, m))
    lxx = np.swapaxes(Jx, 1, 2) @ Jx
    lxx[:T] += np.swapaxes(Jc, 1, 2) @ Jc
    luu = np.swapaxes(Ju, 1, 2) @ Ju + np.swapaxes(Jcu, 1, 2) @ Jcu
    lux = np.swapaxes(Jcu, 1, 2) @ Jc
    cd = CostDerivatives(np.zeros(T + 1), rng.normal(size=(T + 1, n)), rng.normal(scale=3.0, size=(T, m)),
                         lxx, luu, lux)
    return _Linearization(A, B, cd, state_reg)


@pytest.mark.parametrize("regularization", list(Regularization))
@pytest.mark.parametrize("value_update", list(ValueUpdate))
def test_compiled_backward_pass_equals_the_python_reference(regularization, value_update, rng):
    from contactopt.solvers.ilqg.solver import _backward_pass

    T, n, m = 30, 12, 6
    s = ILQGSettings(regularization=regularization, value_update=value_update)
    lin = _random_linearization(rng, T, n, m, regularization is Regularization.STATE)
    U = rng.uniform(-1.0, 1.0, size=(T, m))
    lo, hi = -np.ones(m), np.ones(m)
    lo[0] = -np.inf  # one half-bounded control
    k_warm = 0.2 * rng.normal(size=(T, m))
    clamped = 0
    for mu in (0.0, 1e-3, 2.0):
        for bounded in (True, False):
            dlo, dhi = (lo - U, hi - U) if bounded else (np.full((T, m), -np.inf), np.full((T, m), np.inf))
            ref = _backward_pass(lin, mu, s, dlo, dhi, bounded, k_warm, compiled=False)
            got = _backward_pass(lin, mu, s, dlo, dhi, bounded, k_warm)
            assert ref.ok and got.ok
            scale = np.abs(ref.K).max()
            np.testing.assert_allclose(got.k, ref.k, rtol=0, atol=1e-10 * max(1.0, np.abs(ref.k).max()))
            np.testing.assert_allclose(got.K, ref.K, rtol=0, atol=1e-10 * max(1.0, scale))
            assert got.dV1 == pytest.approx(ref.dV1, rel=1e-10)
            assert got.dV2 == pytest.approx(ref.dV2, rel=1e-10)
            if bounded:
                assert np.all(got.k >= dlo - 1e-12) and np.all(got.k <= dhi + 1e-12)
                clamped += int(np.sum(np.all(got.K == 0, axis=2)))
    assert clamped > 0  # the box QP ran and clamped some controls (zero gain rows)


@pytest.mark.parametrize("regularization", list(Regularization))
def test_compiled_backward_pass_reports_non_pd_quu_like_the_reference(regularization, rng):
    from contactopt.solvers.ilqg.solver import _backward_pass

    T, n, m = 10, 5, 3
    s = ILQGSettings(regularization=regularization)
    lin = _random_linearization(rng, T, n, m, regularization is Regularization.STATE)
    lin.lzz[6, n:, n:] -= 50.0 * np.eye(m)  # Q_uu of step 6 indefinite
    inf = np.full((T, m), np.inf)
    ref = _backward_pass(lin, 0.0, s, -inf, inf, False, np.zeros((T, m)), compiled=False)
    got = _backward_pass(lin, 0.0, s, -inf, inf, False, np.zeros((T, m)))
    assert not ref.ok and not got.ok
    assert got.failed_at == ref.failed_at == 6


@pytest.mark.parametrize("settings", [ILQGSettings(mu_init=0.1), ILQGSettings.textbook(mu_init=0.1)],
                         ids=["improved", "textbook"])
def test_solve_with_compiled_backward_pass_equals_reference_solve(settings, small_model, rng, monkeypatch):
    """A whole control-limited MuJoCo solve is unchanged (to roundoff) by the compiled backward pass."""
    import functools

    from contactopt.solvers.ilqg import solver as ilqg_module

    model = small_model
    cost = TrajectoryCost(StageCost(model, [CostTerm(Control(model), Quadratic(), 0.001),
                                            CostTerm(Qpos(model), Quadratic(), 50.0),
                                            CostTerm(Qvel(model), Quadratic(), 0.1)]))
    x0 = small_state(model, rng)
    U0 = np.zeros((20, model.nu))
    solver = ILQG(MujocoDynamics(model, nthread=1), cost, settings)
    got1 = solver.solve(x0, U0, max_iterations=1)
    got6 = solver.solve(x0, U0, max_iterations=6)
    monkeypatch.setattr(ilqg_module, "_backward_pass",
                        functools.partial(ilqg_module._backward_pass, compiled=False))
    ref1 = solver.solve(x0, U0, max_iterations=1)
    ref6 = solver.solve(x0, U0, max_iterations=6)
    # control limits are active: clamped controls (zero gain rows) already in the first pass
    assert np.all(ref1.K == 0, axis=2).any() and np.isclose(np.abs(ref6.U), [[2.0, 1.0]]).any()
    # one iteration: identical to roundoff
    np.testing.assert_allclose(got1.U, ref1.U, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got1.K, ref1.K, rtol=0, atol=1e-12 * max(1.0, np.abs(ref1.K).max()))
    assert got1.cost == pytest.approx(ref1.cost, rel=1e-13)
    # later iterations re-linearize by finite differences (eps = 1e-6), which amplifies the
    # 1e-15 differences to ~1e-7 in U; the decisions and the cost stay the same
    assert [l.alpha for l in got6.log] == [l.alpha for l in ref6.log]
    assert [l.backward_restarts for l in got6.log] == [l.backward_restarts for l in ref6.log]
    np.testing.assert_allclose(got6.U, ref6.U, rtol=0, atol=1e-5)
    assert got6.cost == pytest.approx(ref6.cost, rel=1e-9)


# --------------------------------------------------------------------------- compiled MuJoCo loops


@pytest.mark.skipif(not __import__("contactopt.native", fromlist=["NATIVE"]).NATIVE,
                    reason="compiled MuJoCo loops not available on this installation")
def test_compiled_rollout_and_derivatives_equal_python_loops_bit_for_bit(small_model, rng, monkeypatch):
    model = small_model
    T = 12
    U = rng.uniform(-1.5, 1.5, size=(T, model.nu))
    x0 = small_state(model, rng)
    K = rng.normal(scale=2.0, size=(T, model.nu, 2 * model.nv + model.na))
    lo, hi = np.array([-1.0, -0.5]), np.array([1.0, 0.7])
    runs = {}
    for native in (True, False):
        dyn = MujocoDynamics(model, nthread=3)
        dyn.native = native
        ref = dyn.rollout(x0, U)
        x1 = dyn.state_integrate(x0, rng.normal(scale=0.05, size=dyn.ndx)) if native else runs[True][1]
        fb = dyn.rollout(x1, U, X_ref=ref.X, K=K, lower=lo, upper=hi)
        bad = dyn.rollout(x0, np.full((T, model.nu), 1e12), lower=np.full(2, -np.inf),
                          upper=np.full(2, np.inf))
        derivs = [dyn.derivatives(fb.X, fb.U, nthread=n) for n in (1, 2, 3)]
        runs[native] = (ref, x1, fb, bad, derivs)
        dyn.close()
    (r1, _, f1, b1, d1), (r0, _, f0, b0, d0) = runs[True], runs[False]
    for a, b in ((r1, r0), (f1, f0), (b1, b0)):
        np.testing.assert_array_equal(a.X, b.X)
        np.testing.assert_array_equal(a.U, b.U)
        assert (a.diverged, a.diverged_at) == (b.diverged, b.diverged_at)
    assert np.any(f1.U == hi) or np.any(f1.U == lo)     # the clamp was exercised
    for (A, B) in d1 + d0:
        np.testing.assert_array_equal(A, d0[0][0])
        np.testing.assert_array_equal(B, d0[0][1])


def test_compiled_divergent_rollout_matches_python(monkeypatch):
    model = mujoco.MjModel.from_xml_string(
        "<mujoco><option timestep='0.01'/><worldbody><body><joint name='j' type='slide'/>"
        "<geom size='.1' mass='1e-6'/></body></worldbody>"
        "<actuator><motor joint='j' gear='1e12'/></actuator></mujoco>")
    out = []
    for native in (True, False):
        dyn = MujocoDynamics(model, nthread=1)
        dyn.native = native
        out.append(dyn.rollout(np.zeros(dyn.nx), np.full((5, 1), 1e9)))
    assert out[0].diverged and (out[0].diverged_at, out[0].diverged) == (out[1].diverged_at, out[1].diverged)
    np.testing.assert_array_equal(out[0].X, out[1].X)
    np.testing.assert_array_equal(out[0].U, out[1].U)


def test_warm_started_mpc_solves_equal_python_loops_bit_for_bit(small_model, rng, monkeypatch):
    """Whole warm-started solves (rollouts, finite differences, cost kinematics compiled; the total
    taken from the cost derivatives) give exactly the results of the Python loops."""
    model = small_model
    cost = TrajectoryCost(StageCost(model, [
        CostTerm(Control(model), Quadratic(), 0.01),
        CostTerm(CenterOfMass(model, target=[0.2, 0.0, 0.6]), Quadratic(), 5.0),
        CostTerm(BodyPosition(model, 1, axes="xz"), Quadratic(), 1.0),
        CostTerm(BodyPosition(model, 2, point="com"), Quadratic(), 1.0),
        CostTerm(Qvel(model), Quadratic(), 0.1)]))
    x0 = small_state(model, rng)
    settings = ILQGSettings(mu_init=1e-3, line_search_steps=(1.0, 0.5, 0.25, 0.1))

    def run(native):
        dyn = MujocoDynamics(model, nthread=2)
        dyn.native = native
        solver = ILQG(dyn, cost, settings)
        res = solver.solve(x0, np.zeros((15, model.nu)), max_iterations=5)
        out = [res]
        for _ in range(4):
            res = solver.solve_from_warm_start(res.X[1], res, shift=1.0, max_iterations=2)
            out.append(res)
        solver.dynamics.close()
        return out

    fast = run(True)
    import contactopt.costs.stage as costs_module

    monkeypatch.setattr(costs_module, "NATIVE_KINEMATICS", False)
    monkeypatch.setattr(TrajectoryCost, "total_is_evaluate_sum", False)
    ref = run(False)
    for a, b in zip(fast, ref):
        for name in ("X", "U", "K", "k"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert (a.cost, a.initial_cost, a.status, a.mu, a.delta) == (b.cost, b.initial_cost, b.status, b.mu, b.delta)
        assert [(l.cost, l.new_cost, l.alpha, l.mu, l.line_search_trials) for l in a.log] == \
               [(l.cost, l.new_cost, l.alpha, l.mu, l.line_search_trials) for l in b.log]


def test_total_from_cost_derivatives_is_exact(small_model, rng):
    model = small_model
    cost = TrajectoryCost(StageCost(model, [CostTerm(Control(model), Quadratic(), 0.3),
                                            CostTerm(Qvel(model), Quadratic(), 0.1)]))
    assert cost.total_is_evaluate_sum
    dyn = MujocoDynamics(model, nthread=1)
    U = rng.uniform(-1, 1, size=(7, model.nu))
    X = dyn.rollout(small_state(model, rng), U).X
    assert float(cost.evaluate(X, U).l.sum()) == cost.total(X, U)

    class Custom(TrajectoryCost):
        def total(self, X, U):
            return 2.0 * super().total(X, U)

    assert not Custom(cost.running).total_is_evaluate_sum
    lq = LinearQuadraticCost(np.eye(2), np.eye(1))
    assert lq.total_is_evaluate_sum
    Xl, Ul = rng.normal(size=(5, 2)), rng.normal(size=(4, 1))
    assert float(lq.evaluate(Xl, Ul).l.sum()) == lq.total(Xl, Ul)


def test_background_derivatives_equal_derivatives(small_model, rng):
    model = small_model
    T = 11
    U = rng.uniform(-1, 1, size=(T, model.nu))
    with MujocoDynamics(model, nthread=2, derivative_stride=2) as dyn:
        X = dyn.rollout(small_state(model, rng), U).X
        A, B = dyn.derivatives(X, U)
        A2, B2 = dyn.derivatives_async(X, U)()
        np.testing.assert_array_equal(A, A2)
        np.testing.assert_array_equal(B, B2)
        dyn.derivatives_async(X + 0.01, U)          # never collected: the next call waits for it
        A3, B3 = dyn.derivatives(X, U)
        np.testing.assert_array_equal(A, A3)
        np.testing.assert_array_equal(B, B3)
    # a solve stopped by its time limit before the first iteration collects the background work
    cost = TrajectoryCost(StageCost(model, [CostTerm(Control(model), Quadratic(), 0.1),
                                            CostTerm(Qvel(model), Quadratic(), 1.0)]))
    with MujocoDynamics(model, nthread=2) as dyn:
        res = ILQG(dyn, cost, ILQGSettings(time_limit=1e-9)).solve(small_state(model, rng), U)
        assert res.status is ILQGStatus.TIME_LIMIT and res.iterations == 0 and not res.log
        assert dyn._pending is None or all(f.done() for f in dyn._pending)


def test_compiled_rollout_clamps_like_numpy_signed_zeros_and_nan(monkeypatch):
    """The compiled clamp reproduces np.minimum(np.maximum(u, lo), hi) bit for bit, signed zeros included."""
    model = mujoco.MjModel.from_xml_string(
        "<mujoco><option timestep='0.01'/><worldbody><body><joint name='s' type='slide'/><geom size='.1'/>"
        "</body></worldbody><actuator>" + "<motor joint='s'/>" * 6 + "</actuator></mujoco>")
    U = np.array([[-0.0, 0.0, -0.0, 0.0, 0.5, -2.0], [0.0, -0.0, 3.0, -3.0, -0.0, 0.0]])
    lo = np.array([0.0, -0.0, -0.0, 0.0, -1.0, -1.0])
    hi = np.array([0.0, 0.0, -0.0, 1.0, 1.0, 1.0])
    out = []
    for native in (True, False):
        dyn = MujocoDynamics(model, nthread=1)
        dyn.native = native
        out.append(dyn.rollout(np.zeros(dyn.nx), U, lower=lo, upper=hi).U)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(np.signbit(out[0]), np.signbit(out[1]))
    np.testing.assert_array_equal(np.signbit(out[1]), np.signbit(np.minimum(np.maximum(U, lo), hi)))


def test_derivative_hint_with_the_true_jacobians_gives_the_full_solve(rng):
    """Rows taken from an exact hint make the first linearization (and so the whole solve) the
    same as differentiating every step; only the hinted rows are differentiated."""
    model = load_model("hopper", timestep=0.01)
    cost = TrajectoryCost(StageCost(model, [CostTerm(Qvel(model, [0.5], dofs=[0]), Quadratic(), 1.0),
                                            CostTerm(Control(model), Quadratic(), 0.1)]))
    dyn = MujocoDynamics(model, nthread=2)
    x0 = np.concatenate([model.key("home").qpos, np.zeros(model.nv)])
    U0 = rng.uniform(-0.3, 0.3, size=(30, model.nu))
    X0 = dyn.rollout(x0, U0).X
    A, B = dyn.derivatives(X0, U0)
    rows = np.arange(0, 30, 3)
    only = dyn.derivatives(X0, U0, rows=rows)
    np.testing.assert_array_equal(only[0][rows], A[rows])
    assert not only[0][np.setdiff1d(np.arange(30), rows)].any()    # the others left zero
    solver = ILQG(dyn, cost)
    full = solver.solve(x0, U0, max_iterations=3)
    hinted = solver.solve(x0, U0, max_iterations=3, derivative_hint=(A, B, rows))
    np.testing.assert_array_equal(full.U, hinted.U)
    assert full.cost == hinted.cost and full.fresh_rows.all() and hinted.fresh_rows.all()
    one = solver.solve(x0, U0, max_iterations=1, derivative_hint=(A, B, rows))
    assert np.array_equal(np.nonzero(one.fresh_rows)[0], rows)
    with pytest.raises(ParameterError, match="rows"):
        solver.solve(x0, U0, max_iterations=1, derivative_hint=(A, B, [0, 30]))
    with pytest.raises(ShapeError):
        solver.solve(x0, U0, max_iterations=1, derivative_hint=(A[:5], B, rows))
    dyn.close()
