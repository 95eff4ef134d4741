"""Reach the target site with the fingertip of the position-servoed arm (``reacher.xml``).

The arm starts hanging-ish at random (shoulder 0.5–2.5 rad below the horizontal, elbow ±1.5
rad, ±0.5 rad/s); the target is the model's ``target`` site.  Success: the fingertip within
3 cm of it for 0.5 s.
"""
import numpy as np

import contactopt
from contactopt.costs import Control, CostTerm, Qvel, SitePosition


def _target(model):
    return model.site("target").pos.copy()      # a worldbody site: its pos is its world position


def cost(model):
    return [CostTerm(SitePosition(model, "fingertip", _target(model), name="reach"), weight=10.0),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=1e-3)]


def random_pose(model, data, rng):
    data.qpos[:] = [rng.uniform(0.5, 2.5), rng.uniform(-1.5, 1.5)]
    data.qvel[:] = rng.uniform(-0.5, 0.5, size=2)
    data.ctrl[:] = data.qpos                    # the servos start holding the start pose


def reached(model, data):
    return np.linalg.norm(data.site("fingertip").xpos - _target(model)) < 0.03


TASK = contactopt.Task(name="style-reacher", model="reacher.xml", cost=cost, initial_state=random_pose,
                       success=reached, success_hold=0.5, duration=4.0,
                       description="two-link reacher with position servos, under gravity")
