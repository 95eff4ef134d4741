"""A task written with goal-directed dynamics' own terms: the two-link reacher of the style suite
(``../style/reacher/reacher.xml``) brings its fingertip to the ``target`` site.

The cost is in the shared cost language, but two of its terms are written over accelerations
(:class:`~contactopt.costs.AccelerationResidual`): the fingertip follows a critically damped
spring toward the target (GDD eq. 11) and every joint is damped.  Only the ``gdd`` planner
consumes such terms; ``--planner ilqg`` or ``idto`` refuse the task in one line, naming the term.

    contactopt run examples/gdd/reacher_goal_directed.py --planner gdd
    contactopt run examples/gdd/reacher_goal_directed.py --planner gdd --set weight.reach=10
"""
import numpy as np

import contactopt
from contactopt.costs import CostTerm, Qvel
from contactopt.solvers.gdd import Damping, EndEffectorAcceleration, SpringDamper


def cost(model):
    goal = model.site("target").pos.copy()      # a worldbody site: its pos is its world position
    spring = SpringDamper(goal, stiffness=40.0)  # a* = k (x_goal − x) − 2√k ẋ, m/s²
    return [CostTerm(EndEffectorAcceleration(model, site="fingertip", target=spring, name="reach"), weight=500.0),
            CostTerm(Damping(beta=5.0), weight=0.1),  # (w/2)(a + β v)ᵀ M (a + β v)
            CostTerm(Qvel(model), weight=0.01)]       # a state term: a PD feature for gdd


def random_pose(model, data, rng):
    data.qpos[:] = [rng.uniform(0.5, 2.5), rng.uniform(-1.5, 1.5)]
    data.qvel[:] = rng.uniform(-0.5, 0.5, size=2)
    data.ctrl[:] = data.qpos                      # the servos start holding the start pose


def reached(model, data):
    return np.linalg.norm(data.site("fingertip").xpos - model.site("target").pos) < 0.03


TASK = contactopt.Task(name="reacher-goal-directed", model="../style/reacher/reacher.xml", cost=cost,
                       initial_state=random_pose, success=reached, success_hold=0.5, duration=4.0,
                       planner_options={"gdd": {}},
                       description="two-link reacher driven by goal-directed dynamics' own terms")
