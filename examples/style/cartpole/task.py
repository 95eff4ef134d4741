"""Swing the cart-pole up and balance it near the rail's centre (``cartpole.xml``).

The control is the cart's target speed (a velocity servo).  The pole's zero is upright; it
starts hanging (π ± 0.2 rad) with the cart anywhere in ±0.3 m.  Success: the pole within 18°
of upright and the cart within 0.4 m of the centre, for 1 s.
"""
import numpy as np

import contactopt
from contactopt.costs import Control, CostTerm, Qpos, Qvel


def cost(model):
    return [CostTerm(Qpos(model, joints=["hinge"], name="pole"), weight=1.0),
            CostTerm(Qpos(model, joints=["slider"], name="cart"), weight=0.2),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=1e-3)]


def hanging(model, data, rng):
    data.qpos[:] = [rng.uniform(-0.3, 0.3), np.pi + rng.uniform(-0.2, 0.2)]
    data.qvel[:] = rng.uniform(-0.2, 0.2, size=2)


def balanced(model, data):
    return np.cos(data.qpos[1]) > 0.95 and abs(data.qpos[0]) < 0.4


TASK = contactopt.Task(name="style-cartpole", model="cartpole.xml", cost=cost, initial_state=hanging,
                       success=balanced, success_hold=1.0, duration=8.0,
                       description="cart-pole (default classes, velocity servo): swing up and balance")
