"""``swimmer-reach`` (iLQG, ``--planner ilqg``): swim so that the nose reaches a target.

An :class:`~contactopt.tasks.mpc_task.MPCTask`: plant 5 ms, planner 20 ms, horizon 1 s (50 steps),
one iLQG iteration per update.  Running cost::

    1.0 · l2_0.1(nose_xy − target_xy)  +  0.02 · cosh_0.5(u)

Seeded start: the target is fixed at :data:`SWIM_TARGET` (the fixed camera's centre;
the cost is built from the planner model alone, so the target cannot move per seed);
the nose is placed 1–2 m from it in a random direction, with a random heading and body
joints ±0.3 rad — i.e. the target is at a random distance and bearing relative to the
swimmer.  Success: nose within 0.12 m of the target, within 30 s.

Experiment notes: docs/experiments/acrobot-swingup-ilqg.md.
"""

from __future__ import annotations

import numpy as np

from .mpc_task import MPCTask, register_ilqg_task

__all__ = ["SWIMMER_REACH"]

SWIM_PLANT_DT = 0.005
SWIM_PLAN_DT = 0.02
SWIM_TARGET = (0.5, 0.0)          # world x, y of the target (the fixed camera's centre)
SWIM_W = {"nose": 1.0, "ctrl": 0.02, "qvel": 0.0}
SWIM_NOSE_ALPHA = 0.1
SWIM_CTRL_ALPHA = 0.5
SWIM_RADIUS = 0.12


def _swimmer_plant():
    from ..model import load_model

    return load_model("swimmer", timestep=SWIM_PLANT_DT)


def _swimmer_planner():
    from ..model import load_model

    return load_model("swimmer", timestep=SWIM_PLAN_DT)


def _swimmer_cost(m):
    from ..costs import (Control, CostTerm, Cosh, L2, Quadratic, Qvel, SitePosition, StageCost,
                         TrajectoryCost)

    w = SWIM_W
    nose = SitePosition(m, "nose", target=[SWIM_TARGET[0], SWIM_TARGET[1], 0.0], axes="xy")
    terms = [CostTerm(nose, L2(SWIM_NOSE_ALPHA), w["nose"]),
             CostTerm(Control(m), Cosh(SWIM_CTRL_ALPHA), w["ctrl"])]
    if w["qvel"]:
        terms.append(CostTerm(Qvel(m, dofs=[3, 4, 5]), Quadratic(), w["qvel"]))
    return TrajectoryCost(StageCost(m, terms), timestep=m.opt.timestep)


def _swimmer_initial(model, data, rng):
    """Target at :data:`SWIM_TARGET`; the nose 1–2 m from it in a random direction, random heading,
    body joints ±0.3 rad."""
    dist = rng.uniform(1.0, 2.0)
    phi = rng.uniform(-np.pi, np.pi)
    yaw = rng.uniform(-np.pi, np.pi)
    target = np.array([SWIM_TARGET[0], SWIM_TARGET[1], 0.0])
    nose = target[:2] - dist * np.array([np.cos(phi), np.sin(phi)])
    # the nose site is 2.5 cm ahead of the root
    head = nose - 0.025 * np.array([np.cos(yaw), np.sin(yaw)])
    data.qpos[:] = 0.0
    data.qpos[:3] = [head[0], head[1], yaw]
    data.qpos[3:6] = rng.uniform(-0.3, 0.3, size=3)
    data.qvel[:] = 0.0
    if model.nmocap:
        data.mocap_pos[0] = target


def _nose_distance(model, data):
    return float(np.linalg.norm(data.site("nose").xpos[:2] - np.asarray(SWIM_TARGET)))


def _swimmer_success(model, data):
    return _nose_distance(model, data) < SWIM_RADIUS


SWIMMER_REACH = MPCTask(
    name="swimmer-reach", model="swimmer",
    description="swim so that the nose reaches a target 1-2 m away (within 0.12 m)",
    plant_model=_swimmer_plant, planner_model=_swimmer_planner, cost=_swimmer_cost,
    initial_state=_swimmer_initial, success=_swimmer_success, metric=_nose_distance, metric_label="nose distance to the target [m]", success_hold=0.0,
    default_seconds=30.0,
    ilqg={"horizon": 50,
          "settings": {"mu_init": 1e-3, "line_search_steps": (1.0, 0.5, 0.25, 0.1, 0.03)},
          "iterations_per_update": 1, "initial_iterations": 20},
)


register_ilqg_task(SWIMMER_REACH)
