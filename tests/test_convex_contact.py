"""The convex invertible contact model in contact space: consistency, structure, bad input."""

import numpy as np
import pytest

from contactopt import NonFiniteError, ParameterError, ShapeError
from contactopt.contact import ContactBatch, ContactStatus, ConvexContactModel, velocity_barrier
from contactopt.contact import _convex_kernels as K


def random_problem(rng, nc, nl, mu_zero_fraction=0.1):
    """SPD A, friction (some frictionless), v_min and an isotropic-per-contact R."""
    n = nl + 3 * nc
    G = rng.normal(size=(n, n + 3))
    A = G @ G.T / n + 0.05 * np.eye(n)
    mu = rng.uniform(0.2, 1.2, nc)
    mu[rng.random(nc) < mu_zero_fraction] = 0.0
    v_min = rng.normal(scale=0.1, size=nl + nc)
    R = np.concatenate([rng.uniform(0.01, 1.0, nl), np.repeat(rng.uniform(0.01, 1.0, nc), 3)])
    return A, mu, v_min, R


def forward_cost(model, A, c, R, mu, v_min, nl, nc, f):
    Af = np.empty(len(f))
    return K._forward_objective(A, c, R, f, mu, v_min, nl, nc, model.kappa, model.q, Af)


def test_forward_then_inverse_recovers_c():
    """Paper section IV check, forward direction: 200 random problems, 1–20 contacts, ± limits."""
    rng = np.random.default_rng(7)
    model = ConvexContactModel()
    worst = 0.0
    for _ in range(200):
        nc, nl = int(rng.integers(1, 21)), int(rng.integers(0, 4))
        A, mu, v_min, R = random_problem(rng, nc, nl)
        c = rng.normal(size=nl + 3 * nc)  # mixes approaching (infeasible-free) and separating contacts
        fw = model.forward(A, c, friction=mu, v_min=v_min, R=R, n_limits=nl)
        assert fw.status == ContactStatus.CONVERGED
        inv = model.inverse(A, fw.v, friction=mu, v_min=v_min, R=R, n_limits=nl)
        assert inv.status == ContactStatus.CONVERGED
        worst = max(worst, np.abs(inv.c - c).max() / max(1.0, np.abs(c).max()))
        np.testing.assert_allclose(inv.f, fw.f, atol=1e-7 * max(1.0, np.abs(fw.f).max()))
    assert worst <= 1e-8


def test_inverse_then_forward_recovers_v():
    """Paper section IV check, inverse direction: arbitrary v (often infeasible: normal velocity
    below v_min, so the elastic mode gives large sliding impulses on the cone boundary)."""
    rng = np.random.default_rng(8)
    model = ConvexContactModel()
    for _ in range(200):
        nc, nl = int(rng.integers(1, 21)), int(rng.integers(0, 4))
        A, mu, v_min, R = random_problem(rng, nc, nl)
        v = rng.normal(scale=0.1, size=nl + 3 * nc)
        inv = model.inverse(A, v, friction=mu, v_min=v_min, R=R, n_limits=nl)
        assert inv.status == ContactStatus.CONVERGED
        fw = model.forward(A, inv.c, friction=mu, v_min=v_min, R=R, n_limits=nl)
        assert fw.status == ContactStatus.CONVERGED
        assert np.abs(fw.v - v).max() <= 1e-8 * max(1.0, np.abs(v).max())


def test_inverse_solution_is_stationary_for_the_forward_cost():
    """The inverse's f minimizes the forward cost for c = v − A f (finite-difference gradient ≈ 0),
    including v below v_min (elastic mode) and sliding contacts on the cone boundary."""
    rng = np.random.default_rng(9)
    model = ConvexContactModel()
    for _ in range(30):
        nc, nl = int(rng.integers(1, 8)), int(rng.integers(0, 3))
        A, mu, v_min, R = random_problem(rng, nc, nl, mu_zero_fraction=0.0)
        v = rng.normal(scale=0.1, size=nl + 3 * nc)
        inv = model.inverse(A, v, friction=mu, v_min=v_min, R=R, n_limits=nl)
        assert inv.converged
        f = inv.f
        base = forward_cost(model, A, inv.c, R, mu, v_min, nl, nc, f)
        # a feasible perturbation in any direction must not decrease the cost (to second order)
        for _ in range(5):
            d = rng.normal(size=f.shape) * 1e-7 * max(1.0, np.abs(f).max())
            plus = forward_cost(model, A, inv.c, R, mu, v_min, nl, nc, f + d)
            minus = forward_cost(model, A, inv.c, R, mu, v_min, nl, nc, f - d)
            if np.isfinite(plus) and np.isfinite(minus):
                slope = (plus - minus) / 2.0
                assert abs(slope) <= 1e-6 * (abs(base) + 1.0)


def test_batch_matches_single_problems_and_parallel_matches_serial():
    rng = np.random.default_rng(10)
    model = ConvexContactModel()
    problems = [random_problem(rng, int(rng.integers(1, 12)), int(rng.integers(0, 3))) for _ in range(25)]
    nls = [len(vm) - len(mu) for (_, mu, vm, _) in problems]
    batch = ContactBatch([p[0] for p in problems], friction=[p[1] for p in problems],
                         v_min=[p[2] for p in problems], R=[p[3] for p in problems], n_limits=nls)
    c = rng.normal(size=batch.size)
    serial = model.forward_batch(batch, c)
    parallel = model.forward_batch(batch, c, parallel=True)
    np.testing.assert_array_equal(serial.f, parallel.f)
    for p, (A, mu, vm, R) in enumerate(problems):
        s, e = batch.offsets[p], batch.offsets[p + 1]
        single = model.forward(A, c[s:e], friction=mu, v_min=vm, R=R, n_limits=nls[p])
        np.testing.assert_allclose(single.f, serial.f[s:e], rtol=1e-12, atol=1e-14)
    inv = model.inverse_batch(batch, serial.v)
    inv_par = model.inverse_batch(batch, serial.v, parallel=True)
    np.testing.assert_array_equal(inv.f, inv_par.f)
    assert inv.all_converged
    np.testing.assert_allclose(inv.c, c, atol=1e-8 * np.abs(c).max())


def test_warm_start_converges_faster():
    rng = np.random.default_rng(11)
    model = ConvexContactModel()
    A, mu, vm, R = random_problem(rng, 10, 2, mu_zero_fraction=0.0)
    c = rng.normal(size=32)
    cold = model.forward(A, c, friction=mu, v_min=vm, R=R, n_limits=2)
    warm = model.forward(A, c + 1e-6, friction=mu, v_min=vm, R=R, n_limits=2, f_init=cold.f)
    assert warm.converged and warm.iterations < cold.iterations


def test_velocity_barrier_is_c2_at_s0():
    kappa, q = 0.1, 10.0
    s0 = kappa / q
    val, d1, d2 = velocity_barrier(np.array([s0 - 1e-9, s0 + 1e-9]), kappa, q)
    np.testing.assert_allclose(val[0], val[1], atol=1e-8)
    np.testing.assert_allclose(d1, [-q, -q], rtol=1e-6)
    np.testing.assert_allclose(d2, [q * q / kappa] * 2, rtol=1e-6)
    s = np.linspace(-1, 1, 41)
    v, g, h = velocity_barrier(s, kappa, q)
    eps = 1e-6
    vp, gp, _ = velocity_barrier(s + eps, kappa, q)
    vm, gm, _ = velocity_barrier(s - eps, kappa, q)
    np.testing.assert_allclose((vp - vm) / (2 * eps), g, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((gp - gm) / (2 * eps), h, rtol=1e-4, atol=1e-4)
    assert np.isfinite(v).all()  # defined for every s, also s ≤ 0 (elastic mode)


def test_regularizer_schedules():
    lin = ConvexContactModel()
    exp = ConvexContactModel(schedule="exponential")
    w = np.array([-0.05, 0.0, 0.05, 0.1, 0.3])
    np.testing.assert_allclose(lin.regularizer_for_distance(w), [0.01, 0.01, 50.005, 100.0, 100.0])
    np.testing.assert_allclose(exp.regularizer_for_distance(w), [0.01, 0.01, 1.0, 100.0, 100.0])
    R = lin.regularizer([0.0, 0.1, 0.05], n_limits=1)
    np.testing.assert_allclose(R, [0.01, 100, 100, 100, 50.005, 50.005, 50.005])


@pytest.mark.parametrize("kwargs, words", [
    ({"kappa": 0.0}, "kappa must be positive"),
    ({"q": -1.0}, "q must be positive"),
    ({"r_min": 2.0, "r_max": 1.0}, "r_min"),
    ({"w_max": float("nan")}, "w_max must be finite"),
    ({"schedule": "cubic"}, "schedule"),
    ({"max_iter": 0}, "max_iter"),
])
def test_bad_parameters(kwargs, words):
    with pytest.raises((ParameterError, NonFiniteError), match=words):
        ConvexContactModel(**kwargs)


def test_bad_problem_input():
    model = ConvexContactModel()
    rng = np.random.default_rng(12)
    A, mu, vm, R = random_problem(rng, 2, 1, mu_zero_fraction=0.0)
    ok = dict(friction=mu, v_min=vm, R=R, n_limits=1)
    c = np.zeros(7)
    bad = A.copy()
    bad[0, 1] += 1.0
    with pytest.raises(ParameterError, match=r"A\[0\]: not symmetric"):
        model.forward(bad, c, **ok)
    with pytest.raises(ParameterError, match=r"A\[0\]: not positive semidefinite"):
        model.forward(A - 10 * np.eye(7), c, **ok)
    # a singular PSD A (more contact rows than degrees of freedom) is valid: A + R is SPD
    G = rng.normal(size=(7, 4))
    singular = model.forward(G @ G.T, c, **ok)
    assert singular.converged
    with pytest.raises(ShapeError, match=r"c: expected shape \(7,\)"):
        model.forward(A, np.zeros(6), **ok)
    with pytest.raises(ShapeError, match=r"A\[0\]: size 7 is not n_limits \(0\)"):
        model.forward(A, c, friction=mu, v_min=vm, R=R, n_limits=0)
    with pytest.raises(NonFiniteError, match="v"):
        model.inverse(A, np.full(7, np.nan), **ok)
    with pytest.raises(ParameterError, match="friction.*non-negative"):
        model.forward(A, c, friction=-mu, v_min=vm, R=R, n_limits=1)
    with pytest.raises(ParameterError, match="R.*positive"):
        model.forward(A, c, friction=mu, v_min=vm, R=-R, n_limits=1)
    with pytest.raises(ShapeError, match="v_min"):
        model.forward(A, c, friction=mu, v_min=vm[:-1], R=R, n_limits=1)
