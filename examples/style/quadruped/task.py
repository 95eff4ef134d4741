"""Stand the floating-base quadruped up from lying on its belly (``quadruped.xml``).

Start: collapsed on its belly and knees after a passive drop from a random pose (see
:func:`lying`).
Target: the ``stand`` keyframe's height (0.30 m), a level torso and its leg posture, with the
centre of mass over the feet.  Success: torso above 0.26 m and its up axis within 18° of
vertical, for 1 s.
"""
import mujoco
import numpy as np

import contactopt
from contactopt.costs import CenterOfMass, Combination, Control, CostTerm, Qpos, Qvel, SitePosition

FEET = ("fr_foot", "fl_foot", "hr_foot", "hl_foot")


def _stand(model):
    return model.key("stand").qpos.copy()


def cost(model):
    stand = _stand(model)
    over_feet = Combination([(1.0, CenterOfMass(model, axes="xy"))]
                            + [(-0.25, SitePosition(model, f, axes="xy")) for f in FEET], name="balance")
    return [CostTerm(SitePosition(model, "torso", [0, 0, stand[2]], axes="z", name="height"), weight=10.0),
            CostTerm(Qpos(model, stand, dofs=[3, 4], name="level"), weight=3.0),
            CostTerm(Qpos(model, stand, dofs=range(6, model.nv), name="posture"), weight=0.3),
            CostTerm(over_feet, weight=3.0),
            CostTerm(Qvel(model), weight=0.01),
            CostTerm(Control(model), weight=0.01)]


def lying(model, data, rng):
    """Dropped from a random pose (torso roll and pitch ±0.2 rad, yaw ±0.3 rad; hips −0.3…1.0
    rad, knees −2.0…−0.5 rad) from 5 cm, then left with zero torques for 1 s: it collapses
    onto its belly and knees."""
    roll, pitch, yaw = rng.uniform(-0.2, 0.2), rng.uniform(-0.2, 0.2), rng.uniform(-0.3, 0.3)
    mujoco.mju_euler2Quat(data.qpos[3:7], [roll, pitch, yaw], "xyz")
    data.qpos[7::2] = rng.uniform(-0.3, 1.0, size=4)     # hips
    data.qpos[8::2] = rng.uniform(-2.0, -0.5, size=4)    # knees
    data.qpos[2] = 1.0
    mujoco.mj_kinematics(model, data)
    low = np.inf
    for g in range(1, model.ngeom):                      # geom 0 is the floor
        frame = data.geom_xmat[g].reshape(3, 3)
        if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX:
            reach = np.abs(frame[2]) @ model.geom_size[g]
        elif model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE:
            reach = abs(frame[2, 2]) * model.geom_size[g, 1] + model.geom_size[g, 0]
        else:
            reach = model.geom_size[g, 0]
        low = min(low, data.geom_xpos[g, 2] - reach)
    data.qpos[2] -= low - 0.05
    data.ctrl[:] = 0.0
    for _ in range(round(1.0 / model.opt.timestep)):
        mujoco.mj_step(model, data)
    data.time = 0.0


def standing(model, data):
    up = data.body("torso").xmat.reshape(3, 3)[2, 2]
    return data.site("torso").xpos[2] > 0.26 and up > np.cos(0.3)


TASK = contactopt.Task(name="style-quadruped-stand", model="quadruped.xml", cost=cost, initial_state=lying,
                       success=standing, success_hold=1.0, duration=5.0,
                       description="floating-base quadruped (freejoint): stand up from its belly")
