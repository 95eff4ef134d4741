"""Reach the target site with the tendon-driven arm's hand (``tendon_arm.xml``).

The arm starts hanging-ish at random (shoulder 0.3–1.5 rad below the horizontal, elbow ±1
rad, ±0.5 rad/s).  Success: the hand within 3 cm of the ``target`` site for 0.5 s.
"""
import numpy as np

import contactopt
from contactopt.costs import Control, CostTerm, Qvel, SitePosition


def _target(model):
    return model.site("target").pos.copy()


def cost(model):
    return [CostTerm(SitePosition(model, "hand", _target(model), name="reach"), weight=10.0),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=1e-3)]


def random_pose(model, data, rng):
    data.qpos[:] = [rng.uniform(0.3, 1.5), rng.uniform(-1.0, 1.0)]
    data.qvel[:] = rng.uniform(-0.5, 0.5, size=2)


def reached(model, data):
    return np.linalg.norm(data.site("hand").xpos - _target(model)) < 0.03


TASK = contactopt.Task(name="style-tendon-arm", model="tendon_arm.xml", cost=cost,
                       initial_state=random_pose, success=reached, success_hold=0.5, duration=4.0,
                       description="two-link arm driven through spatial and fixed tendons: reach")
