"""Soft actuator limits of the IDTO problem (``IDTOProblem(actuator_limit_weight=...)``)."""

import copy
import math

import numpy as np
import pytest

from contactopt.errors import ParameterError
from contactopt.solvers.idto import IDTOProblem, IDTOSolver, IDTOSettings
from contactopt.model import load_model

from conftest import dense_fd_jacobian

LIMIT = 5.0  # the bundled acrobot's elbow: gear 1, ctrlrange ±5


def _acrobot(gear=1.0, forcerange=None):
    m = load_model("acrobot")
    if gear != 1.0 or forcerange is not None:
        m = copy.deepcopy(m)
        m.actuator_gear[0, 0] = gear
        if forcerange is not None:
            m.actuator_forcelimited[0] = 1
            m.actuator_forcerange[0] = forcerange
    return m


def _problem(m, T=6, h=0.05, **kw):
    args = dict(q_nom=np.array([0.4, -0.2]), Qq=1.0, Qv=0.1, R=[0.1, 0.1], Qf_q=10.0, Qf_v=1.0,
                unactuated_penalty=10.0)
    args.update(kw)
    return IDTOProblem(m, T, h, np.zeros(2), **args)


def _swing(T, amp=0.02, seed=1):
    """A trajectory with elbow accelerations that need torques on both sides of ±5 N·m."""
    rng = np.random.default_rng(seed)
    q = np.zeros((T + 1, 2))
    t = np.arange(1, T + 1)
    q[1:, 0] = 0.05 * t
    q[1:, 1] = amp * np.sin(1.7 * t) + rng.normal(scale=0.02, size=T)
    return q


@pytest.mark.parametrize("gear, forcerange, margin",
                         [(1.0, None, 0.0), (2.0, None, 0.1), (1.0, (-3.0, 4.0), 0.0)])
def test_limit_residuals_and_jacobian_match_finite_differences(gear, forcerange, margin):
    m = _acrobot(gear, forcerange)
    T, h, w = 6, 0.05, 40.0
    pr = _problem(m, T, h, actuator_limit_weight=w, actuator_limit_margin=margin)
    ref = _problem(m, T, h)
    assert pr.num_limit_rows == 1 and pr.m_tau == ref.m_tau + 1
    # the force range: gear·u = τ_elbow, gain 1 · ctrlrange ±5 (intersected with the force range)
    lo, hi = -LIMIT, LIMIT
    if forcerange is not None:
        lo, hi = max(lo, forcerange[0]), min(hi, forcerange[1])
    c, half = 0.5 * (lo + hi), 0.5 * (hi - lo) * (1 - margin)
    assert pr.actuator_force_lower[0] == pytest.approx(c - half)
    assert pr.actuator_force_upper[0] == pytest.approx(c + half)
    # a trajectory with steps inside, above and below the range, all away from the kinks
    for seed in range(50):
        q = _swing(T, 0.02, seed)
        tr = pr.trajectory(q)
        u = pr.actuator_forces(tr.tau)[:, 0]
        above, below = u > c + half, u < c - half
        inside = ~(above | below)
        if above.any() and below.any() and inside.any() and np.min(np.abs(np.abs(u - c) - half)) > 0.1:
            break
    else:
        pytest.fail("no test trajectory with steps on both sides of the limits")
    np.testing.assert_allclose(u, tr.tau[:, 1] / gear, rtol=1e-12)
    # residual: the old rows, then √(2hw)·excess per step
    r = pr.residuals(q)
    nv, mt = 2, pr.m_tau
    off = 2 * (T + 1) * nv
    rt = r[off:].reshape(T, mt)
    r_old = ref.residuals(q)
    np.testing.assert_array_equal(r[:off], r_old[:off])
    np.testing.assert_array_equal(rt[:, :ref.m_tau], r_old[off:].reshape(T, ref.m_tau))
    excess = np.maximum(u - (c + half), 0) - np.maximum((c - half) - u, 0)
    np.testing.assert_allclose(rt[:, -1], math.sqrt(2 * h * w) * excess, rtol=1e-12)
    np.testing.assert_allclose(pr.actuator_limit_excess(tr.tau)[:, 0], excess, rtol=1e-12)
    assert pr.cost(q) == pytest.approx(ref.cost(q) + h * w * np.sum(excess ** 2), rel=1e-12)
    # block Jacobian against central differences of the whole residual
    lin = pr.linearize(q)
    np.testing.assert_array_equal(lin.r, r)
    assert lin.Jtau.shape == (T, 3, mt, nv)
    Jb = pr.dense_jacobian(lin)
    Jfd = dense_fd_jacobian(pr, q)
    np.testing.assert_allclose(Jb, Jfd, atol=1e-5 * np.abs(Jfd).max())
    # the limit rows are nonzero exactly at the steps beyond the range
    Jl = np.abs(lin.Jtau[:, :, -1]).sum(axis=(1, 2))
    assert np.all(Jl[above | below] > 0) and np.all(Jl[~(above | below)] == 0)


def test_zero_weight_is_exactly_the_problem_without_limits():
    m = _acrobot()
    T = 6
    ref = _problem(m, T)
    q = _swing(T)
    for pr in (_problem(m, T, actuator_limit_weight=0.0), _problem(m, T, actuator_limit_weight=0.0,
                                                                     actuator_limit_margin=0.5)):
        assert pr.m_tau == ref.m_tau and pr.num_limit_rows == 0 and pr.num_residuals == ref.num_residuals
        np.testing.assert_array_equal(pr.residuals(q), ref.residuals(q))
        a, b = pr.linearize(q), ref.linearize(q)
        np.testing.assert_array_equal(a.r, b.r)
        np.testing.assert_array_equal(a.Jtau, b.Jtau)
        np.testing.assert_array_equal(a.Jq, b.Jq)
        np.testing.assert_array_equal(a.Jv, b.Jv)
    # the default solve is unchanged too
    opts = IDTOSettings(max_iterations=5, convergence=None)
    r1 = IDTOSolver(_problem(m, T, actuator_limit_weight=0.0), opts).solve(q)
    r0 = IDTOSolver(ref, opts).solve(q)
    np.testing.assert_array_equal(r1.q, r0.q)
    assert r1.cost == r0.cost


@pytest.mark.parametrize("penalize", [True, False])
def test_constrained_mode_keeps_limit_rows(penalize):
    m = _acrobot()
    T, h, w, wu = 6, 0.05, 40.0, 10.0
    pr = _problem(m, T, h, actuator_limit_weight=w, unactuated_penalty=wu, penalize_unactuated=penalize)
    q = _swing(T)
    tr = pr.trajectory(q)
    excess = pr.actuator_limit_excess(tr.tau)
    assert np.abs(excess).max() > 0.1
    solver = IDTOSolver(pr, IDTOSettings(underactuation="constrained"))
    lin = solver._cost_rows(pr.linearize(q))
    assert lin.Jtau.shape[2] == pr.nv + 1  # R rows + the elbow's limit row, no penalty rows
    full = pr.linearize(q)
    np.testing.assert_array_equal(lin.Jtau[:, :, :pr.nv], full.Jtau[:, :, :pr.nv])
    np.testing.assert_array_equal(lin.Jtau[:, :, -1], full.Jtau[:, :, -1])
    # the constrained cost: the full cost without the penalty term, with the limit term
    penalty = h * wu * np.sum((tr.tau @ pr.Z) ** 2) if penalize else 0.0
    cost, hval = solver._evaluate(q)
    assert cost == pytest.approx(pr.cost(q) - penalty, rel=1e-12)
    assert 0.5 * lin.r @ lin.r == pytest.approx(cost, rel=1e-12)
    no_lim = _problem(m, T, h, unactuated_penalty=wu, penalize_unactuated=penalize)
    cost0, _ = IDTOSolver(no_lim, IDTOSettings(underactuation="constrained"))._evaluate(q)
    assert cost == pytest.approx(cost0 + h * w * np.sum(excess ** 2), rel=1e-12)
    np.testing.assert_array_equal(hval, pr.unactuated_forces(tr.tau))
    # and a constrained solve runs on it (finite, cost decreases)
    res = solver.solve(q, max_iterations=10)
    assert np.isfinite(res.cost) and res.cost < cost


def test_parameter_validation():
    m = _acrobot()
    for bad in (-1.0, math.nan, math.inf, "x", None, True):
        with pytest.raises(ParameterError, match="actuator_limit_weight"):
            _problem(m, 3, actuator_limit_weight=bad)
    for bad in (-0.1, 1.0, 2.0, math.nan, "x"):
        with pytest.raises(ParameterError, match="actuator_limit_margin"):
            _problem(m, 3, actuator_limit_weight=1.0, actuator_limit_margin=bad)


def test_model_without_limits_gets_no_rows():
    m = copy.deepcopy(_acrobot())
    m.actuator_ctrllimited[0] = 0
    pr = _problem(m, 3, actuator_limit_weight=10.0)
    assert pr.num_limit_rows == 0 and pr.m_tau == _problem(m, 3).m_tau
    assert not np.isfinite(pr.actuator_force_upper[0])


def _swing_up(w):
    """Open-loop acrobot swing-up plan (2 s, terminal upright) with limit weight ``w``."""
    m = _acrobot()
    T, h = 40, 0.05
    pr = IDTOProblem(m, T, h, np.zeros(2), q_nom=np.array([math.pi, 0.0]), Qq=0.0, Qv=0.1, R=[0.1, 0.1],
                     Qf_q=100.0, Qf_v=10.0, unactuated_penalty=100.0, actuator_limit_weight=w)
    q0 = np.zeros((T + 1, 2))
    q0[:, 0] = np.linspace(0.0, 0.3, T + 1)
    res = IDTOSolver(pr, IDTOSettings(max_iterations=100)).solve(q0)
    return pr, res, pr.actuator_forces(res.tau)[:, 0]


def test_open_loop_swing_up_respects_limits():
    _, _, u0 = _swing_up(0.0)
    pr, res1, u1 = _swing_up(100.0)
    # without limits the plan needs three times the elbow's torque, a third of the time beyond 10 % over
    assert np.abs(u0).max() > 2.5 * LIMIT
    assert np.mean(np.abs(u0) > 1.1 * LIMIT) > 0.25
    # with limits: at most a few percent of the steps more than 10 % over, none 25 % over
    assert np.mean(np.abs(u1) > 1.1 * LIMIT) <= 0.05
    assert np.abs(u1).max() < 1.25 * LIMIT
    # and it still swings most of the way up
    assert res1.q[-1, 0] > 2.5
    assert pr.unactuated_violation(res1.tau) < 1.0
