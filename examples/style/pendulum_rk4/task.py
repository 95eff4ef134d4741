"""Swing the upright-zero RK4 pendulum up from hanging (``pendulum_rk4.xml``).

The hinge's zero is upright, so the target is ``qpos = 0`` and the start is near ``±π``:
hanging ±0.3 rad with ±1 rad/s.  Success: the tip within 11° of upright for 1 s.
"""
import numpy as np

import contactopt
from contactopt.costs import Control, CostTerm, Qpos, Qvel


def cost(model):
    return [CostTerm(Qpos(model, [0.0]), weight=1.0),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=1e-3)]


def hanging(model, data, rng):
    data.qpos[0] = np.pi + rng.uniform(-0.3, 0.3)
    data.qvel[0] = rng.uniform(-1.0, 1.0)


TASK = contactopt.Task(name="style-pendulum-rk4", model="pendulum_rk4.xml", cost=cost,
                       initial_state=hanging,
                       success=lambda model, data: np.cos(data.qpos[0]) > 0.98,
                       success_hold=1.0, duration=8.0,
                       description="upright-zero pendulum, RK4: swing up from hanging and balance")
