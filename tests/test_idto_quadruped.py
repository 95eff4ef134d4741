"""IDTO quadruped walking task (issue 5): nominal re-anchoring, terrain, falls, report, closed loop."""

import math
from types import SimpleNamespace

import mujoco
import numpy as np
import pytest

from contactopt.errors import ParameterError
from contactopt.model import load_model
from contactopt.tasks.idto_task import build_idto_planner
from contactopt.tasks.quadruped import (
    FALL_HEIGHT,
    QUAD_HEIGHT,
    QUAD_HOME,
    QUAD_SPEED,
    QUADRUPED,
    QUADRUPED_HILLS,
    count_falls,
    is_fallen,
    quadruped_nominal,
    quadruped_report,
    restrict_planner_contacts,
)
from contactopt.terrain import base_tilt, terrain_height


def _tilted(angle, axis=(1.0, 0.0, 0.0)):
    q = QUAD_HOME.copy()
    mujoco.mju_axisAngle2Quat(q[3:7], np.asarray(axis, float), angle)
    return q


def test_tasks_registered_on_their_models():
    from contactopt.tasks import load_task
    assert load_task("quadruped").model == "quadruped" and "idto" in load_task("quadruped").planners
    assert load_task("quadruped-hills").model == "quadruped-hills"
    assert load_task("quadruped-hills").runners["idto"].task is QUADRUPED_HILLS


def test_planner_has_the_papers_problem():
    pl = build_idto_planner(QUADRUPED)
    pr = pl.problem
    assert (pr.T, pr.h, pr.nq, pr.nv) == (20, 0.05, 19, 18)
    assert pr.Z.shape == (18, 6)  # the floating base is unactuated
    p = pr.contact.params  # Table I
    assert (p.stiffness, p.smoothing, p.friction, p.stiction_velocity) == (2000.0, 0.01, 1.0, 0.5)
    assert pr.unactuated_penalty == 100.0
    np.testing.assert_allclose(pr.Qq[:6], [10, 10, 10, 1, 1, 1])
    np.testing.assert_allclose(pr.Qq[6:], 0.0)
    np.testing.assert_allclose(pr.Qf_q[6:], 1.0)  # the small terminal "stand" cost
    # the planner's model collides with feet, trunk and motors only; a plant load is untouched
    m = pr.contact.model
    calf = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "FL_calf")
    foot = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "FL_foot")
    assert m.geom_contype[calf] == 0 and m.geom_contype[foot] == 1
    assert load_model("quadruped").geom_contype[calf] == 1


def test_restrict_planner_contacts_only_the_leg_links():
    m = load_model("quadruped-hills")
    off = restrict_planner_contacts(m)
    legs = ("FL", "FR", "HL", "HR")
    assert sorted(off) == sorted(f"{leg}_{link}" for leg in legs for link in ("thigh", "calf"))
    d = mujoco.MjData(m)
    d.qpos[:] = QUAD_HOME
    d.qpos[2] = 0.05  # crouched into the floor: only feet, trunk and motors may touch it
    mujoco.mj_forward(m, d)
    names = {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for c in d.contact[:d.ncon] for g in c.geom}
    assert not any(n.endswith(("_thigh", "_calf")) for n in names)
    with pytest.raises(ParameterError):
        restrict_planner_contacts(load_model("hopper"))


def test_home_pose_stands_on_the_feet():
    m = load_model("quadruped")
    d = mujoco.MjData(m)
    d.qpos[:] = QUAD_HOME
    mujoco.mj_forward(m, d)
    feet = [d.site(f).xpos[2] for f in ("FL_foot", "FR_foot", "HL_foot", "HR_foot")]
    np.testing.assert_allclose(feet, 0.02, atol=2e-3)  # foot sphere radius 2 cm: touching
    assert not is_fallen(m, d)


def test_nominal_is_reanchored_at_the_measured_base():
    m = load_model("quadruped")
    T, h = 20, 0.05
    nominal = quadruped_nominal(m, T, h)
    x = np.concatenate([QUAD_HOME, np.zeros(18)])
    x[0], x[1], x[2] = 0.7, -0.1, 0.2
    q, v = nominal(3.0, x)
    assert q.shape == (T + 1, 19) and v.shape == (T + 1, 18)
    np.testing.assert_allclose(q[:, 0], 0.7 + QUAD_SPEED * h * np.arange(T + 1))
    np.testing.assert_allclose(q[:, 1], -0.1)  # lateral: measured y held
    np.testing.assert_allclose(q[:, 2], QUAD_HEIGHT)  # not the measured height: stand up
    np.testing.assert_allclose(q[:, 3:], np.tile(QUAD_HOME[3:], (T + 1, 1)))  # upright, legs at home
    np.testing.assert_allclose(v[:, 0], QUAD_SPEED)
    np.testing.assert_allclose(v[:, 1:], 0.0)
    x[0] = 2.0  # the robot moved (ahead of schedule): the nominal moves with it
    q2, _ = nominal(4.0, x)
    np.testing.assert_allclose(q2[:, 0] - q[:, 0], 1.3)


def test_nominal_pulls_harder_when_behind_schedule():
    m = load_model("quadruped")
    T, h = 20, 0.05
    span = QUAD_SPEED * T * h
    nominal = quadruped_nominal(m, T, h, catch_up=0.3)
    x = np.concatenate([QUAD_HOME, np.zeros(18)])
    nominal(0.0, x)  # the goal starts here and moves at QUAD_SPEED
    for t, xb, lead in ((1.0, 0.4, span), (1.0, 0.3, span + 0.1), (2.0, 0.0, span + 0.3), (2.0, 5.0, span)):
        x[0] = xb
        q, v = nominal(t, x)
        assert q[0, 0] == pytest.approx(xb)  # always re-anchored at the measured base
        assert q[-1, 0] - xb == pytest.approx(lead)
        np.testing.assert_allclose(v[:, 0], lead / (T * h))
    x[0] = 0.0
    q, _ = nominal(0.5, x)  # an earlier time: a new run, the goal starts over
    assert q[-1, 0] == pytest.approx(span)


def test_nominal_follows_the_hills():
    m = load_model("quadruped-hills")
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    # hill 1: crest at x = 1.0 m, 0.08 m high; hill 2: 0.12 m at 2.2 m; flat between
    np.testing.assert_allclose(terrain_height(m, d, [0.0, 1.0, 1.6, 2.2], 0.0), [0.0, 0.08, 0.0, 0.12],
                               atol=1e-9)
    np.testing.assert_allclose(terrain_height(m, d, 1.0 + 0.2, 0.5), -0.42 + math.sqrt(0.25 - 0.04))  # flank
    nominal = quadruped_nominal(m, 20, 0.05)
    x = np.concatenate([QUAD_HOME, np.zeros(18)])
    x[0] = 0.6  # the horizon reaches x = 1.0 at its last knot
    q, _ = nominal(0.0, x)
    assert q[0, 2] == pytest.approx(QUAD_HEIGHT)
    assert q[-1, 2] == pytest.approx(QUAD_HEIGHT + 0.08)
    assert np.all(np.diff(q[:, 2]) >= -1e-12)  # going up the first hill


def test_nominal_rejects_other_models():
    with pytest.raises(ParameterError):
        quadruped_nominal(load_model("hopper"), 20, 0.05)
    with pytest.raises(ParameterError):
        quadruped_nominal(load_model("quadruped"), 20, 0.05, height=-0.1)


def test_tilt_and_falls():
    m = load_model("quadruped")
    d = mujoco.MjData(m)
    assert base_tilt(QUAD_HOME) == pytest.approx(0.0, abs=1e-12)
    assert base_tilt(_tilted(0.5, (0, 1, 0))) == pytest.approx(0.5)
    assert base_tilt(_tilted(0.5, (0, 0, 1))) == pytest.approx(0.0, abs=1e-12)  # yaw is no tilt
    for q, fallen in ((QUAD_HOME, False), (_tilted(math.radians(50)), False),
                      (_tilted(math.radians(70)), True), (_tilted(math.pi), True)):
        d.qpos[:] = q
        mujoco.mj_kinematics(m, d)
        assert is_fallen(m, d) is fallen
    low = QUAD_HOME.copy()
    low[2] = FALL_HEIGHT - 0.01
    d.qpos[:] = low
    assert is_fallen(m, d)
    # up, down, up, down again: two falls
    seq = np.array([QUAD_HOME, low, low, QUAD_HOME, _tilted(2.0), QUAD_HOME])
    falls, fallen = count_falls(m, seq)
    assert falls == 2 and fallen.tolist() == [False, True, True, False, True, False]


def test_fall_height_is_above_the_terrain():
    m = load_model("quadruped-hills")
    d = mujoco.MjData(m)
    q = QUAD_HOME.copy()
    q[0], q[2] = 2.2, 0.12 + 0.2  # 0.2 m above the crest of hill 2
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    assert not is_fallen(m, d)
    d.qpos[2] = 0.12 + FALL_HEIGHT - 0.02
    mujoco.mj_kinematics(m, d)
    assert is_fallen(m, d)


def test_report_metres_per_10s_and_falls():
    m = load_model("quadruped")
    t = np.linspace(0.0, 5.0, 51)
    qpos = np.tile(QUAD_HOME, (t.size, 1))
    qpos[:, 0] = 0.3 * t
    x0 = np.concatenate([QUAD_HOME, np.zeros(18)])
    res = SimpleNamespace(qpos=qpos, time=t, simulated_time=5.0, time_to_success=1.0)
    rep = quadruped_report(QUADRUPED, m, res, x0)
    assert rep["metres_walked"] == pytest.approx(1.5)
    assert rep["metres_per_10s"] == pytest.approx(3.0)
    assert rep["falls"] == 0 and rep["first_fall_s"] is None and rep["success"] is True
    qpos[30:, 3:7] = _tilted(1.5)[3:7]  # falls over at t = 3 s
    rep = quadruped_report(QUADRUPED, m, res, x0)
    assert rep["falls"] == 1 and rep["first_fall_s"] == pytest.approx(3.0)
    assert rep["success"] is False and rep["time_to_success"] is None
    qpos[:, 3:7] = QUAD_HOME[3:7]
    qpos[:, 0] = 0.04 * t  # 0.4 m per 10 s: too slow
    assert quadruped_report(QUADRUPED, m, res, x0)["success"] is False


def test_success_needs_distance_and_no_fall():
    m = load_model("quadruped")
    d = mujoco.MjData(m)
    x0 = np.concatenate([QUAD_HOME, np.zeros(18)])
    success = QUADRUPED.success_factory(x0, 4.0)  # needs 0.4 m in 4 s
    d.qpos[:] = QUAD_HOME
    d.qpos[0] = 0.5
    mujoco.mj_kinematics(m, d)
    assert success(m, d)
    success = QUADRUPED.success_factory(x0, 4.0)
    d.qpos[:] = _tilted(1.5)
    mujoco.mj_kinematics(m, d)
    assert not success(m, d)
    d.qpos[:] = QUAD_HOME
    d.qpos[0] = 0.5
    mujoco.mj_kinematics(m, d)
    assert not success(m, d)  # it fell before: a fall is final


def test_first_plan_moves_the_base_forward():
    """A few trust-region iterations from standing (short horizon for speed): the cost falls
    monotonically and the planned base starts moving forward, staying at standing height."""
    pl = build_idto_planner(QUADRUPED, horizon=10, initial_iterations=8)
    x = np.concatenate([QUAD_HOME, np.zeros(18)])
    upd = pl.reset(0.0, x)
    assert upd.policy is not None, upd.message
    costs = [lg.cost for lg in pl.result.log]
    assert np.all(np.diff(costs) < 0) and pl.result.cost < costs[0]
    qx = pl.result.q[:, 0]
    assert np.all(np.diff(qx) > 0) and qx[-1] > 0.01
    np.testing.assert_allclose(pl.result.q[:, 2], QUAD_HEIGHT, atol=0.01)


def _liftoffs(plant, qpos, clearance=0.01):
    """Lift-offs per foot (FL, FR, HL, HR): entries into ``clearance`` m above the ground."""
    d = mujoco.MjData(plant)
    lifted = np.zeros((qpos.shape[0], 4), dtype=bool)
    for i, q in enumerate(qpos):
        d.qpos[:] = q
        mujoco.mj_kinematics(plant, d)
        feet = [d.site(f).xpos[2] - terrain_height(plant, d, *d.site(f).xpos[:2])
                for f in ("FL_foot", "FR_foot", "HL_foot", "HR_foot")]
        lifted[i] = np.asarray(feet) > 0.02 + clearance  # foot sphere radius 2 cm
    return (lifted[1:] & ~lifted[:-1]).sum(axis=0)


@pytest.mark.slow
def test_closed_loop_walks_on_flat_ground_with_steps():
    """Sync mode (the task's 10 ms lag, 60 Hz updates), MuJoCo plant: ≥ 0.9 m in 3 s without falling,
    and every foot leaves the ground repeatedly (a gait emerged: stepping, not sliding)."""
    from contactopt.tasks.idto_task import run_idto_task

    res, plant, x0 = run_idto_task(QUADRUPED, seconds=3.0, seed=0)
    assert res.failed_updates == 0
    rep = quadruped_report(QUADRUPED, plant, res, x0)
    assert rep["falls"] == 0 and res.time_of_failure is None, rep
    assert rep["metres_walked"] >= 0.9, rep
    assert abs(rep["lateral_drift_m"]) < 0.1, rep
    assert np.all(_liftoffs(plant, res.qpos) >= 2)


@pytest.mark.slow
def test_closed_loop_climbs_over_the_first_hill():
    """The hills scene: in 4 s the base goes over the 8 cm hill whose crest is at x = 1 m."""
    from contactopt.tasks.idto_task import run_idto_task

    res, plant, x0 = run_idto_task(QUADRUPED_HILLS, seconds=4.0, seed=0)
    rep = quadruped_report(QUADRUPED_HILLS, plant, res, x0)
    assert rep["falls"] == 0, rep
    assert rep["metres_walked"] >= 1.2, rep  # past the crest
    crest = np.argmin(np.abs(res.qpos[:, 0] - 1.0))
    assert res.qpos[crest, 2] > QUAD_HEIGHT + 0.05  # the base went up over it, not around
