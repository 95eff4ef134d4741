"""Turn the hinged bar with the two-hinge finger until its pointer is up (``finger.xml``).

Start: the bar's pointer 0.8–3.1 rad from up on a random side, at rest; the finger at a
random pose (±1.2 rad per joint) that does not touch the bar.  Cost: the bar's angle (wrapped:
the bar's hinge is a circle), a weak pull of the fingertip toward the bar's hub (so a plan
that has not touched the bar yet still has a gradient), joint speeds and torques.
Success: the pointer within 0.2 rad of up for 0.5 s.
"""
import mujoco
import numpy as np

import contactopt
from contactopt.costs import Control, CostTerm, Qpos, Qvel, SitePosition


def cost(model):
    hub = model.body("spinner").pos.copy()
    return [CostTerm(Qpos(model, joints=["spinner"], name="turn"), weight=1.0),
            CostTerm(SitePosition(model, "fingertip", hub, name="near"), weight=0.1),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=0.01)]


def random_start(model, data, rng):
    data.joint("spinner").qpos[0] = rng.choice([-1.0, 1.0]) * rng.uniform(0.8, 3.1)
    for _ in range(1000):
        data.joint("proximal").qpos[0] = rng.uniform(-1.2, 1.2)
        data.joint("distal").qpos[0] = rng.uniform(-1.2, 1.2)
        mujoco.mj_forward(model, data)
        if data.ncon == 0:
            return
    raise RuntimeError("no contact-free finger pose found")


def pointer_up(model, data):
    return np.cos(data.joint("spinner").qpos[0]) > np.cos(0.2)


TASK = contactopt.Task(name="style-finger-turn", model="finger.xml", cost=cost, initial_state=random_start,
                       success=pointer_up, success_hold=0.5, duration=6.0,
                       description="two-hinge finger turns a free hinged bar (elliptic cones)")
