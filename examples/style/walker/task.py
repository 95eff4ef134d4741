"""Stand the planar walker up from a random squat and hold it (``walker.xml``).

Start: both knees bent 1.2–2.0 rad (±0.15 rad between the legs), hips at half the knee angle
so that the feet are under the hips, ankles keeping the feet flat, torso pitch ±0.1 rad, the
feet on the floor.  Cost: torso height, torso pitch, centre of mass over the feet.
Success: torso above 0.70 m and pitched less than 0.2 rad, for 1.5 s; failure (latched):
torso below 0.35 m or pitched more than 1.2 rad.
"""
import mujoco
import numpy as np

import contactopt
from contactopt.costs import CenterOfMass, Combination, Control, CostTerm, Qpos, Qvel, SitePosition

STAND_HEIGHT = 0.76


def cost(model):
    feet = Combination([(1.0, CenterOfMass(model, axes="x")),
                        (-0.5, SitePosition(model, "right_foot", axes="x")),
                        (-0.5, SitePosition(model, "left_foot", axes="x"))], name="balance")
    return [CostTerm(SitePosition(model, "torso", [0, 0, STAND_HEIGHT], axes="z", name="height"), weight=10.0),
            CostTerm(Qpos(model, joints=["rooty"], name="pitch"), weight=3.0),
            CostTerm(feet, weight=3.0),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=0.01)]


def _lowest_point(model, data):
    """The lowest point of the walker's capsules (world z)."""
    low = np.inf
    for g in range(model.ngeom):
        if model.geom_bodyid[g] == 0:
            continue
        half = model.geom_size[g, 1]
        axis = data.geom_xmat[g].reshape(3, 3)[:, 2]
        low = min(low, data.geom_xpos[g, 2] - abs(axis[2]) * half - model.geom_size[g, 0])
    return low


def squat(model, data, rng):
    q = {}
    pitch = rng.uniform(-0.1, 0.1)
    base = rng.uniform(1.2, 2.0)
    for side in ("right", "left"):
        knee = base + rng.uniform(-0.075, 0.075)
        hip = -knee / 2 + rng.uniform(-0.05, 0.05)
        q[f"{side}_hip"], q[f"{side}_knee"], q[f"{side}_ankle"] = hip, knee, -(pitch + hip + knee)
    q["rooty"] = pitch
    for name, value in q.items():
        data.joint(name).qpos[0] = value
    mujoco.mj_kinematics(model, data)
    data.joint("rootz").qpos[0] -= _lowest_point(model, data) + 0.001     # feet 1 mm into the floor


def _torso(data):
    return data.site("torso").xpos[2], data.joint("rooty").qpos[0]


def standing(model, data):
    z, pitch = _torso(data)
    return z > 0.70 and abs(pitch) < 0.2


def fell(model, data):
    z, pitch = _torso(data)
    return z < 0.35 or abs(pitch) > 1.2


TASK = contactopt.Task(name="style-walker-stand", model="walker.xml", cost=cost, initial_state=squat,
                       success=standing, success_hold=1.5, failure=fell, duration=5.0,
                       description="planar walker (slide-slide-hinge root): stand up from a squat")
