"""GDD reaching sessions run past their default length (issue 26, GDD bullet).

``humanoid-reach --seconds 20`` used to miss goals and, run longer, fall (seed 0 at 90 s, seed 1
at 110 s): its drags were offsets from where the hand was when each drag started, so the four
goals added up cycle after cycle and walked out of reach, and every release made the sagged
whole pose the posture reference, so the stance crouched a little more each time.  The goals
are now anchored at the hands' rest positions and kept within reach, and a release only updates
the released arm's reference.  The presets were tuned on seeds 0–3; the regression uses seeds
100–103 (see docs/experiments/gdd-long-sessions.md).
"""

from __future__ import annotations

import json

import mujoco
import numpy as np
import pytest

from contactopt.errors import ParameterError
from contactopt.model import load_model
from contactopt.solvers.gdd.reach_session import ReachSession
from contactopt.solvers.gdd.reach_spec import (
    REACH_FRACTION,
    _initial_data,
    limb_joints,
    limb_reach,
    reachable_offset,
)
from contactopt.solvers.gdd.sessions import (
    Drag,
    ReachSpec,
    hand_reach_spec,
    humanoid_reach_spec,
    run_session,
)


def test_drag_anchor_home_moves_from_the_frame_to_home_plus_offset():
    d = Drag("f", (0.1, 0.0, 0.0), start=1.0, drag=0.5, hold=0.5, anchor="home")
    origin, home = np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.0, 0.0])
    np.testing.assert_allclose(d.goal_at(1.0, origin, home), origin)
    np.testing.assert_allclose(d.goal_at(1.5, origin, home), [0.1, 0.0, 0.0])
    np.testing.assert_allclose(d.final(origin, home), [0.1, 0.0, 0.0])
    s = Drag("f", (0.1, 0.0, 0.0), start=1.0, drag=0.5)  # default: from the drag's start
    assert s.anchor == "start"
    np.testing.assert_allclose(s.goal_at(1.5, origin), [0.1, 0.0, 1.0])
    with pytest.raises(ParameterError, match="anchor"):
        Drag("f", (0, 0, 0), 0.0, anchor="world")
    with pytest.raises(ParameterError, match="home position"):
        d.final(origin)


def test_humanoid_goals_repeat_within_reach_and_round_trip():
    spec = humanoid_reach_spec(seconds=20.0, seed=5)
    assert spec.posture_release == "limb" and all(d.anchor == "home" for d in spec.drags)
    assert len(spec.drags) == 11
    for a, b in zip(spec.drags, spec.drags[4:]):  # the script repeats unchanged
        assert a.frame == b.frame and a.offset == b.offset
    model = load_model("humanoid")
    data = _initial_data(model, "home", spec.lower_root)
    sup = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in spec.support_bodies]
    hands = {f: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, f.replace("hand", "lower_arm"))
             for f in ("left_hand", "right_hand")}
    for d in spec.drags[:4]:
        others = [b for f, b in hands.items() if f != d.frame] + sup
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j)
                 for j in limb_joints(model, hands[d.frame], others)]
        side = d.frame.split("_")[0]
        assert sorted(names) == sorted(f"{side}_{j}" for j in ("elbow", "shoulder_x", "shoulder_y"))
        base, reach = limb_reach(model, data, d.frame, others)
        assert 0.4 < reach < 0.7  # shoulder -> elbow -> hand of the bundled humanoid
        sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, d.frame)
        goal = data.site_xpos[sid] + np.asarray(d.offset)
        assert np.linalg.norm(goal - base) <= REACH_FRACTION * reach + 1e-9
        # a goal already within reach is left alone
        assert reachable_offset(model, data, d.frame, d.offset, others) == pytest.approx(d.offset)
    back = ReachSpec.from_json(spec.to_json())
    assert back == spec
    old = json.loads(spec.to_json())  # a spec written before anchors and releases existed
    for x in old["drags"]:
        del x["anchor"]
    del old["posture_release"]
    legacy = ReachSpec.from_json(json.dumps(old))
    assert legacy.posture_release == "pose" and all(d.anchor == "start" for d in legacy.drags)
    with pytest.raises(ParameterError, match="posture_release"):
        ReachSpec(model="humanoid", drags=(), seconds=1.0, posture_release="all")


def test_limb_release_keeps_the_stance_reference():
    spec = humanoid_reach_spec(seconds=4.0)  # goals on both hands: each arm is its own limb
    assert {d.frame for d in spec.drags} == {"left_hand", "right_hand"}
    session = ReachSession(spec)
    q0 = session.qref.copy()
    m, d = session.model, session.data
    d.time = spec.drags[0].start + 0.01
    session.update_goals()
    assert session.active == 0
    np.testing.assert_allclose(session.target, session.home["right_hand"] + np.asarray(spec.drags[0].offset))
    d.qpos[:] += 0.05  # the whole pose moved during the reach
    mujoco.mj_kinematics(m, d)
    d.time = spec.drags[0].end + 0.01
    session.update_goals()
    assert session.active == -1 and np.isnan(session.target).all()
    arm = [m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"right_{j}")]
           for j in ("shoulder_y", "shoulder_x", "elbow")]
    np.testing.assert_allclose(session.qref[arm], d.qpos[arm])  # the released arm holds its pose
    rest = np.setdiff1d(np.arange(m.nq), arm)
    np.testing.assert_array_equal(session.qref[rest], q0[rest])  # the stance keeps its reference


@pytest.mark.slow
@pytest.mark.parametrize("seed", [100, 101, 102, 103])
def test_humanoid_reach_20s_succeeds_on_unseen_seeds(seed):
    # tuned on seeds 0-3; before the fix seed 100 missed 3 of 11 goals
    result = run_session(humanoid_reach_spec(seconds=20.0, seed=seed))
    report = result.report()
    assert report["error"] is None and not report["falls"]
    assert report["goals_completed"] == 11 and report["goals_reached"] == 11
    assert report["success"] is True and report["support_contact_fraction"] == 1.0
    assert abs(result.qpos[-1, 2] - result.qpos[0, 2]) < 0.02  # the stance does not sink


@pytest.mark.slow
def test_hand_reach_20s_keeps_the_ball():
    # drag-relative fingertip goals added up and dropped the ball at 7.2 s (seed 0)
    report = run_session(hand_reach_spec(seconds=20.0, seed=101)).report()
    assert report["success"] is True and not report["drops"]
    assert report["goals_reached"] == report["goals_completed"] == 18

