"""Goal-directed dynamics on a humanoid its defaults were not tuned on (issue 20, GDD bullet).

The model is ``tests/models/biped_gdd.xml``: a small 3-D biped unlike the bundled humanoid (root
at the chest, light box feet with 2-DoF ankles, trunk ahead of the ankles, 4 ms step, starts in
the air).  The automatic session (:func:`auto_reach_spec`) must set it down, keep it standing
under its posture term alone with the documented defaults, and derive its weights from the
model so that the same model with every mass doubled behaves identically.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import mujoco
import numpy as np
import pytest

from contactopt.solvers.gdd.reach_spec import (
    FLOOR_PENETRATION,
    auto_reach_spec,
    balance_stiffness,
    floating_root_dofs,
    support_price,
)
from contactopt.solvers.gdd.sessions import ReachSession, run_session
from contactopt.solvers.gdd.solver import gdd_step

BIPED = str(Path(__file__).parent / "models" / "biped_gdd.xml")


def _posture_only(path, seconds):
    """The automatic session with its documented defaults, no goals and no centre-of-mass term:
    the posture term (and the damping regulariser) alone."""
    return replace(auto_reach_spec(path, seconds), drags=(), com_weight=0.0)


def _stand(session, seconds, push, rng):
    """Step ``session`` for ``seconds`` after a random push (joint and root velocities); returns
    the lowest height of the fall-monitored body and whether both feet touch the floor at the end."""
    m, d = session.model, session.data
    d.qvel[:] = push * rng.uniform(-1.0, 1.0, m.nv)
    body = session.fall_ids[0][1]
    lowest = math.inf
    for _ in range(round(seconds / m.opt.timestep)):
        mujoco.mj_kinematics(m, d)
        session.update_goals()
        result = gdd_step(m, d, session.cost, session.solver)
        assert np.isfinite(result.ctrl).all()
        lowest = min(lowest, float(d.xpos[body, 2]))
    mujoco.mj_forward(m, d)
    return lowest, bool(session.support_contacts().all())


def test_biped_is_set_down_with_supports_and_model_gains():
    spec = auto_reach_spec(BIPED, 2.0)
    m = mujoco.MjModel.from_xml_path(BIPED)
    assert spec.lower_root == pytest.approx(0.038 + FLOOR_PENETRATION, abs=1e-6)  # its soles start 38 mm up
    assert set(spec.support_bodies) == {"left_foot", "right_foot"}
    assert {d.frame for d in spec.drags} <= {"left_forearm", "right_forearm"}  # not the legs
    assert spec.posture_root_kp is None and spec.effort_scale is None  # left to the model
    session = ReachSession(spec)
    d = session.data
    assert d.ncon >= 2 and session.support_contacts().all()
    # the base's posture is as fast as the standing pendulum needs: 4 g / h
    h = d.subtree_com[1, 2] - min(d.contact.pos[c, 2] for c in range(d.ncon))
    assert session.root_kp == pytest.approx(4.0 * 9.81 / h, rel=1e-3)
    assert session.root_kp > spec.posture_kp
    root = floating_root_dofs(m)
    np.testing.assert_allclose(session.posture_target.kp[root], session.root_kp)
    # light feet: the force cost overprices the ankle torques by ~10³, the weights follow
    assert support_price(m, d, session.support_ids) > 1000.0
    assert session.effort_scale > 3.0
    assert session.posture.effective_weight == pytest.approx(session.effort_scale * spec.posture_weight)


@pytest.mark.parametrize("seed", range(4))
def test_posture_term_alone_keeps_the_biped_standing(seed):
    session = ReachSession(_posture_only(BIPED, 3.0))
    standing = session.data.xpos[session.fall_ids[0][1], 2]
    lowest, on_feet = _stand(session, 3.0, 0.2 * (seed > 0), np.random.default_rng(seed))
    assert lowest > standing - 0.05  # no fall, not even a crouch (fall height: half of it)
    assert on_feet


def test_posture_term_alone_never_falls_over_seeded_sessions():
    # the scripted sessions of the automatic spec without goals and without the centre of mass
    for seed in range(3):
        spec = replace(auto_reach_spec(BIPED, 2.0, seed), drags=(), com_weight=0.0)
        result = run_session(spec)
        assert result.error is None and not result.falls
        assert result.support.all()
        assert np.median(result.iterations) <= 3


def test_reach_sessions_do_not_fall():
    for seed in range(2):
        result = run_session(auto_reach_spec(BIPED, 3.0, seed))
        assert result.error is None and not result.falls, result.falls
        report = result.report()
        assert report["gdd"]["iterations_median"] <= 3
        goal = result.goal_results()[0]
        assert goal["final_distance"] < goal["initial_distance"]


def _doubled(tmp_path) -> str:
    """The biped with every mass and inertia doubled (and, so that the same accelerations need
    the same controls, its armature, joint damping and motor gears)."""
    spec = mujoco.MjSpec.from_file(BIPED)
    for g in spec.geoms:
        g.density *= 2.0
    for j in spec.joints:
        j.armature *= 2.0
        j.damping *= 2.0
        j.stiffness *= 2.0
    for a in spec.actuators:
        a.gear = 2.0 * np.asarray(a.gear)
    path = tmp_path / "biped_gdd_heavy.xml"
    path.write_text(spec.to_xml())
    return str(path)


def test_default_weights_scale_with_the_model(tmp_path):
    heavy = _doubled(tmp_path)
    m1 = mujoco.MjModel.from_xml_path(BIPED)
    m2 = mujoco.MjModel.from_xml_path(heavy)
    assert m2.body_subtreemass[0] == pytest.approx(2.0 * m1.body_subtreemass[0], rel=1e-6)
    s1, s2 = auto_reach_spec(BIPED, 1.0), auto_reach_spec(heavy, 1.0)
    assert s2.ee_weight == pytest.approx(2.0 * s1.ee_weight, rel=1e-5)  # kg: effective mass
    assert s2.com_weight == pytest.approx(2.0 * s1.com_weight, rel=1e-5)  # kg: total mass
    assert s2.posture_weight == s1.posture_weight  # dimensionless (mass metric)
    assert s2.drags == s1.drags and s2.lower_root == pytest.approx(s1.lower_root)
    a, b = ReachSession(s1, model=m1), ReachSession(s2, model=m2)
    assert b.root_kp == pytest.approx(a.root_kp, rel=1e-6)
    assert b.effort_scale == pytest.approx(a.effort_scale, rel=1e-5)  # κ is a ratio
    # the same cost up to a factor 2 -> the same motion: a goal-directed second with one drag
    r1, r2 = run_session(s1, model=m1), run_session(s2, model=m2)
    assert not r1.falls and not r2.falls
    np.testing.assert_allclose(r2.qpos, r1.qpos, atol=1e-4)
    np.testing.assert_allclose(r2.ctrl, r1.ctrl, atol=1e-3)


def test_balance_stiffness_needs_a_standing_floating_base():
    hand = mujoco.MjModel.from_xml_path(str(Path(__file__).parents[1] / "src" / "contactopt" / "models"
                                            / "hand.xml"))
    d = mujoco.MjData(hand)
    mujoco.mj_forward(hand, d)
    assert balance_stiffness(hand, d) is None  # no floating base
    assert support_price(hand, d, []) == 1.0
    m = mujoco.MjModel.from_xml_path(BIPED)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    assert d.ncon == 0 and balance_stiffness(m, d) is None  # in the air: nothing to balance on
