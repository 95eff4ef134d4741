"""Convex contact model in generalized coordinates: forward/inverse dynamics, v_min, simulation,
and the formulation check against an exact conic solver."""

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt import ParameterError, ShapeError
from contactopt.contact import ContactStatus, ConvexContactModel
from contactopt.contact.convex_dynamics import ConvexDynamics
from contactopt.simulate import simulate


def _humanoid(keyframe, timestep=0.01):
    model = contactopt.load_model("humanoid", timestep=timestep)
    data = mujoco.MjData(model)
    contactopt.reset_to_keyframe(model, data, keyframe)
    return model, data


@pytest.mark.parametrize("keyframe", ["lying", "home"])
def test_inverse_recovers_applied_force_of_forward(keyframe, rng):
    """forward(q, w, u) = w⁺ then inverse(q, w, w⁺) = u: u from actuators, qfrc_applied and xfrc_applied."""
    model, data = _humanoid(keyframe)
    dyn = ConvexDynamics(model)
    ref = mujoco.MjData(model)
    for _ in range(4):
        qvel = rng.normal(scale=0.3, size=model.nv)
        ctrl = rng.uniform(-1, 1, model.nu)
        applied = rng.normal(scale=5.0, size=model.nv)
        xfrc = np.zeros((model.nbody, 6))
        xfrc[model.body("torso").id] = rng.normal(scale=20.0, size=6)
        fw = dyn.forward(data.qpos, qvel, ctrl=ctrl, qfrc_applied=applied, xfrc_applied=xfrc)
        assert fw.status == ContactStatus.CONVERGED and fw.problem.space.n_contacts >= 2
        inv = dyn.inverse(data.qpos, qvel, fw.qvel)
        assert inv.status == ContactStatus.CONVERGED
        # the generalized force MuJoCo applies for those inputs
        ref.qpos[:], ref.qvel[:], ref.ctrl[:] = data.qpos, qvel, ctrl
        ref.qfrc_applied[:], ref.xfrc_applied[:] = applied, xfrc
        mujoco.mj_forward(model, ref)
        u = ref.qfrc_actuator + applied
        mujoco.mj_applyFT(model, ref, xfrc[model.body("torso").id, :3], xfrc[model.body("torso").id, 3:],
                          ref.xipos[model.body("torso").id], model.body("torso").id, u)
        assert np.abs(inv.qfrc - u).max() <= 1e-8 * np.abs(u).max()
        np.testing.assert_allclose(inv.f, fw.f, atol=1e-8 * max(1.0, np.abs(fw.f).max()))


def test_forward_recovers_next_velocity_of_inverse(rng):
    """inverse(q, w, w⁺) = u then forward(q, w, u) = w⁺, for arbitrary w⁺ (often infeasible:
    pushing into the floor, so elastic mode and sliding contacts)."""
    model, data = _humanoid("lying")
    dyn = ConvexDynamics(model)
    for _ in range(4):
        qvel = rng.normal(scale=0.3, size=model.nv)
        target = qvel + rng.normal(scale=0.3, size=model.nv)
        inv = dyn.inverse(data.qpos, qvel, target)
        assert inv.status == ContactStatus.CONVERGED
        fw = dyn.forward(data.qpos, qvel, qfrc_applied=inv.qfrc)
        assert fw.status == ContactStatus.CONVERGED
        assert np.abs(fw.qvel - target).max() <= 1e-8 * max(1.0, np.abs(target).max())


def test_without_contacts_matches_mujoco_euler_step(rng):
    """Airborne, limits off: the step is MuJoCo's semi-implicit Euler with implicit joint damping."""
    model = contactopt.load_model("humanoid", timestep=0.01)
    model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_LIMIT | mujoco.mjtDisableBit.mjDSBL_CONTACT)
    model.opt.integrator = int(mujoco.mjtIntegrator.mjINT_EULER)
    data = mujoco.MjData(model)
    contactopt.reset_to_keyframe(model, data, "home")
    data.qpos[2] += 5.0
    data.qvel[:] = rng.normal(scale=0.5, size=model.nv)
    data.ctrl[:] = rng.uniform(-1, 1, model.nu)
    dyn = ConvexDynamics(model)
    fw = dyn.forward(data.qpos, data.qvel, ctrl=data.ctrl)
    assert fw.problem.space.n == 0
    mujoco.mj_step(model, data)
    np.testing.assert_allclose(fw.qvel, data.qvel, atol=1e-10)
    np.testing.assert_allclose(fw.qpos, data.qpos, atol=1e-12)


def test_v_min_rule():
    model = contactopt.load_model("ball")
    dyn = ConvexDynamics(model, penetration_recovery=0.25)
    h = model.opt.timestep
    w = np.array([0.05, 0.0, -0.004])
    np.testing.assert_allclose(dyn.v_min(w), [-0.05 / h, 0.0, 0.25 * 0.004 / h])


@pytest.mark.parametrize("schedule", ["linear", "smooth-onset"])
def test_ball_drop_does_not_penetrate_and_comes_to_rest(schedule):
    """Paper Fig. 3: force from a distance inside w_max, no penetration, rest carrying the weight.

    With eq. 24 (linear) the impulse steps to −c/(A + R_max) as the ball crosses w_max;
    the smooth-onset schedule starts it from zero and it rises without jumps."""
    from contactopt.bench.contact_bench import ball_drop

    drop = ball_drop(schedule=schedule)
    s, gap, impulse = drop["summary"], drop["gap"], drop["impulse"]
    assert s["unconverged_steps"] == 0
    assert s["max_penetration"] < 1e-3
    assert 0.0 < s["impulse_onset_gap"] < s["w_max"]  # starts before touchdown, inside w_max
    assert s["impulse_onset_time"] < s["touchdown_time"]
    assert abs(s["final_velocity"]) < 1e-4
    assert s["final_impulse"] == pytest.approx(s["weight_impulse"], rel=1e-3)
    assert 0.0 < s["final_gap"] < 1e-3
    if schedule == "smooth-onset":
        assert s["onset_impulse"] < 0.01 * s["peak_impulse"]
        assert s["max_step_change_over_peak"] < 0.25
    else:
        assert s["onset_impulse"] > 0.2 * s["peak_impulse"]  # the documented step of eq. 24
    assert np.all(np.diff(gap[: int(np.argmax(impulse > 0))]) < 0)  # free fall until the onset


@pytest.mark.slow
def test_humanoid_lying_ten_seconds_at_10ms_is_stable():
    model = contactopt.load_model("humanoid", timestep=0.01)
    result = simulate(model, 10.0, keyframe="lying", contact="convex")
    assert np.isfinite(result.qpos).all()
    assert result.extra["contact_unconverged_steps"] == 0
    late = result.time > 5.0
    assert result.kinetic_energy[late].max() < 0.05
    assert np.ptp(result.total_energy[late]) < 0.5
    # the floor carries the weight: vertical component of the floor contacts' impulses
    step = ConvexDynamics(model).forward(result.qpos[-1], result.qvel[-1])
    space, floor = step.problem.space, model.geom("floor").id
    vertical = 0.0
    for i, (g1, g2) in enumerate(space.geoms):
        if floor in (g1, g2):
            f_world = space.frames[i].T @ step.f[space.n_limits + 3 * i: space.n_limits + 3 * i + 3]
            vertical += f_world[2] if g1 == floor else -f_world[2]
    weight = contactopt.total_mass(model) * 9.81
    assert vertical / model.opt.timestep == pytest.approx(weight, rel=0.03)  # residual jitter ~1 %


def test_simulate_contact_argument_is_validated():
    model = contactopt.load_model("ball")
    with pytest.raises(ParameterError, match="contact must be"):
        simulate(model, 0.01, contact="soft")
    with pytest.raises(ParameterError, match="contact_model is only used"):
        simulate(model, 0.01, contact_model=ConvexContactModel())


def test_bad_construction_and_shapes():
    model = contactopt.load_model("ball")
    with pytest.raises(ParameterError, match="penetration_recovery"):
        ConvexDynamics(model, penetration_recovery=0.0)
    with pytest.raises(ParameterError, match="contact_model"):
        ConvexDynamics(model, contact_model={"kappa": 1})
    with pytest.raises(ParameterError, match="MjModel"):
        ConvexDynamics("ball")
    dyn = ConvexDynamics(model)
    with pytest.raises(ShapeError, match="qvel"):
        dyn.forward(np.array([0, 0, 1, 1, 0, 0, 0.0]), np.zeros(5))
    with pytest.raises(contactopt.NonFiniteError, match="qpos"):
        dyn.forward(np.array([0, 0, np.nan, 1, 0, 0, 0.0]), np.zeros(6))
    with pytest.raises(ShapeError, match="ctrl"):
        dyn.forward(np.array([0, 0, 1, 1, 0, 0, 0.0]), np.zeros(6), ctrl=np.zeros(2))


def _feasible_problem(rng, nc, nl):
    from test_convex_contact import random_problem

    A, mu, _, R = random_problem(rng, nc, nl)
    n = A.shape[0]
    c = rng.normal(size=n)
    interior = np.zeros(n)
    interior[:nl] = 1.0
    interior[nl + 2::3] = 1.0
    normal = np.concatenate([np.arange(nl), nl + 3 * np.arange(nc) + 2])
    v_min = (A @ interior + c)[normal] - rng.uniform(0.0, 0.5, nl + nc)  # strictly feasible
    return A, c, mu, v_min, 1e-2 * R


def test_forward_matches_exact_conic_solution_as_kappa_shrinks():
    """Formulation check: with small κ and R the forward impulse is Clarabel's exact solution of
    problem 13 (same R) to within 3e-3 of max|f|, and the gap shrinks with κ."""
    pytest.importorskip("clarabel")  # a test dependency: pip install -e ".[test]"
    from contactopt.contact.reference import solve_forward_exact

    rng = np.random.default_rng(3)
    problems = [_feasible_problem(rng, int(rng.integers(1, 11)), int(rng.integers(0, 3))) for _ in range(30)]
    worst = {}
    for kappa in (1e-3, 1e-5):
        model = ConvexContactModel(kappa=kappa)
        worst[kappa] = 0.0
        for A, c, mu, v_min, R in problems:
            nl = A.shape[0] - 3 * len(mu)
            ours = model.forward(A, c, friction=mu, v_min=v_min, R=R, n_limits=nl)
            assert ours.converged
            exact = solve_forward_exact(A, c, friction=mu, v_min=v_min, R=R, n_limits=nl)
            assert exact.solved, exact.status
            worst[kappa] = max(worst[kappa], np.abs(ours.f - exact.f).max() / max(1.0, np.abs(exact.f).max()))
    assert worst[1e-5] <= 3e-3
    assert worst[1e-5] < worst[1e-3] / 5
