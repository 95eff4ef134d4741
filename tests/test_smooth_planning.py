"""The smooth contact model as planner dynamics and as plant (issue 24, item 1).

Derivatives against finite differences of the whole step, rollouts against repeated steps,
iLQG and the MPC plant on it, the CLI flags and their errors.
"""

import dataclasses
import json
import subprocess
import sys

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt import ParameterError
from contactopt.contact.geometry import contact_space
from contactopt.contact.smooth import SmoothContactDynamics, SmoothContactModel
from contactopt.dynamics import Dynamics
from contactopt.testing import finite_difference_jacobian

# a filtered actuator (one activation) on a hinge pendulum that can touch the floor
_ACT_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <body pos="0 0 0.5">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.5" limited="true" range="-2 2"/>
      <geom type="capsule" fromto="0 0 0 0.45 0 0" size="0.04" mass="1"/>
    </body>
  </worldbody>
  <actuator>
    <general joint="hinge" dyntype="filter" dynprm="0.05" gainprm="3" ctrlrange="-1 1" ctrllimited="true"/>
  </actuator>
</mujoco>
"""


def _state(dyn, qpos, qvel, act=()):
    return np.concatenate([qpos, qvel, act])


def _lying_humanoid(timestep=0.008):
    """The humanoid lying on the floor (settled under MuJoCo), on a model with ``timestep``."""
    plant = contactopt.load_model("humanoid")
    d = mujoco.MjData(plant)
    for _ in range(600):
        mujoco.mj_step(plant, d)
    return contactopt.load_model("humanoid", timestep=timestep), d.qpos.copy(), d.qvel.copy()


def test_is_a_dynamics_with_the_model_sizes():
    model = contactopt.load_model("humanoid")
    dyn = SmoothContactDynamics(model)
    assert isinstance(dyn, Dynamics)
    assert (dyn.nx, dyn.ndx, dyn.nu) == (model.nq + model.nv, 2 * model.nv, model.nu)
    assert dyn.timestep == model.opt.timestep
    np.testing.assert_array_equal(dyn.control_lower, model.actuator_ctrlrange[:, 0])


def test_impulse_jacobian_matches_finite_differences(rng):
    model, q, _ = _lying_humanoid()
    cm = SmoothContactModel(eta=0.4)
    d = mujoco.MjData(model)
    d.qpos[:] = q
    space = contact_space(model, d, cm.w_max)
    assert space.n_contacts > 5
    b = rng.normal(scale=0.3, size=space.n)
    A = rng.uniform(0.05, 2.0, size=space.n)
    F_b, F_phi = cm.impulse_jacobian(space, b, A)
    fd = finite_difference_jacobian(lambda bb: cm.impulses(space, bb, A), b, eps=1e-7)
    np.testing.assert_allclose(F_b, fd, atol=1e-5 * max(1.0, np.abs(fd).max()))

    fd_phi = finite_difference_jacobian(lambda phi: cm.impulses(dataclasses.replace(space, distance=phi), b, A),
                                        space.distance.copy(), eps=1e-7)
    np.testing.assert_allclose(F_phi, fd_phi, atol=1e-5 * max(1.0, np.abs(fd_phi).max()))


def test_derivatives_without_contact_equal_finite_differences(rng):
    """In the air every term is exact, including the rotation of the free joint (J_r, R(hω)ᵀ)."""
    model = contactopt.load_model("ball", timestep=0.01)
    dyn = SmoothContactDynamics(model)
    quat = rng.normal(size=4)
    x = _state(dyn, [0.1, -0.2, 1.5, *(quat / np.linalg.norm(quat))], [0.3, 0.1, -0.5, 4.0, -6.0, 3.0])
    u = rng.uniform(-1, 1, model.nu)
    A, B = dyn.linearize(x, u)
    Af, Bf = dyn.linearize(x, u, mode="fd")
    np.testing.assert_allclose(A, Af, atol=2e-5)
    np.testing.assert_allclose(B, Bf, atol=2e-5)


def rel(a, b):
    """Relative Frobenius error of ``a`` against ``b``."""
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_derivatives_in_contact_humanoid(rng):
    """On the lying humanoid (dozens of contacts): exact in velocity and control; in position the
    neglected curvature terms (frames, J, M⁻¹Jᵀ) stay a few percent of the Jacobian."""
    model, q, v = _lying_humanoid()
    dyn = SmoothContactDynamics(model, SmoothContactModel(eta=0.4))
    x = _state(dyn, q, v + rng.normal(scale=0.3, size=model.nv))
    u = rng.uniform(-0.5, 0.5, model.nu)
    A, B = dyn.linearize(x, u)
    Af, Bf = dyn.linearize(x, u, mode="fd")
    nv = model.nv
    assert rel(A[:, nv:], Af[:, nv:]) < 1e-4
    assert rel(B, Bf) < 1e-4
    assert rel(A[:, :nv], Af[:, :nv]) < 0.05
    # the position columns are not the contact-free ones: the contact stiffness is in them
    free = SmoothContactDynamics(model, SmoothContactModel(eta=0.4, w_max=1e-9))
    A0, _ = free.linearize(x, u)
    assert rel(A0[:, :nv], Af[:, :nv]) > 10 * rel(A[:, :nv], Af[:, :nv])


def test_derivatives_with_activation_and_joint_limit(rng):
    """A filtered actuator (activation columns and rows) and a hinge limit of ±2° (one or two
    limit rows).  Inside the limit band the position column is exact too; with the limit violated
    by 1.9 rad and the capsule near the floor, the row-sum scale's own change with q (∂A/∂q,
    neglected) matters, and the paper's diagonal scale is exact again."""
    model = mujoco.MjModel.from_xml_string(_ACT_XML)
    for qh, scaling in ((0.03, "row-sum"), (-0.02, "row-sum"), (1.95, "diagonal")):
        dyn = SmoothContactDynamics(model, SmoothContactModel(scaling=scaling))
        assert (dyn.nx, dyn.ndx) == (3, 3)
        x = np.array([qh, rng.normal(), 0.4])
        A, B = dyn.linearize(x, np.array([0.3]))
        Af, Bf = dyn.linearize(x, np.array([0.3]), mode="fd")
        assert dyn.step(x[:1], x[1:2], np.array([0.3])).impulse.space.n_limits >= 1
        np.testing.assert_allclose(A, Af, atol=1e-4 * max(1.0, np.abs(Af).max()))
        np.testing.assert_allclose(B, Bf, atol=1e-4)


def test_rollout_with_feedback_matches_stepping_and_threads_and_stride(rng):
    model = contactopt.load_model("hopper")
    dyn = SmoothContactDynamics(model, nthread=1)
    d = mujoco.MjData(model)
    x0 = np.concatenate([d.qpos, d.qvel])
    T = 12
    U = rng.uniform(-0.3, 0.3, (T, model.nu))
    X_ref = np.repeat(x0[None], T + 1, axis=0)
    K = rng.normal(scale=0.05, size=(T, model.nu, dyn.ndx))
    r = dyn.rollout(x0, U, X_ref=X_ref, K=K)
    assert not r.diverged
    x = x0
    for i in range(T):
        u = np.clip(U[i] + K[i] @ dyn.state_difference(X_ref[i], x), dyn.control_lower, dyn.control_upper)
        np.testing.assert_allclose(r.U[i], u, atol=1e-12)
        q1, v1, _ = dyn.step(x[:model.nq], x[model.nq:], u)
        x = np.concatenate([q1, v1])
        np.testing.assert_allclose(r.X[i + 1], x, atol=1e-12)
    A1, B1 = dyn.derivatives(r.X, r.U)
    A2, B2 = SmoothContactDynamics(model, nthread=2).derivatives(r.X, r.U)
    np.testing.assert_array_equal(A1, A2)
    np.testing.assert_array_equal(B1, B2)
    A3, _ = SmoothContactDynamics(model, nthread=1, derivative_stride=3).derivatives(r.X, r.U)
    for i in SmoothContactDynamics(model, derivative_stride=3).derivative_indices(T):
        np.testing.assert_array_equal(A3[i], A1[i])


def test_rollout_reports_divergence_instead_of_raising():
    model = contactopt.load_model("ball", timestep=0.01)
    dyn = SmoothContactDynamics(model)
    x0 = np.array([0, 0, 1.0, 1, 0, 0, 0, 0, 0, 9e9, 0, 0, 0])
    r = dyn.rollout(x0, np.zeros((200, model.nu)))  # z passes 1e10 (MuJoCo would reset it) at step ~111
    assert r.diverged and r.diverged_at is not None and np.isnan(r.X[-1]).all()


def test_ilqg_plans_with_smooth_dynamics_through_the_registry():
    from contactopt.mpc import registry
    from contactopt.tasks import load_task

    task = load_task("acrobot").task()
    planner = registry.make("ilqg", task, dynamics="smooth", contact_eta=0.5, horizon=0.5)
    try:
        assert isinstance(planner.dynamics, SmoothContactDynamics)
        assert planner.dynamics.contact_model.eta == 0.5
        plant = task.load_plant()
        d = mujoco.MjData(plant)
        task.reset(plant, d, 0)
        upd = planner.reset(0.0, np.concatenate([d.qpos, d.qvel]))
        assert upd.policy is not None and np.isfinite(upd.cost)
    finally:
        planner.close()
    with pytest.raises(ParameterError, match="dynamics"):
        registry.make("ilqg", task, dynamics="bogus")


def test_smooth_plant_holds_a_ball_on_the_floor():
    from contactopt.mpc import plant_stepper

    model = contactopt.load_model("ball", timestep=0.002)
    d = mujoco.MjData(model)
    d.qpos[2] = 0.5
    step = plant_stepper(model, "smooth")
    for _ in range(1000):
        step(d)
    assert abs(d.qpos[2] - 0.1) < 0.005 and np.abs(d.qvel).max() < 0.05
    assert d.xpos[1, 2] == pytest.approx(d.qpos[2])  # derived quantities follow the state
    assert plant_stepper(model, "mujoco") is None
    with pytest.raises(ParameterError, match="plant contact"):
        plant_stepper(model, "bogus")


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "contactopt", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_cli_run_with_smooth_planner_and_plant():
    p = _cli("run", "acrobot", "--planner", "ilqg", "--set", "dynamics=smooth", "--plant-contact", "smooth",
             "--plant-eta", "0.6", "--lag", "0.05", "--seconds", "0.3", "--json")
    report = json.loads(p.stdout)
    assert report["plant_contact"] == {"model": "smooth", "eta": 0.6}
    assert report["updates"] > 0 and report["failed_updates"] == 0


@pytest.mark.parametrize("args, message", [
    (("run", "acrobot", "--planner", "ilqg", "--plant-eta", "0.5"), "--plant-eta applies to --plant-contact smooth"),
    (("run", "acrobot", "--planner", "ilqg", "--plant-contact", "smooth", "--plant-eta", "1.5"), "--plant-eta must be in"),
    (("simulate", "ball", "--eta", "0.5"), "--eta applies to --contact smooth"),
    (("simulate", "ball", "--contact", "smooth", "--eta", "0"), "eta must be in"),
    (("run", "acrobot", "--planner", "ilqg", "--set", "dynamics=bogus"), "dynamics"),
])
def test_cli_errors_name_the_flag(args, message):
    p = _cli(*args, timeout=120)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert message in p.stderr


def test_simulate_smooth_ball_comes_to_rest():
    p = _cli("simulate", "ball", "--contact", "smooth", "--timestep", "0.002", "--seconds", "1.5", "--json")
    r = json.loads(p.stdout)
    assert r["contact"] == "smooth"
    assert abs(r["final_qpos"][2] - 0.1) < 0.005
    assert r["contacts_final"] >= 1 and r["energy_final"] < r["energy_initial"]


def test_bench_smooth_contact_configurations_and_errors():
    from contactopt.bench import get_benchmark
    from contactopt.bench import smooth_contact_bench as sb

    assert "workers" in get_benchmark("smooth-contact").options
    settings, plant, plant_eta = sb._settings(sb.SmoothUnit("paper", 0))
    assert settings == {"timestep": 0.008, "dynamics": "smooth", "contact_eta": 0.4}
    assert (plant, plant_eta) == ("smooth", 0.7)
    settings, plant, _ = sb._settings(sb.SmoothUnit("mujoco", 0))
    assert settings == {"timestep": 0.008, "dynamics": "mujoco"} and plant == "mujoco"
    settings, plant, _ = sb._settings(sb.SmoothUnit("eta", 3, 0.2))
    assert settings["contact_eta"] == 0.2 and plant == "smooth"
    with pytest.raises(ParameterError, match="configuration"):
        sb.run(seeds="0:1", configs=["bogus"])
    with pytest.raises(ParameterError, match="η"):
        sb.run(seeds="0:1", configs=[], etas=(1.5,))
    with pytest.raises(ParameterError, match="seconds"):
        sb.run(seeds="0:1", configs=["paper"], etas=(), seconds=-1.0)


@pytest.mark.slow
def test_bench_smooth_contact_runs_the_paper_configuration(tmp_path):
    """0.4 s of a get-up in the paper's configuration (smooth planner η 0.4 at 8 ms, smooth plant
    η 0.7), shared by the η comparison's η = 0.4 point: a finished run (no error), a table and
    the η plot."""
    from contactopt.bench import smooth_contact_bench as sb

    r = sb.run(seeds="0:1", configs=["paper"], etas=(0.4,), plots=tmp_path, progress=False, seconds=0.4)
    (row,) = r["configs"]
    assert row["config"] == "paper" and row["seeds"] == "0:1"
    assert not any(k.startswith("error") for k in row["failures"]), row["failures"]
    assert row["iteration_ms_median"] > 0
    assert r["eta"][0]["successes"] == row["successes"]  # the same run
    assert "planner η against the smooth plant" in sb.table(r)
    assert (tmp_path / "smooth_contact_eta.png").stat().st_size > 10_000
