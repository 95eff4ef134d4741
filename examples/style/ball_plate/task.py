"""Bring a ball rolling on a tilting plate to the plate's centre and keep it there
(``ball_plate.xml``).

Start: the plate level, the ball 8–15 cm from the centre in a random direction, rolling at up
to 0.1 m/s.  Cost: the ball's horizontal distance to the centre, its horizontal velocity (not its spin), the plate's
tilt and the torques.  Success: the ball within 3 cm of the centre and slower than 5 cm/s,
for 1 s; failure (latched): the ball below the plate (rolled off).
"""
import numpy as np

import contactopt
from contactopt.costs import BodyPosition, Control, CostTerm, Qpos, Qvel


def _ball_dofs(model):
    """The ball's free-joint velocity dofs: x, y, z, then its angular velocity."""
    adr = model.joint("ball").dofadr[0]
    return list(range(adr, adr + 6))


def cost(model):
    return [CostTerm(BodyPosition(model, "ball", [0, 0, 0], axes="xy", name="centre"), weight=10.0),
            CostTerm(Qvel(model, dofs=_ball_dofs(model)[:2], name="ball_vel"), weight=0.1),
            CostTerm(Qpos(model, joints=["roll", "pitch"], name="tilt"), weight=0.1),
            CostTerm(Qvel(model, joints=["roll", "pitch"], name="tilt_vel"), weight=0.01),
            CostTerm(Control(model), weight=0.01)]


def random_ball(model, data, rng):
    r, phi = rng.uniform(0.08, 0.15), rng.uniform(-np.pi, np.pi)
    ball = data.joint("ball")
    ball.qpos[:3] = [r * np.cos(phi), r * np.sin(phi), 0.035]
    speed, heading = rng.uniform(0.0, 0.1), rng.uniform(-np.pi, np.pi)
    ball.qvel[:3] = [speed * np.cos(heading), speed * np.sin(heading), 0.0]
    ball.qvel[3:] = np.cross([0, 0, 1], ball.qvel[:3]) / 0.025      # rolling, not sliding


def centred(model, data):
    ball = data.joint("ball")
    return np.linalg.norm(ball.qpos[:2]) < 0.03 and np.linalg.norm(ball.qvel[:3]) < 0.05


def dropped(model, data):
    return data.joint("ball").qpos[2] < -0.05


TASK = contactopt.Task(name="style-ball-plate", model="ball_plate.xml", cost=cost, initial_state=random_ball,
                       success=centred, success_hold=1.0, failure=dropped, duration=6.0,
                       description="tilting plate on two hinges centres a free rolling ball")
