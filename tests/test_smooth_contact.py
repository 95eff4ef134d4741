"""The iLQG paper's smooth diagonal contact model (contactopt.contact.smooth)."""

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt import ParameterError, ShapeError
from contactopt.contact.smooth import SmoothContactDynamics, SmoothContactModel, smax, smin
from contactopt.testing import finite_difference_jacobian

G = 9.81
R_BALL = 0.1

# a sphere that can only translate (no rolling), for the friction-stop test
_SLIDER_XML = """
<mujoco>
  <option timestep="{h}"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1" friction="{mu} 0.005 0.0001"/>
    <body pos="0 0 0.1">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="y" type="slide" axis="0 1 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <geom type="sphere" size="0.1" mass="1" friction="{mu} 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>
"""


def _ball(timestep):
    return contactopt.load_model("ball", timestep=timestep)


# --------------------------------------------------------------------------- smax / smin


def test_smax_smin_limits_and_bounds():
    x = np.linspace(-3, 3, 601)
    for beta in (1.0, 0.1, 1e-3, 1e-6):
        s = smax(x, beta)
        assert np.all(s > np.maximum(x, 0) - 1e-15)
        assert np.max(s - np.maximum(x, 0)) <= beta / 2 + 1e-15
        assert smax(0.0, beta) == pytest.approx(beta / 2)
        # the paper's smin(x, β) = β − smax(−x, β) → min(x, 0) as β → 0
        assert np.max(np.abs(smin(x, beta) - np.minimum(x, 0))) <= beta + 1e-12
    np.testing.assert_allclose(smax(x, 1e-9), np.maximum(x, 0), atol=1e-9)
    np.testing.assert_allclose(smin(x, 1e-9), np.minimum(x, 0), atol=1e-9)
    # smin approximates min(x, β) for x ≫ β
    assert smin(100.0, 1.0) == pytest.approx(1.0, abs=0.01)
    # no cancellation for very negative x: positive, ≈ β²/(4|x|)
    assert smax(-1e8, 1.0) == pytest.approx(0.25e-8, rel=1e-9)
    assert smax(-1e200, 1.0) >= 0


def test_smax_derivative_matches_finite_differences():
    beta = 0.3
    x = np.linspace(-2, 2, 41)
    analytic = 0.5 * (x / np.hypot(x, beta) + 1)
    eps = 1e-6
    fd = (smax(x + eps, beta) - smax(x - eps, beta)) / (2 * eps)
    np.testing.assert_allclose(fd, analytic, atol=1e-8)
    assert np.all((fd > 0) & (fd < 1))
    fd_min = (smin(x + eps, beta) - smin(x - eps, beta)) / (2 * eps)
    np.testing.assert_allclose(fd_min, 0.5 * (1 - x / np.hypot(x, beta)), atol=1e-8)
    # second derivative continuous (C∞): compare two step sizes
    d2a = (smax(x + 1e-3, beta) - 2 * smax(x, beta) + smax(x - 1e-3, beta)) / 1e-6
    np.testing.assert_allclose(d2a, 0.5 * beta**2 / np.hypot(x, beta) ** 3, rtol=1e-4)


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("kwargs", [
    dict(eta=0.0), dict(eta=1.5), dict(eta=-0.1), dict(beta=0.0), dict(beta=-1.0),
    dict(beta=float("nan")), dict(friction_sharpness=0.5), dict(friction_scale=-1.0),
    dict(w_max=0.0), dict(w_max=float("inf")), dict(fade=0.0), dict(fade=1.5),
    dict(eta="0.5"), dict(beta=None), dict(eta=True),
])
def test_bad_parameters_raise(kwargs):
    with pytest.raises(ParameterError):
        SmoothContactModel(**kwargs)


def test_bad_dynamics_arguments_raise():
    model = _ball(0.01)
    with pytest.raises(ParameterError):
        SmoothContactDynamics("ball")
    with pytest.raises(ParameterError):
        SmoothContactDynamics(model, contact_model={"eta": 0.5})
    dyn = SmoothContactDynamics(model)
    with pytest.raises(ShapeError):
        dyn.step(np.zeros(6), np.zeros(6))
    with pytest.raises(ShapeError):
        dyn.rollout_batch(model.qpos0, np.zeros(6), np.zeros((5, 2)))
    with pytest.raises(ValueError):
        dyn.step(model.qpos0, np.full(6, np.nan))
    m = SmoothContactModel()
    assert (m.eta, m.beta, m.w_max) == (0.7, 0.01, 0.1)
    with pytest.raises(Exception):
        m.eta = 0.5  # frozen


# --------------------------------------------------------------------------- no contact = MuJoCo Euler


@pytest.mark.parametrize("name", ["ball", "humanoid"])
def test_no_contact_step_equals_mujoco_euler(name, rng):
    model = contactopt.load_model(name, timestep=0.005)
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT) | int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
    dyn = SmoothContactDynamics(model)
    data = mujoco.MjData(model)
    for _ in range(3):
        mujoco.mj_resetData(model, data)
        data.qvel[:] = rng.normal(scale=0.5, size=model.nv)
        data.ctrl[:] = rng.uniform(-1, 1, model.nu)
        qpos, qvel, ctrl = data.qpos.copy(), data.qvel.copy(), data.ctrl.copy()
        q1, v1, imp = dyn.step(qpos, qvel, ctrl)
        assert imp.f.size == 0
        mujoco.mj_step(model, data)
        np.testing.assert_allclose(v1, data.qvel, atol=1e-10, rtol=0)
        np.testing.assert_allclose(q1, data.qpos, atol=1e-10, rtol=0)


def test_ball_in_the_air_is_free_fall_and_step_data_matches_step():
    model = _ball(0.01)
    dyn = SmoothContactDynamics(model)
    q = np.array([0, 0, 1.1, 1, 0, 0, 0.0])
    q1, v1, imp = dyn.step(q, np.zeros(6), np.zeros(3))
    assert imp.space.n_contacts == 0
    np.testing.assert_allclose(v1, [0, 0, -G * 0.01, 0, 0, 0], atol=1e-12)
    data = mujoco.MjData(model)
    data.qpos[:] = q
    data.qpos[2] = 0.105  # in contact range: compare both entry points with contact
    data.qvel[2] = -1.0
    ref = dyn.step(data.qpos.copy(), data.qvel.copy(), data.ctrl.copy())
    imp2 = dyn.step_data(data)
    np.testing.assert_array_equal(data.qpos, ref.qpos)
    np.testing.assert_array_equal(data.qvel, ref.qvel)
    np.testing.assert_array_equal(imp2.f, ref.impulse.f)
    assert data.time == pytest.approx(0.01)
    # eq. 17 for a 1 kg ball: λ ≈ η (|v_free| − φ/h) m  (smax ≈ identity far from 0)
    assert ref.impulse.normal[0] == pytest.approx(0.7 * (1.0 + G * 0.01 - 0.005 / 0.01), rel=1e-3)


# --------------------------------------------------------------------------- physics


@pytest.mark.parametrize("h", [0.001, 0.01])
def test_ball_drop_comes_to_rest_near_surface(h):
    model = _ball(h)
    dyn = SmoothContactDynamics(model)
    T = int(1.5 / h)
    r = dyn.rollout_batch([0, 0, 1.1, 1, 0, 0, 0], np.zeros(6), np.zeros((T, 3)))
    gap = r.qpos[:, 2] - R_BALL
    v_impact = np.sqrt(2 * G * 1.0)
    # penetration stays within ~ a fraction of one step's travel at impact speed
    assert gap.min() > -0.35 * v_impact * h - 1e-4
    hit = int(np.argmax(gap < 0.0))
    assert r.qvel[hit:, 2].max() < 0.2 * v_impact  # bounces little (restitution < 0.2)
    # at rest near the surface; equilibrium penetration ≈ (1/η − 1) g h² (see module docstring)
    assert abs(r.qvel[-1, 2]) < 1e-6
    assert abs(gap[-1]) < 2 * (1 / 0.7 - 1) * G * h**2 + 1e-6
    np.testing.assert_allclose(r.normal[-1], G * h, rtol=1e-4)  # impulse balances gravity
    np.testing.assert_allclose(r.qpos[-1, :2], 0, atol=1e-9)


@pytest.mark.parametrize("mu", [0.5, 1.0])
def test_sliding_point_mass_decelerates_at_mu_g_and_stops(mu):
    h = 0.005
    model = mujoco.MjModel.from_xml_string(_SLIDER_XML.format(h=h, mu=mu))
    dyn = SmoothContactDynamics(model)
    v0 = 1.5
    T = int(0.6 / h)
    r = dyn.rollout_batch([0, 0, 0], [v0, 0, 0], np.zeros((T, 0)))
    vx = r.qvel[:, 0]
    t_stop = v0 / (mu * G)
    k = int(0.5 * t_stop / h)
    decel = (vx[1] - vx[k]) / ((k - 1) * h)
    assert decel == pytest.approx(mu * G, rel=0.03)
    assert np.all(np.diff(vx) <= 1e-12)  # monotone, never reverses
    assert abs(vx[-1]) < 1e-6 and abs(vx[int(1.2 * t_stop / h)]) < 0.02
    stop_dist = v0**2 / (2 * mu * G)
    assert r.qpos[-1, 0] == pytest.approx(stop_dist, rel=0.05)


def test_sliding_ball_decelerates_then_rolls():
    """The free ball slides at μg until the contact point sticks, then rolls at 5/7 v0."""
    h = 0.002
    model = _ball(h)
    dyn = SmoothContactDynamics(model)
    v0 = 2.0
    r = dyn.rollout_batch([0, 0, 0.1, 1, 0, 0, 0], [v0, 0, 0, 0, 0, 0], np.zeros((int(0.5 / h), 3)))
    vx, wy = r.qvel[:, 0], r.qvel[:, 4]
    k = int(0.02 / h)  # sliding lasts 2 v0 / (7 μ g) ≈ 58 ms
    assert (vx[1] - vx[k]) / ((k - 1) * h) == pytest.approx(G, rel=0.03)
    # velocity of the contact point (midway into the ~1e-5 m penetration) → 0: rolling without slip
    gap = r.qpos[:, 2] - R_BALL
    slip = vx - wy * (R_BALL + gap / 2)
    assert abs(slip[-1]) < 1e-6 and abs(vx[-1] - R_BALL * wy[-1]) < 1e-3
    assert vx[-1] == pytest.approx(5 / 7 * v0, rel=0.01)


def test_frictionless_scale_keeps_sliding():
    model = _ball(0.01)
    dyn = SmoothContactDynamics(model, SmoothContactModel(friction_scale=0.0))
    r = dyn.rollout_batch([0, 0, 0.1, 1, 0, 0, 0], [1.0, 0, 0, 0, 0, 0], np.zeros((50, 3)))
    np.testing.assert_allclose(r.qvel[:, 0], 1.0, atol=1e-12)


# --------------------------------------------------------------------------- smoothness


def _fd_jacobian(dyn, model, q, v, eps):
    """Central-difference Jacobian of the next state (q_next[:3], v_next) w.r.t. (qpos[:3], qvel)."""
    def f(x):
        qq = q.copy()
        qq[:3] = x[:3]
        q1, v1, _ = dyn.step(qq, x[3:], np.zeros(model.nu))
        return np.concatenate([q1[:3], v1])
    return finite_difference_jacobian(f, np.concatenate([q[:3], v]), eps=eps)


def test_step_is_smooth_across_contact_onset():
    """FD Jacobians with eps and eps/10 agree everywhere from free flight through contact
    activation (w_max), the fade region, touchdown and penetration, and vary continuously."""
    h = 0.01
    model = _ball(h)
    cm = SmoothContactModel()
    dyn = SmoothContactDynamics(model, cm)
    eps = 1e-5
    gaps = np.concatenate([
        np.linspace(-0.01, 0.12, 27),                    # penetration .. beyond w_max
        [cm.w_max - 1e-6, cm.w_max + 1e-6, 0.05 - 1e-6, 0.05 + 1e-6, 0.0, 1e-7],  # activation, fade start, touch
    ])
    jacs = []
    for gap in np.sort(gaps):
        q = np.array([0, 0, R_BALL + gap, 1, 0, 0, 0])
        v = np.array([0.3, -0.2, -1.0, 0.5, 0.2, -0.1])
        J1 = _fd_jacobian(dyn, model, q, v, eps)
        J2 = _fd_jacobian(dyn, model, q, v, eps / 10)
        assert np.all(np.isfinite(J1)) and np.abs(J1).max() < 1e3
        np.testing.assert_allclose(J2, J1, atol=1e-4 * max(1.0, np.abs(J1).max()))
        jacs.append(J1)
    # continuity: neighbours 1e-6 apart have nearly the same Jacobian
    gs = np.sort(gaps)
    for i in range(len(gs) - 1):
        if gs[i + 1] - gs[i] < 1e-5:
            np.testing.assert_allclose(jacs[i + 1], jacs[i], atol=1e-3 * max(1.0, np.abs(jacs[i]).max()))
    # and the contact really acts over the range: d(vz')/d(z) is nonzero in contact, zero far away
    dz = np.array([J[5, 2] for J in jacs])
    assert np.abs(dz[gs < 0.0]).min() > 1.0 and np.allclose(dz[gs > cm.w_max], 0.0, atol=1e-8)


def test_batched_rollout_matches_single():
    model = _ball(0.01)
    dyn = SmoothContactDynamics(model)
    q0 = np.array([[0, 0, 0.3, 1, 0, 0, 0], [0, 0, 0.1, 1, 0, 0, 0]], float)
    v0 = np.array([[0, 0, -1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], float)
    U = np.random.default_rng(0).uniform(-5, 5, (2, 20, 3))
    rb = dyn.rollout_batch(q0, v0, U)
    assert rb.qpos.shape == (2, 21, 7) and rb.qvel.shape == (2, 21, 6) and rb.normal.shape == (2, 20)
    for k in range(2):
        rs = dyn.rollout_batch(q0[k], v0[k], U[k])
        np.testing.assert_array_equal(rs.qpos, rb.qpos[k])
        np.testing.assert_array_equal(rs.qvel, rb.qvel[k])
