import numpy as np
import contactopt
from contactopt.costs import CostTerm, Qpos, Qvel, Control

def cost(model):
    return [CostTerm(Qpos(model, [np.pi]), weight=1.0),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=1e-3)]

TASK = contactopt.Task(name="pendulum-swingup", model="pendulum.xml", cost=cost,
                       success=lambda model, data: np.cos(data.qpos[0]) < -0.98,
                       success_hold=1.0, duration=8.0)
