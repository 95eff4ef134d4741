"""The style suite (``examples/style/``, issue 20 item 4): eight small MJCF models written in
the styles of other projects, each with a ``Task`` file, run with default planner settings.

* fast: every model compiles and shows the style feature it is there for, every task builds
  and resets from a seeded state, every planner that should run it is constructed, and
  goal-directed dynamics refuses, in one line, the tasks it cannot hold quasi-statically;
* slow: every task × planner pair that works succeeds on a seed range (sync mode with a fixed
  policy lag, so the runs repeat exactly; stopped once the success test has held).
  The required counts sit a little below the rates measured with the same settings
  (``examples/style/README.md``); the seeds are a range, never hand-picked.

This is an acceptance suite, not a tuning target: the task files set only the cost, the
initial states and the success test, never a planner option.
"""

from pathlib import Path

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.errors import ParameterError
from contactopt.mpc.task_runner import run_task
from contactopt.planners import make

STYLE = Path(__file__).resolve().parents[1] / "examples" / "style"
MODELS = ("pendulum_rk4", "cartpole", "reacher", "tendon_arm", "walker", "finger", "ball_plate", "quadruped")
PLANNERS = ("ilqg", "idto", "gdd")

#: pairs goal-directed dynamics refuses before the run (its quasi-static check), with the reason
GDD_REFUSES = {
    "pendulum_rk4": "beyond its range",        # the 1.2 N·m motor cannot hold the pole part way up
    "cartpole": "unactuated direction",        # a pole cannot be held still off vertical
    "walker": "beyond its range",              # the squat start needs more knee torque at rest
    "finger": "unactuated direction",          # the bar moves only through contact
    "quadruped": "beyond its range",           # lying on its knees, a hip would need > 6 N·m at rest
}

#: the fixed policy lag of the slow runs [s]: about an iLQG or IDTO update on this 2-core machine,
#: and for goal-directed dynamics (0.2–0.3 ms per update) what ``--deterministic`` calibrates
LAG = {"ilqg": 0.02, "idto": 0.02, "gdd": 0.001}

#: (model, planner): (seeds 0…n−1, successes required) at the lag above; examples/style/README.md
#: has the rates measured on seeds 0–7
WORKS = {
    ("pendulum_rk4", "ilqg"): (4, 3),     # measured 8/8
    ("cartpole", "ilqg"): (4, 2),         # 5/8 (3/4 on seeds 0-3)
    ("reacher", "ilqg"): (4, 3),          # 8/8
    ("tendon_arm", "ilqg"): (4, 3),       # 8/8
    ("walker", "ilqg"): (2, 1),           # 7/8
    ("finger", "ilqg"): (4, 2),           # 7/8 (3/4 on seeds 0-3)
    ("ball_plate", "ilqg"): (3, 2),       # 8/8
    ("quadruped", "ilqg"): (2, 1),        # 8/8
    ("reacher", "gdd"): (4, 3),           # 7/8
    ("pendulum_rk4", "idto"): (4, 2),     # 7/8 (3/4 on seeds 0-3)
    ("finger", "idto"): (4, 1),           # 6/8 (2/4 on seeds 0-3)
    ("ball_plate", "idto"): (2, 1),       # 8/8
    ("reacher", "idto"): (4, 2),          # 7/8 since the feedforward honours the servos' bias
}

#: the style feature each model is there for, as a check on the compiled model
FEATURES = {
    "pendulum_rk4": lambda m: (m.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
                               and _site_above_hinge(m, "tip")),
    "cartpole": lambda m: (m.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
                           and m.actuator_biastype[0] == mujoco.mjtBias.mjBIAS_AFFINE   # velocity servo
                           and m.actuator_gainprm[0, 0] == -m.actuator_biasprm[0, 2]
                           and _site_above_hinge(m, "tip")),
    "reacher": lambda m: (np.all(m.actuator_biastype == mujoco.mjtBias.mjBIAS_AFFINE)      # position servos
                          and np.all(m.actuator_gainprm[:, 0] == -m.actuator_biasprm[:, 1])),
    "tendon_arm": lambda m: (np.all(m.actuator_trntype == mujoco.mjtTrn.mjTRN_TENDON) and m.ntendon == 3
                             and sorted(int(m.wrap_type[m.tendon_adr[t]]) for t in range(3))           # 2 spatial, 1 fixed
                             == sorted([int(mujoco.mjtWrap.mjWRAP_SITE)] * 2 + [int(mujoco.mjtWrap.mjWRAP_JOINT)])),
    "walker": lambda m: (list(m.jnt_type[:3]) == [mujoco.mjtJoint.mjJNT_SLIDE, mujoco.mjtJoint.mjJNT_SLIDE,
                                                   mujoco.mjtJoint.mjJNT_HINGE]),
    "finger": lambda m: m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC,
    "ball_plate": lambda m: (m.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
                             and mujoco.mjtJoint.mjJNT_FREE in m.jnt_type),
    "quadruped": lambda m: m.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE and m.nkey == 1,
}


def _site_above_hinge(model, site):
    """Whether ``site`` is straight above its body's origin at ``qpos0`` (the hinge's zero is
    upright)."""
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    above = data.site(site).xpos - data.xpos[model.site(site).bodyid[0]]
    return above[2] > 0.3 and np.allclose(above[:2], 0.0)


def _task(name):
    return contactopt.load_task_file(STYLE / name / "task.py")


@pytest.mark.parametrize("name", MODELS)
def test_model_compiles_with_its_style_feature(name):
    model = mujoco.MjModel.from_xml_path(str(STYLE / name / f"{name}.xml"))
    assert model.nu > 0
    assert FEATURES[name](model)
    # physically sensible: the model holds together under zero controls for a second
    data = mujoco.MjData(model)
    _task(name).reset(model, data, 0)
    for _ in range(int(1.0 / model.opt.timestep)):
        mujoco.mj_step(model, data)
    assert np.isfinite(data.qpos).all() and np.abs(data.qvel).max() < 50


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("name", MODELS)
def test_task_builds_with_each_planner(name, planner):
    task = _task(name)
    plant = task.load_plant()
    data = mujoco.MjData(plant)
    for seed in (0, 1):
        task.reset(plant, data, seed)
        assert np.isfinite(data.qpos).all()
    first = data.qpos.copy()
    task.reset(plant, data, 0)
    assert not np.allclose(first, data.qpos)  # the seeds vary the initial state
    assert not task.success(plant, data)      # nothing succeeds before it has started
    assert not task.planner_options and task.horizon is None and task.planner_timestep is None
    if planner == "gdd" and name in GDD_REFUSES:
        with pytest.raises(ParameterError) as err:
            make(planner, task, plant=plant)
        message = str(err.value)
        assert "\n" not in message and f"planner 'gdd' cannot run task {task.name}" in message
        assert GDD_REFUSES[name] in message
        return
    p = make(planner, task, plant=plant)
    try:
        assert p.model.nv == plant.nv
    finally:
        p.close()


@pytest.mark.slow
@pytest.mark.parametrize("name, planner", sorted(WORKS))
def test_task_succeeds_on_a_seed_range(name, planner):
    seeds, needed = WORKS[(name, planner)]
    task = _task(name)
    wins = [run_task(task, planner, seed=seed, lag=LAG[planner], stop_on_success=True).result.success
            for seed in range(seeds)]
    assert sum(wins) >= needed, f"{name} × {planner}: {wins}"
