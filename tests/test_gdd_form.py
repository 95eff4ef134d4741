"""The scripted GDD reaching sessions as planner-independent Tasks (``tasks/gdd_form.py``)."""
import mujoco
import numpy as np
import pytest

from contactopt import planners
from contactopt.errors import ParameterError
from contactopt.mpc.task_runner import run_task
from contactopt.solvers.gdd.sessions import humanoid_reach_spec
from contactopt.tasks import load_task
from contactopt.tasks.gdd_form import goal_schedule


def test_the_goal_schedule_follows_the_drags_and_stays_where_they_leave_it():
    spec = humanoid_reach_spec()
    frames = {d.frame for d in spec.drags}
    home = {f: np.full(3, float(i)) for i, f in enumerate(sorted(frames))}
    goal = goal_schedule(spec, home)
    first = {}
    for d in spec.drags:
        first.setdefault(d.frame, d)
    for f, d in first.items():
        np.testing.assert_allclose(goal(f, d.start - 1e-6), home[f])  # at home before its first drag
    for d in spec.drags:
        end = goal(d.frame, d.start + d.drag)
        np.testing.assert_allclose(end, d.final(None, home[d.frame]))  # anchored at home
        np.testing.assert_allclose(goal(d.frame, d.end + 0.05), end)  # held after the release
        mid = goal(d.frame, d.start + 0.5 * d.drag)  # on the way (minimum jerk: halfway at τ = ½)
        before = goal(d.frame, d.start)
        np.testing.assert_allclose(mid, 0.5 * (before + end), atol=1e-12)


@pytest.mark.parametrize("name", ["humanoid-reach", "hand-reach"])
def test_the_forms_run_with_gdd_only(name):
    task = load_task(name).task()
    assert task.default_planner == "gdd"
    for other in ("ilqg", "idto"):
        with pytest.raises(ParameterError, match=rf"planner '{other}' cannot run task {name}: cost term goal\("):
            planners.make(other, task)
    m = task.load_plant()
    d = mujoco.MjData(m)
    poses = []
    for seed in (0, 1):
        task.reset(m, d, seed)
        poses.append(d.qpos.copy())
    assert 0 < np.abs(poses[0] - poses[1]).max() <= 0.05  # the seed draws the initial pose
    # a fall or a drop is the task's failure
    body, height = (("pelvis", 0.6) if name == "humanoid-reach" else ("ball", 0.15))
    task.reset(m, d, 0)
    assert not task.failure(m, d)
    free = next(j for j in range(m.njnt) if m.jnt_bodyid[j] == m.body(body).id)
    d.qpos[m.jnt_qposadr[free] + 2] = height - 0.1
    mujoco.mj_kinematics(m, d)
    assert task.failure(m, d)


@pytest.mark.realtime
@pytest.mark.parametrize("name", ["humanoid-reach", "hand-reach"])
def test_the_forms_reach_every_goal_over_a_seed_range(name):
    task = load_task(name).task()
    reports = [run_task(task, "gdd", seed=seed).report for seed in range(4)]
    # measured (bench tasks --tasks task:NAME --planner gdd): 32/32 on seeds 0–31 and on 1000–1031
    assert sum(r["success"] for r in reports) >= 3, [(r["time_to_success"], r["time_of_failure"]) for r in reports]
    # the success test latches when the last goal is reached, after the last drag has started
    spec = humanoid_reach_spec() if name == "humanoid-reach" else None
    if spec is not None:
        assert all(r["time_to_success"] >= spec.drags[-1].start for r in reports if r["success"])
