"""Cart-pole swing-up and balance on a third-party-style MJCF (``cartpole.xml``: the cart's
±1.8 m rail is a joint range, the ±10 N push a control range).  Success: the pole within
18° of upright with the cart within 0.5 m of the centre, held for 1 s."""
import numpy as np
import contactopt
from contactopt.costs import CostTerm, Qpos, Qvel, Control

def cost(model):
    return [CostTerm(Qpos(model, [0.0, np.pi]), weight=1.0),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=1e-3)]

def success(model, data):
    return np.cos(data.qpos[1]) < -0.95 and abs(data.qpos[0]) < 0.5

TASK = contactopt.Task(name="cartpole-swingup", model="cartpole.xml", cost=cost,
                       success=success, success_hold=1.0, duration=10.0)
