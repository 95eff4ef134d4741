"""The pendulum swing-up on an RK4 model (tests/test_model_safety.py): every planner must run it,
planning on a copy with a supported integrator (``contactopt run`` prints a notice)."""

import numpy as np

import contactopt
from contactopt.costs import Control, CostTerm, Qpos, Qvel


def cost(model):
    return [CostTerm(Qpos(model, [np.pi]), weight=1.0),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=1e-3)]


TASK = contactopt.Task(name="pendulum-rk4-swingup", model="pendulum_rk4.xml", cost=cost,
                       success=lambda model, data: np.cos(data.qpos[0]) < -0.98,
                       success_hold=1.0, duration=8.0)
