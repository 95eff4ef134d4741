"""humanoid-getup task pieces: cost derivatives, the lying-pose sampler, the success test."""

import mujoco
import numpy as np
import pytest

from contactopt import ParameterError
from contactopt.tasks import humanoid_getup as hg
from contactopt.tasks import humanoid_push as hp
from contactopt.tasks import humanoid_states as hs
from contactopt.testing import check_derivatives


@pytest.fixture(scope="module")
def plant():
    return hg.plant_model()


@pytest.fixture(scope="module")
def planner():
    return hg.planner_model()


def test_models_differ_as_planned(plant, planner):
    assert plant.opt.timestep == pytest.approx(hg.PLANT_TIMESTEP)
    assert planner.opt.timestep == pytest.approx(hg.PLANNER_DEFAULTS["planner_timestep"])
    assert planner.opt.timestep > plant.opt.timestep
    assert (plant.nq, plant.nv, plant.nu) == (23, 22, 16)


def test_cost_derivatives_finite_and_match_differences(plant, planner):
    cost = hg.getup_cost(planner)
    qpos, qvel = hs.sample_lying_state(plant, 3)
    rng = np.random.default_rng(0)
    T = 4
    X = np.tile(np.concatenate([qpos, qvel]), (T + 1, 1))
    X[:, plant.nq:] += 0.1 * rng.standard_normal((T + 1, plant.nv))
    U = rng.uniform(-0.8, 0.8, (T, plant.nu))
    cd = cost.evaluate(X, U)
    for a in (cd.l, cd.lx, cd.lu, cd.lxx, cd.luu, cd.lux):
        assert np.isfinite(a).all()
    assert cd.total == pytest.approx(cost.total(X, U))
    assert cd.total > 0
    # gradient of one stage against central differences on the manifold (the default drops
    # ∂(J_com v)/∂q of the CoM-velocity term; include it for an exact comparison)
    from contactopt.model import state_integrate
    stage = hg.getup_cost(planner, com_vel_position_jacobian=1.0).running
    x, u = X[1], U[1]
    g = stage.evaluate(x, u)
    eps = 1e-6
    check_derivatives(lambda xx: stage.value(xx, u), x, g.lx, eps=eps, rtol=1e-4, atol=1e-5,
                      retract=lambda xx, dx: state_integrate(planner, xx, dx), name="l_x")
    check_derivatives(lambda uu: stage.value(x, uu), u, g.lu, eps=eps, rtol=1e-5, atol=1e-7, name="l_u")


def test_cost_is_small_standing_large_lying(plant, planner):
    stage = hg.getup_cost(planner).running
    home = np.concatenate([planner.key_qpos[0], np.zeros(planner.nv)])
    lying = np.concatenate([planner.key_qpos[1], np.zeros(planner.nv)])
    u0 = np.zeros(planner.nu)
    assert stage.value(home, u0) < 0.1 * stage.value(lying, u0)


def test_cost_rejects_unknown_weight(planner):
    with pytest.raises(ParameterError, match="unknown"):
        hg.getup_cost(planner, w_heigth=3.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_states_lie_settled_without_penetration(plant, seed):
    qpos, qvel = hs.sample_lying_state(plant, seed)
    assert qpos.shape == (plant.nq,) and qvel.shape == (plant.nv,)
    assert np.isfinite(qpos).all() and np.isfinite(qvel).all()
    assert np.abs(qvel).max() < 0.3                       # at rest
    d = mujoco.MjData(plant)
    d.qpos[:] = qpos
    d.qvel[:] = qvel
    mujoco.mj_forward(plant, d)
    m = hs.standing_metrics(plant, d)
    assert m["head_height"] < 0.5 and m["torso_height"] < 0.5   # lying
    assert d.subtree_com[0][2] < 0.35
    assert d.ncon > 0                                            # on the floor
    assert min(d.contact[i].dist for i in range(d.ncon)) > -0.01  # no deep penetration
    # joints within their limits (up to the soft-limit margin)
    for j in range(1, plant.njnt):
        q = qpos[plant.jnt_qposadr[j]]
        lo, hi = plant.jnt_range[j]
        assert lo - 0.05 <= q <= hi + 0.05
    assert not hs.is_standing(plant, d)


def test_sampler_is_reproducible_and_varied(plant):
    a = hs.sample_lying_state(plant, 7)[0]
    b = hs.sample_lying_state(plant, np.random.default_rng(7))[0]
    c = hs.sample_lying_state(plant, 8)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    with pytest.raises(ParameterError):
        hs.sample_lying_state(plant, 0, side="upside-down")


def test_is_standing_home_but_not_lying(plant):
    d = mujoco.MjData(plant)
    mujoco.mj_resetDataKeyframe(plant, d, plant.key("home").id)
    mujoco.mj_forward(plant, d)
    assert hs.is_standing(plant, d)
    d.qvel[0] = 1.5                                             # sliding fast: not standing still
    mujoco.mj_forward(plant, d)
    assert not hs.is_standing(plant, d)
    mujoco.mj_resetDataKeyframe(plant, d, plant.key("lying").id)
    mujoco.mj_forward(plant, d)
    assert not hs.is_standing(plant, d)
    assert hg.SUCCESS_HOLD_S > 0


def test_kneeling_upright_is_not_standing(plant):
    d = mujoco.MjData(plant)
    mujoco.mj_resetDataKeyframe(plant, d, plant.key("home").id)
    q = d.qpos
    for side in ("left", "right"):
        q[plant.joint(f"{side}_knee").qposadr[0]] = 1.57          # shins flat on the floor
    q[2] -= 0.38
    mujoco.mj_forward(plant, d)
    assert not hs.is_standing(plant, d)


def test_make_planner_one_iteration(plant):
    dyn, cost, solver = hg.make_planner(nthread=1)
    qpos, qvel = hs.sample_lying_state(plant, 0)
    T = hg.PLANNER_DEFAULTS["horizon_steps"]
    res = solver.solve(np.concatenate([qpos, qvel]), np.zeros((T, plant.nu)), max_iterations=1)
    assert res.ok and res.U.shape == (T, plant.nu) and np.isfinite(res.K).all()
    assert res.cost <= res.initial_cost


# --------------------------------------------------------------------------- humanoid-push


def test_push_is_seeded_horizontal_with_the_stated_impulse():
    a = hp.push_recovery_pushes(np.random.default_rng(3))
    b = hp.push_recovery_pushes(np.random.default_rng(3))
    c = hp.push_recovery_pushes(np.random.default_rng(4))
    assert a == b and a != c and len(a) == 1
    p = a[0]
    assert p.body == "torso" and p.time == hp.PUSH_TIME and p.force[2] == 0.0
    assert np.linalg.norm(p.force) * p.duration == pytest.approx(hp.PUSH_IMPULSE)


def test_fallen_and_recovered_tests(plant):
    d = mujoco.MjData(plant)
    hp.HUMANOID_PUSH.initial_state(plant, d, np.random.default_rng(0))
    assert not hp.has_fallen(plant, d)
    assert hs.is_standing(plant, d) and not hp.recovered(plant, d)  # standing, but before the push
    d.time = hp.PUSH_TIME + hp.PUSH_DURATION + hp.PUSH_SETTLE_S
    assert hp.recovered(plant, d)
    qpos, _ = hs.sample_lying_state(plant, 0)
    d.qpos[:] = qpos
    mujoco.mj_forward(plant, d)
    assert hp.has_fallen(plant, d) and not hp.recovered(plant, d)


@pytest.mark.slow
def test_humanoid_recovers_from_a_forward_push():
    """A 25 N·s forward shove (the task's impulse, 0.46 m/s on the CoM): the MPC takes it and
    stands again, never falling.  Robust to roundoff (1e-9 perturbations of the start: 4 of 4);
    a 40 N·s shove is recovered or not depending on roundoff, so it is not asserted."""
    from contactopt.mpc import Push
    from contactopt.tasks.mpc_task import run_ilqg_task

    push = Push(hp.PUSH_TIME, 0.1, "torso", (hp.PUSH_IMPULSE / 0.1, 0.0, 0.0))
    result, plant = run_ilqg_task(hp.HUMANOID_PUSH, seed=0, lag=0.03, pushes=(push,), seconds=3.5,
                                  stop_on_success=True)
    assert result.time_of_failure is None, result.summary()
    assert result.success, result.summary()
    d = mujoco.MjData(plant)
    d.qpos[:] = result.qpos[-1]
    mujoco.mj_kinematics(plant, d)
    assert d.body("torso").xpos[0] - result.qpos[0, 0] > 0.1  # the push moved it (0.24–0.45 m seen)


@pytest.mark.slow
def test_humanoid_gets_up_closed_loop_with_lag_compensation_on_a_seed_range():
    """From seeded lying poses the MPC (the task's defaults: one iteration per update, lag
    compensation) stands the humanoid up with a 22 ms policy lag, ≈ 1.3× the quiet measured lag
    at the 2× target slowdown, on at least 3 of seeds 8-11, none of them picked (seeds 0-31 with
    the measured lag: 29/32, README)."""
    from contactopt.tasks.mpc_task import run_ilqg_task

    assert hg.HUMANOID_GETUP.ilqg["lag_compensation"] == "auto"
    outcomes = []
    for seed in range(8, 12):
        result, _ = run_ilqg_task(hg.HUMANOID_GETUP, seed=seed, lag=0.022, slowdown=2.0, stop_on_success=True)
        outcomes.append(bool(result.success) and result.time_to_success < hg.TASK_SECONDS)
    assert sum(outcomes) >= 3, outcomes
