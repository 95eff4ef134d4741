"""IDTO manipulation tasks (hand-ball, bimanual-box): quaternion errors, nominals, schedules, planners."""

import math
from types import SimpleNamespace

import mujoco
import numpy as np
import pytest

from contactopt.errors import ParameterError, ShapeError
from contactopt.model import load_model
from contactopt.tasks import load_task
from contactopt import rotations as rot
from contactopt import nominal as nom
from contactopt.tasks import bimanual_box as bb
from contactopt.tasks import bimanual_box_nominal as bn
from contactopt.tasks import hand_ball as hb
from contactopt.tasks.idto_task import build_idto_planner


def _random_quat(rng):
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


# --------------------------------------------------------------------------- quaternions


def test_quaternion_helpers_match_hand_computations_and_mujoco(rng):
    s = math.sqrt(0.5)
    np.testing.assert_allclose(rot.quat_from_axis_angle([0, 0, 2.0], math.pi / 2), [s, 0, 0, s], atol=1e-15)
    # two quarter turns about z make a half turn: (0, 0, 0, 1)
    qz = rot.quat_from_axis_angle([0, 0, 1], math.pi / 2)
    np.testing.assert_allclose(rot.quat_multiply(qz, qz), [0, 0, 0, 1], atol=1e-15)
    # i ⊗ j = k
    np.testing.assert_allclose(rot.quat_multiply([0, 1, 0, 0], [0, 0, 1, 0]), [0, 0, 0, 1])
    for _ in range(5):
        a, b = _random_quat(rng), _random_quat(rng)
        want = np.empty(4)
        mujoco.mju_mulQuat(want, a, b)
        np.testing.assert_allclose(rot.quat_multiply(a, b), want, atol=1e-14)
        np.testing.assert_allclose(rot.quat_multiply(a, rot.quat_conjugate(a)), [1, 0, 0, 0], atol=1e-14)


def test_orientation_error_is_the_rotation_angle(rng):
    ident = np.array([1.0, 0, 0, 0])
    assert rot.orientation_error(ident, ident) == pytest.approx(0.0, abs=1e-12)
    assert rot.orientation_error(ident, [0, 0, 0, 1]) == pytest.approx(math.pi)
    assert rot.orientation_error(ident, rot.quat_from_axis_angle([1, 0, 0], math.radians(30))) == pytest.approx(
        math.radians(30))
    # q and −q are the same orientation; a rotation by 200° is 160° the short way
    q = _random_quat(rng)
    assert rot.orientation_error(q, -q) == pytest.approx(0.0, abs=1e-7)
    q200 = rot.quat_from_axis_angle([0, 1, 0], math.radians(200))
    assert rot.orientation_error(ident, q200) == pytest.approx(math.radians(160))
    # the error between q and r ⊗ q is the angle of r, whatever q is
    r = rot.quat_from_axis_angle([1, 2, 3], 0.7)
    assert rot.orientation_error(q, rot.quat_multiply(r, q)) == pytest.approx(0.7)
    # MuJoCo's own: |mju_subQuat| is the same angle
    b = _random_quat(rng)
    res = np.empty(3)
    mujoco.mju_subQuat(res, b, q)
    assert rot.orientation_error(q, b) == pytest.approx(np.linalg.norm(res))


def test_rotate_toward_turns_by_the_step_on_the_shortest_arc(rng):
    q, target = _random_quat(rng), _random_quat(rng)
    angle = rot.orientation_error(q, target)
    out = rot.rotate_toward(q, target, 0.2)
    assert rot.orientation_error(q, out) == pytest.approx(min(0.2, angle))
    assert rot.orientation_error(out, target) == pytest.approx(max(angle - 0.2, 0.0))
    assert rot.orientation_error(rot.rotate_toward(q, target, 10.0), target) == pytest.approx(0.0, abs=1e-7)
    # a half turn from the identity about z goes about z: the quarter point is a yaw of 45°
    half = rot.rotate_toward([1, 0, 0, 0], [0, 0, 0, 1], math.pi / 4)
    np.testing.assert_allclose(half, rot.quat_from_axis_angle([0, 0, 1], math.pi / 4), atol=1e-12)


def test_bad_quaternion_input_raises():
    with pytest.raises(ParameterError):
        rot.orientation_error([0, 0, 0, 0], [1, 0, 0, 0])
    with pytest.raises(ParameterError):
        rot.rotate_toward([1, 0, 0, 0], [0, 0, 0, 1], -0.1)
    with pytest.raises(ParameterError):
        rot.quat_from_axis_angle([0, 0, 0], 1.0)
    with pytest.raises(ShapeError):
        rot.quat_multiply([1, 0, 0], [1, 0, 0, 0])


# --------------------------------------------------------------------------- hand-ball


def test_tasks_registered_with_idto():
    for name, model in (("hand-ball", "hand"), ("bimanual-box", "bimanual")):
        spec = load_task(name)
        assert "idto" in spec.planners and spec.model == model


def test_hand_ball_planner_follows_the_paper_settings_with_the_documented_changes():
    pl = build_idto_planner(hb.HAND_BALL)
    pr = pl.problem
    assert (pr.T, pr.h, pr.nq, pr.nv) == (40, 0.05, 23, 22)
    assert pl.solver.options.underactuation == "constrained"
    p = pr.contact.params
    assert (p.stiffness, p.smoothing, p.friction, p.stiction_velocity) == (100.0, 0.001, 1.0, 0.1)
    # Table II except the ball's position weight and the hand's running velocity weight (module
    # docstring); the free joint's dofs are 3 translations, then 3 rotations
    w = hb.HAND_BALL_POS_WEIGHT
    np.testing.assert_allclose(pr.Qq, [0.01] * 16 + [w] * 3 + [10.0] * 3)
    np.testing.assert_allclose(pr.Qf_q, [1.0] * 16 + [10 * w] * 3 + [100.0] * 3)
    np.testing.assert_allclose(pr.Qv, [hb.HAND_BALL_HAND_VEL_WEIGHT] * 16 + [1.0] * 6)
    assert w > 100.0  # the plans let the ball roll off the palm at Table II's 10 / 100
    assert pl.iterations_per_update == hb.HAND_BALL.iterations_per_update == 4
    assert pr.Z.shape == (22, 6)  # the ball's six unactuated dofs


def _hand_ball_nominal_at_home(T=40, h=0.05):
    """``(model, nominal, x)``: the hand-ball nominal on the bundled hand and its home state."""
    m = load_model("hand")
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    return m, hb._hand_ball_nominal(m, T, h), np.concatenate([d.qpos, d.qvel])


def test_hand_ball_nominal_turns_the_ball_about_the_axis_in_the_holding_pose():
    T, h = 40, 0.05
    m, nominal, x = _hand_ball_nominal_at_home(T, h)
    q, v = nominal(0.0, x)
    assert q.shape == (T + 1, 23) and v.shape == (T + 1, 22)
    qa, da = nom.free_joint(m, "ball")
    np.testing.assert_allclose(q[:, :16], np.tile(m.key_qpos[0, :16], (T + 1, 1)))  # hand holds still
    # the ball stays at home, lowered to where the planner's compliant palm carries its weight
    rest = m.key_qpos[0, qa:qa + 3] - [0, 0, nom.planner_rest_offset(0.05 * 9.81, 100.0, 0.001)]
    np.testing.assert_allclose(q[:, qa:qa + 3], np.tile(rest, (T + 1, 1)))
    target = hb.hand_ball_target()
    for k in range(T + 1):
        turned = min(hb.HAND_BALL_SPIN * k * h, math.pi)
        quat = q[k, qa + 3:qa + 7]
        assert rot.orientation_error(q[0, qa + 3:qa + 7], quat) == pytest.approx(turned, abs=1e-9)
        assert rot.orientation_error(quat, target) == pytest.approx(math.pi - turned, abs=1e-9)
    # finite-difference angular velocity: the spin rate about the axis (body = world frame at k = 0..)
    np.testing.assert_allclose(v[1, da + 3:da + 6], hb.HAND_BALL_SPIN * hb.HAND_BALL_AXIS, atol=1e-9)
    np.testing.assert_allclose(v[:, :16], 0.0)


def test_planner_rest_offset_carries_the_weight():
    from contactopt.contact.compliant import softplus_normal_force

    cases = ((0.49, 100.0, 0.001), (0.49, 1000.0, 0.001), (5.4, 1000.0, 0.005), (50.0, 100.0, 1e-3))
    for weight, k, sigma in cases:
        depth = nom.planner_rest_offset(weight, k, sigma)
        f = np.asarray(softplus_normal_force(-depth, k, sigma)[0])
        assert float(f) == pytest.approx(weight, rel=1e-9)
    # the Allegro ball sinks ~4.9 mm into the planner's palm (k = 100 N/m, σ = 1 mm)
    assert nom.planner_rest_offset(0.05 * 9.81, 100.0, 0.001) == pytest.approx(0.0049, abs=1e-4)
    assert nom.planner_rest_offset(0.05 * 9.81, 1000.0, 0.001) < 0  # stiff: it floats above
    with pytest.raises(ParameterError):
        nom.planner_rest_offset(0.0, 100.0, 0.001)
    with pytest.raises(ParameterError):
        nom.planner_rest_offset(1.0, 100.0, -0.001)


def test_hand_ball_error_and_ball_in_hand_on_plant_states():
    m = load_model("hand")
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    qa, _ = nom.free_joint(m, "ball")
    assert hb.hand_ball_error_deg(m, d) == pytest.approx(180.0)
    assert hb.ball_in_hand(m, d.qpos)
    d.qpos[qa + 3:qa + 7] = rot.quat_from_axis_angle(hb.HAND_BALL_AXIS, math.radians(150))
    assert hb.hand_ball_error_deg(m, d) == pytest.approx(30.0)
    d.qpos[qa:qa + 3] = [0.2, 0.0, 0.06]  # on the floor
    assert not hb.ball_in_hand(m, d.qpos)
    assert not hb._hand_ball_success(m, d)
    d.qpos[qa:qa + 3] = m.key_qpos[0, qa:qa + 3]
    d.qpos[qa + 3:qa + 7] = hb.hand_ball_target()
    assert hb._hand_ball_success(m, d)


def test_hand_ball_report_on_a_recorded_run():
    m = load_model("hand")
    n = 101
    t = np.linspace(0.0, 1.0, n)
    qpos = np.tile(m.key_qpos[0], (n, 1))
    err = np.linspace(180.0, 120.0, n)
    err[50] = 100.0
    qa, _ = nom.free_joint(m, "ball")
    qpos[80:, qa + 2] = 0.06  # dropped at t = 0.8
    res = SimpleNamespace(time=t, qpos=qpos, metric=err)
    rep = hb._hand_ball_report(hb.HAND_BALL, m, res, qpos[0])
    assert rep["initial_error_deg"] == 180.0 and rep["final_error_deg"] == 120.0
    assert rep["min_error_deg"] == 100.0
    err[50] = 150.0
    rep2 = hb._hand_ball_report(hb.HAND_BALL, m, res, qpos[0])
    # t = 0.79 is the last sample in the hand
    assert rep2["min_error_in_hand_deg"] == pytest.approx(180.0 - 0.6 * 79)
    assert rep2["min_error_deg"] == 120.0
    assert rep["ball_left_hand_at"] == pytest.approx(0.8)
    assert rep["ball_in_hand_at_end"] is False
    assert [s[0] for s in rep["error_deg_series"]] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


# --------------------------------------------------------------------------- bimanual-box


def test_box_targets_are_consistent_with_the_table():
    m = load_model("bimanual")
    qa, _ = nom.free_joint(m, "box")
    home = m.key_qpos[0, qa:qa + 3]
    slide, lift, edge = bn.BOX_TARGETS
    np.testing.assert_allclose(np.subtract(slide.pos, home), [0.10, 0, 0])
    np.testing.assert_allclose(np.subtract(lift.pos, slide.pos), [0, 0, 0.10])
    # balanced on an edge: the lowest corners touch the table top, two of them (an edge along y)
    R = np.empty(9)
    mujoco.mju_quat2Mat(R, np.array(edge.quat))
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * 0.075
    z = np.asarray(edge.pos)[2] + corners @ R.reshape(3, 3)[2]
    assert z.min() == pytest.approx(0.75, abs=1e-12)
    assert np.sum(np.isclose(z, 0.75)) == 2
    assert math.degrees(rot.orientation_error([1, 0, 0, 0], edge.quat)) == pytest.approx(45.0)


def test_box_pose_error_by_hand():
    target = bn.BoxTarget("t", (0.1, 0.0, 0.8), (1.0, 0.0, 0.0, 0.0))
    q = np.zeros(21)
    q[14:17] = [0.1, 0.03, 0.84]
    q[17:21] = rot.quat_from_axis_angle([0, 0, 1], math.radians(20))
    ep, eo = bn.box_pose_error(q, target, 14)
    assert ep == pytest.approx(0.05) and eo == pytest.approx(20.0)


def _box_qpos(m, pos, quat=(1, 0, 0, 0)):
    q = m.key_qpos[0].copy()
    qa, _ = nom.free_joint(m, "box")
    q[qa:qa + 3] = pos
    q[qa + 3:qa + 7] = quat
    return q


def test_target_schedule_switches_when_reached_or_after_the_budget():
    m = load_model("bimanual")
    qa, _ = nom.free_joint(m, "box")
    sched = bn.TargetSchedule(bn.BOX_TARGETS, qa, budget=2.0)
    far = _box_qpos(m, [0.0, 0.0, 0.825])
    assert sched.update(0.0, far).name == "slide"
    assert sched.update(1.0, far).name == "slide"
    # within 3 cm and 10°: reached
    near = _box_qpos(m, np.add(bn.BOX_TARGETS[0].pos, [0.02, 0, 0]), rot.quat_from_axis_angle([0, 0, 1], 0.1))
    assert sched.update(1.5, near).name == "lift"
    assert sched.switches == [(0, 1.5, "reached")]
    assert sched.update(3.0, far).name == "lift"
    assert sched.update(3.5, far).name == "edge"  # 2 s budget spent
    assert sched.switches[-1] == (1, 3.5, "budget")
    assert sched.update(100.0, far).name == "edge"  # the last target stays
    with pytest.raises(ParameterError):
        bn.TargetSchedule([], qa)
    with pytest.raises(ParameterError):
        bn.TargetSchedule(bn.BOX_TARGETS, qa, budget=0.0)


def test_bimanual_nominal_ramps_the_box_and_replay_rebuilds_its_schedule():
    m = load_model("bimanual")
    T, h = 20, 0.05
    nominal = bb._bimanual_nominal(m, T, h)
    qa, _ = nom.free_joint(m, "box")
    x = np.concatenate([m.key_qpos[0], np.zeros(m.nv)])
    q, v = nominal(0.0, x)
    assert q.shape == (T + 1, 21) and v.shape == (T + 1, 20)
    np.testing.assert_allclose(q[:, :14], np.tile(m.key_qpos[0, :14], (T + 1, 1)))
    step = np.linalg.norm(q[:, qa:qa + 3] - q[0, qa:qa + 3], axis=1)
    np.testing.assert_allclose(step, np.minimum(bn.BOX_SPEED * h * np.arange(T + 1), 0.10), atol=1e-12)
    np.testing.assert_allclose(q[-1, qa:qa + 3], bn.BOX_TARGETS[0].pos, atol=1e-12)
    np.testing.assert_allclose(v[1, qa:qa + 3], [bn.BOX_SPEED, 0, 0], atol=1e-9)
    # a fake run: the box reaches the slide target at 0.5 s, then stays; updates every 0.05 s
    times = np.round(np.arange(0.0, 6.0 + 1e-9, 0.01), 10)
    qpos = np.array([_box_qpos(m, bn.BOX_TARGETS[0].pos if t >= 0.5 else [0.0, 0.0, 0.825]) for t in times])
    updates = [SimpleNamespace(t_state=float(t)) for t in times[5::5]]
    for u in updates:
        i = int(np.searchsorted(times, u.t_state - 1e-9))
        nominal(u.t_state, np.concatenate([qpos[i], np.zeros(m.nv)]))
    res = SimpleNamespace(time=times, qpos=qpos, updates=updates)
    replay = bb.replay_schedule(m, res, x)
    assert replay.switches == nominal.schedule.switches
    assert replay.switches[0] == (0, 0.5, "reached")
    assert replay.switches[1][2] == "budget" and replay.switches[1][1] == pytest.approx(0.5 + bn.BOX_BUDGET)
    rep = bb._bimanual_report(bb.BIMANUAL_BOX, m, res, x)
    rows = rep["targets"]
    assert [r["reached"] for r in rows] == [True, False, False]
    assert rows[0]["reached_at"] == pytest.approx(0.5) and rows[0]["switched_by"] == "reached"
    assert rows[1]["end_error_m"] == pytest.approx(0.10) and rows[1]["switched_by"] == "budget"
    assert rep["targets_reached"] == 1


def test_bimanual_planner_follows_the_paper_settings_with_the_documented_changes():
    # the paper's settings (Table I / II), opt-in
    pl = build_idto_planner(bb.BIMANUAL_BOX, **bb.box_paper_overrides())
    pr = pl.problem
    assert (pr.T, pr.h, pr.nq, pr.nv) == (20, 0.05, 21, 20)
    assert pl.solver.options.underactuation == "penalty"
    p = pr.contact.params
    assert (p.stiffness, p.smoothing, p.friction, p.stiction_velocity) == (1000.0, 0.005, 0.2, 0.05)
    np.testing.assert_allclose(pr.Qq, [0.0] * 14 + [10.0] * 6)
    np.testing.assert_allclose(pr.Qf_q, [0.1] * 14 + [10.0] * 6)
    assert pr.unactuated_penalty == 1e3
    assert pl.initial_guess is None
    # the task's defaults: Table I / II except the arm position weights and μ (docs/experiments)
    pl = build_idto_planner(bb.BIMANUAL_BOX)
    pr = pl.problem
    assert pl.solver.options.underactuation == "penalty"
    p = pr.contact.params
    assert (p.stiffness, p.smoothing, p.stiction_velocity) == (1000.0, 0.005, 0.05)
    assert p.friction == bb.BOX_PLANNER_FRICTION
    np.testing.assert_allclose(pr.Qq, [bb.BOX_ARM_WEIGHT] * 14 + [10.0] * 6)
    np.testing.assert_allclose(pr.Qf_q, [bb.BOX_ARM_WEIGHT] * 14 + [10.0] * 6)
    assert pl.initial_guess is not None


def test_plant_end_effectors_have_torsional_friction_the_planner_ignores():
    m = load_model("bimanual")
    for side in ("left", "right"):
        g = m.geom(f"{side}_ee")
        assert g.condim[0] == 6  # soft-finger contact: torsional and rolling friction
        assert g.friction[1] == pytest.approx(0.02) and g.friction[0] == pytest.approx(0.5)
    # the pair with the box takes the larger condim and coefficients (MuJoCo's default mixing)
    d = mujoco.MjData(m)
    d.qpos[:] = bn.grasp_ik(m, m.key_qpos[0, 14:17], 0.01, m.key_qpos[0], pitch=bn.BOX_GRASP_PITCH)
    mujoco.mj_forward(m, d)
    ee = {m.geom("left_ee").id, m.geom("right_ee").id}
    box = m.body("box").id
    dims = [c.dim for c in d.contact[:d.ncon]
            if ({c.geom1, c.geom2} & ee) and box in (m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2])]
    assert dims and set(dims) == {6}


# --------------------------------------------------------------------------- closed loops


@pytest.mark.slow
def test_hand_ball_closed_loop_starts_turning_the_ball_and_keeps_it():
    from contactopt.tasks.idto_task import run_idto_task

    result, plant, _ = run_idto_task(hb.HAND_BALL, seconds=1.5, seed=0)
    err = result.metric
    assert err[0] == pytest.approx(180.0)
    assert err.min() < 175.0  # at least 5° turned toward the target ...
    assert hb.ball_in_hand(plant, result.qpos[-1])  # ... with the ball still in the hand
    assert result.failed_updates == 0


@pytest.mark.slow
def test_hand_ball_closed_loop_turns_the_ball_and_keeps_it_in_the_hand():
    """Closed loop (sync mode, 0.1 s policy lag) on seeds 0–3: in 6.5 s the fingers turn the
    ball at least 30° toward the target on every seed, keep it in the hand on at least 3 of the
    4, and no update fails.  The 180° success itself is rarer (README: `bench tasks`) and seed by
    seed it depends on the machine's floating point: this test once pinned seed 0's success,
    which held on one machine and turned the ball only 81° on another (an AMD EPYC)."""
    from contactopt.tasks.idto_task import run_idto_task

    kept = 0
    for seed in range(4):
        result, plant, _ = run_idto_task(hb.HAND_BALL, seconds=6.5, seed=seed)
        # the metric: degrees still to turn
        assert result.metric[0] == pytest.approx(180.0, abs=1.0)
        assert result.metric.min() <= 150.0, seed
        assert result.failed_updates == 0
        kept += all(hb.ball_in_hand(plant, q) for q in result.qpos)
    assert kept >= 3


@pytest.mark.slow
def test_bimanual_box_closed_loop_with_the_paper_settings_slides_the_box_to_the_first_target():
    from contactopt.tasks.idto_task import run_idto_task

    # the paper's settings: the left arm pushes the box along the table
    result, plant, x0 = run_idto_task(bb.BIMANUAL_BOX, seconds=1.0, seed=0, **bb.box_paper_overrides())
    qa, _ = nom.free_joint(plant, "box")
    sched = bb.replay_schedule(plant, result, x0)
    assert sched.switches and sched.switches[0][0] == 0 and sched.switches[0][2] == "reached"
    assert result.qpos[-1, qa] - x0[qa] > 0.06  # pushed along the table (+x) ...
    assert abs(result.qpos[-1, qa + 2] - x0[qa + 2]) < 0.01  # ... not lifted or tipped
    assert result.failed_updates == 0


# --------------------------------------------------------------------------- bimanual grasp experiment


def _ee(m, q):
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    return d.site("left_ee").xpos.copy(), d.site("right_ee").xpos.copy()


def test_grasp_ik_puts_the_end_effectors_on_the_box_faces():
    m = load_model("bimanual")
    box = np.array([0.05, 0.0, 0.88])
    q = bn.grasp_ik(m, box, 0.02, m.key_qpos[0], height=-0.01)
    left, right = _ee(m, q)
    off = 0.075 + 0.05 - 0.02
    np.testing.assert_allclose(left, box + [-off, 0, -0.01], atol=2e-3)
    np.testing.assert_allclose(right, box + [off, 0, -0.01], atol=2e-3)
    qa, _ = nom.free_joint(m, "box")
    np.testing.assert_array_equal(q[qa:], m.key_qpos[0, qa:])  # only the arms move
    arms = np.r_[bn.arm_qpos_indices(m, "left"), bn.arm_qpos_indices(m, "right")]
    np.testing.assert_array_equal(np.sort(arms), np.arange(14))
    with pytest.raises(ParameterError):
        bn.grasp_ik(m, box, 0.1, m.key_qpos[0])  # deeper than the half side
    with pytest.raises(ParameterError):
        bn.arm_qpos_indices(m, "middle")


def test_grasp_nominal_carries_the_hands_with_the_box():
    m = load_model("bimanual")
    T, h = 20, 0.05
    up = bn.BoxTarget("up", (0.0, 0.0, 0.925), (1.0, 0.0, 0.0, 0.0))
    nominal = bn.make_bimanual_nominal(("up",), targets=(up,))(m, T, h)
    x = np.concatenate([m.key_qpos[0], np.zeros(m.nv)])
    q, v = nominal(0.0, x)
    assert q.shape == (T + 1, 21) and v.shape == (T + 1, 20)
    qa, _ = nom.free_joint(m, "box")
    off = 0.075 + 0.05 - bn.BOX_SQUEEZE
    for k in (0, T):  # the ramp's two ends: exact grasps of the nominal box
        left, right = _ee(m, q[k])
        np.testing.assert_allclose(left, q[k, qa:qa + 3] + [-off, 0, bn.BOX_GRASP_HEIGHT], atol=3e-3)
        np.testing.assert_allclose(right, q[k, qa:qa + 3] + [off, 0, bn.BOX_GRASP_HEIGHT], atol=3e-3)
    np.testing.assert_allclose(q[-1, qa:qa + 3], up.pos, atol=1e-12)
    assert np.abs(v[1:, :14]).max() > 0  # the arms move with the box
    with pytest.raises(ParameterError):
        bn.make_bimanual_nominal(("nowhere",))
    ov = bb.box_grasp_overrides()
    assert ov["contact"]["friction"] == bb.BOX_PLANNER_FRICTION
    np.testing.assert_allclose(ov["weights"]["Qq"][:14], bb.BOX_ARM_WEIGHT)


def test_grasp_ik_turns_with_the_box_per_arm_pitch_and_height():
    m = load_model("bimanual")
    box = np.array([0.10, 0.0, 0.90])
    quat = rot.quat_from_axis_angle([0, 1, 0], math.radians(30))
    R = np.empty(9)
    mujoco.mju_quat2Mat(R, quat)
    R = R.reshape(3, 3)
    q = bn.grasp_ik(m, box, 0.03, m.key_qpos[0], box_quat=quat, height=(0.02, -0.01), pitch=(-0.6, -0.2))
    left, right = _ee(m, q)
    off = 0.075 + 0.05 - 0.03
    np.testing.assert_allclose(left, box + R @ [-off, 0, 0.02], atol=2e-3)
    np.testing.assert_allclose(right, box + R @ [off, 0, -0.01], atol=2e-3)
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    for side, sgn, pitch in (("left", 1, -0.6), ("right", -1, -0.2)):  # flange axes pitched as asked
        z = d.xmat[m.site_bodyid[m.site(f"{side}_ee").id]].reshape(3, 3)[:, 2]
        np.testing.assert_allclose(z, [sgn * math.cos(pitch), 0, math.sin(pitch)], atol=1e-2)
    with pytest.raises(ParameterError):
        bn.grasp_ik(m, box, 0.03, m.key_qpos[0], box_quat=[0, 0, 0, 0])


def test_right_hand_reaches_the_lifted_box_only_with_its_level_grasp():
    """At 45° (home's pitch) the right elbow hits its limit short of the box's right face at the
    lift target (the grasp experiment's box lagged 2-3 cm in x); level (BOX_GRASP_PITCH) it reaches."""
    m = load_model("bimanual")
    lift = np.array(bn.BOX_TARGETS[1].pos)
    off = 0.075 + 0.05 - bn.BOX_SQUEEZE
    q = bn.grasp_ik(m, lift, bn.BOX_SQUEEZE, m.key_qpos[0], pitch=bn.BOX_GRASP_PITCH)
    left, right = _ee(m, q)
    np.testing.assert_allclose(left, lift + [-off, 0, 0], atol=2e-3)
    np.testing.assert_allclose(right, lift + [off, 0, 0], atol=2e-3)
    _, right45 = _ee(m, bn.grasp_ik(m, lift, bn.BOX_SQUEEZE, m.key_qpos[0]))
    assert np.linalg.norm(right45 - (lift + [off, 0, 0])) > 0.02


def test_tip_nominal_presses_the_upper_left_face_and_waits_with_the_right_hand():
    m = load_model("bimanual")
    T, h = 20, 0.05
    qa, _ = nom.free_joint(m, "box")
    edge = bn.BOX_TARGETS[2]
    nominal = bn.make_bimanual_nominal(targets=(edge,), tip_targets=("edge",))(m, T, h)
    x = np.concatenate([_box_qpos(m, [0.10, 0.0, 0.825]), np.zeros(m.nv)])
    q, v = nominal(0.0, x)
    assert v.shape == (T + 1, 20) and np.isfinite(v).all()
    np.testing.assert_allclose(q[-1, qa:qa + 3], edge.pos, atol=1e-12)  # the ramp reaches the target
    off = 0.075 + 0.05 - bn.BOX_TIP_SQUEEZE
    for k in (0, 10, T):  # the left hand on the turning box's upper left face (grasp knots)
        R = np.empty(9)
        mujoco.mju_quat2Mat(R, q[k, qa + 3:qa + 7])
        left, right = _ee(m, q[k])
        face = R.reshape(3, 3) @ [-off, 0, bn.BOX_TIP_LEFT_HEIGHT]
        np.testing.assert_allclose(left, q[k, qa:qa + 3] + face, atol=3e-3)
        np.testing.assert_allclose(right, bn.BOX_TIP_STOP, atol=3e-3)  # the stop
    with pytest.raises(ParameterError):
        bn.make_bimanual_nominal(tip_targets=("nowhere",))
    with pytest.raises(ParameterError):
        bn.make_bimanual_nominal(("edge",), tip_targets=("edge",))
    with pytest.raises(ParameterError):
        bn.make_bimanual_nominal(speed=0.0)


@pytest.mark.slow
def test_bimanual_grasp_lifts_the_box_where_the_paper_settings_do_not():
    from contactopt.tasks.idto_task import run_idto_task

    qa = 14
    # the paper's settings (arms' nominal at home, no arm running cost, μ 0.2): slid, not lifted
    res, plant, x0 = run_idto_task(bb.BIMANUAL_BOX, seconds=1.6, seed=1, **bb.box_paper_overrides())
    assert (res.qpos[:, qa + 2] - x0[qa + 2]).max() < 0.01
    rows = bb._bimanual_report(bb.BIMANUAL_BOX, plant, res, x0)["targets"]
    assert [r["reached"] for r in rows] == [True, False, False]
    # the task's grasp: slid and lifted 10 cm (the lift target reached at 1.36 s)
    res, plant, x0 = run_idto_task(bb.BIMANUAL_BOX, seconds=1.6, seed=1)
    assert (res.qpos[:, qa + 2] - x0[qa + 2]).max() > 0.07
    rows = bb._bimanual_report(bb.BIMANUAL_BOX, plant, res, x0)["targets"]
    assert [r["reached"] for r in rows[:2]] == [True, True]
    assert res.failed_updates == 0


@pytest.mark.slow
def test_bimanual_box_slides_lifts_and_sets_the_box_on_its_edge_on_a_seed_range():
    """Seeds 8-23 of the README's range 0:32 (seeds 0-7 are the ones the grasp was first tuned on;
    sync mode, the task's fixed 50 ms lag, so deterministic on one machine): at least 11 of 16
    succeed, each reaching the slide, the lift and the edge target in order, the lift reached (not
    skipped after its budget), the box still on its edge at the end.  When this was written they
    gave 13/16 (``contactopt bench tasks --tasks bimanual-box --seeds 0:32``: 27/32), and 3/16 with
    the old recipe (the left hand grasping at home's 45°, the hands closing over the first plan)."""
    from contactopt.tasks.idto_task import run_idto_task

    successes = 0
    for seed in range(8, 24):
        result, plant, x0 = run_idto_task(bb.BIMANUAL_BOX, seed=seed)
        assert result.failed_updates == 0
        if not result.success:
            continue
        successes += 1
        rows = bb._bimanual_report(bb.BIMANUAL_BOX, plant, result, x0)["targets"]
        assert [r["reached"] for r in rows] == [True, True, True]
        assert rows[0]["reached_at"] < rows[1]["reached_at"] < rows[2]["reached_at"]
        assert rows[1]["switched_by"] == "reached"  # lifted, not skipped after the budget
        qa, _ = nom.free_joint(plant, "box")
        ep, eo = bn.box_pose_error(result.qpos[-1], bn.BOX_TARGETS[-1], qa)
        assert ep < bn.BOX_TOL_POS and eo < bn.BOX_TOL_DEG  # still on its edge at the end
    assert successes >= 11, f"{successes}/16 of seeds 8-23"


def test_box_success_needs_every_target_in_order():
    m = load_model("bimanual")
    d = mujoco.MjData(m)
    slide, lift, edge = bn.BOX_TARGETS

    def at(target, ok=True):
        d.qpos[:] = _box_qpos(m, target.pos, target.quat)
        return ok

    success = bb.box_success_factory(None, 10.0)
    at(edge)
    assert not success(m, d)  # tipped onto the edge without the slide and the lift
    at(lift)
    assert not success(m, d)  # the lift before the slide does not count
    at(slide)
    assert not success(m, d)
    at(edge)
    assert not success(m, d)  # slid, not lifted
    at(lift)
    assert not success(m, d)
    at(edge)
    assert success(m, d)
    assert bb.box_success_factory(None, 10.0)(m, d) is False  # a fresh run starts over


def test_hand_ball_nominal_leads_a_stalled_ball_on_a_schedule_that_restarts_with_a_new_run():
    m, nominal, x = _hand_ball_nominal_at_home()
    qa, _ = nom.free_joint(m, "ball")
    target = hb.hand_ball_target()

    def lead(t):  # how far the ramp's first knot is ahead of the (stalled) measured ball
        q, _ = nominal(t, x)
        return rot.orientation_error(x[qa + 3:qa + 7], q[0, qa + 3:qa + 7])

    assert lead(0.0) == pytest.approx(0.0, abs=1e-9)
    assert lead(0.4) == pytest.approx(hb.HAND_BALL_SPIN * 0.4, abs=1e-9)  # behind the schedule
    assert lead(5.0) == pytest.approx(hb.HAND_BALL_LEAD, abs=1e-9)  # at most the bound
    assert lead(0.0) == pytest.approx(0.0, abs=1e-9)  # time went back: a new run, a new schedule
    # a ball ahead of the schedule starts where it is
    ahead = x.copy()
    ahead[qa + 3:qa + 7] = rot.rotate_toward(x[qa + 3:qa + 7], target, 1.0)
    q, _ = nominal(0.5, ahead)
    start = q[0, qa + 3:qa + 7]
    assert rot.orientation_error(ahead[qa + 3:qa + 7], start) == pytest.approx(0.0, abs=1e-9)
