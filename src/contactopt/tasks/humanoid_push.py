"""``humanoid-push`` (iLQG, ``--planner ilqg``): stand, take a push on the torso, stay up.

The humanoid starts standing at rest; at ``PUSH_TIME`` a horizontal impulse of
``PUSH_IMPULSE`` N·s in a seeded random direction hits the torso (:func:`push_recovery_pushes`).
Failure: the head below ``FALLEN_HEAD_HEIGHT`` above the feet (:func:`has_fallen`); success:
standing (:func:`~contactopt.tasks.humanoid_states.is_standing`) ``PUSH_SETTLE_S`` s after the
push (:func:`recovered`).  Planner, cost and models are ``humanoid-getup``'s
(:mod:`.humanoid_getup`).

Experiment log: docs/experiments/humanoid-getup-ilqg.md.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from .humanoid_getup import HUMANOID_GETUP, SUCCESS_HOLD_S
from .humanoid_states import is_standing, standing_metrics

__all__ = ["PUSH_TIME", "PUSH_DURATION", "PUSH_IMPULSE", "PUSH_SETTLE_S", "FALLEN_HEAD_HEIGHT",
           "push_recovery_pushes", "has_fallen", "recovered", "HUMANOID_PUSH"]

#: ``humanoid-push``: the push (s, s, N·s) — a horizontal impulse on the torso in a seeded random
#: direction.  25 N·s changes the 54.9 kg humanoid's CoM velocity by 0.46 m/s.
PUSH_TIME = 1.0
PUSH_DURATION = 0.1
PUSH_IMPULSE = 25.0
#: Seconds after the push ends before a recovered stance counts (the push must be absorbed).
PUSH_SETTLE_S = 0.5
#: The humanoid has fallen when its head is lower than this above the feet (m): kneeling
#: upright is ≈ 1.0 m, a deep squat ≈ 0.8 m.
FALLEN_HEAD_HEIGHT = 0.8


def push_recovery_pushes(rng: np.random.Generator) -> tuple:
    """The seeded push of ``humanoid-push``: :data:`PUSH_IMPULSE` N·s on the torso over
    :data:`PUSH_DURATION` s from :data:`PUSH_TIME`, horizontal, direction uniform in [0, 2π)."""
    from ..mpc import Push

    angle = rng.uniform(0.0, 2.0 * math.pi)
    force = PUSH_IMPULSE / PUSH_DURATION * np.array([math.cos(angle), math.sin(angle), 0.0])
    return (Push(PUSH_TIME, PUSH_DURATION, "torso", tuple(float(f) for f in force)),)


def _standing_state(model, data, rng) -> None:
    """Standing at rest at ``qpos0`` (the seed draws only the push direction: with ±0.02 rad of
    joint noise the first MPC updates sometimes plan a hop and 1 of 8 seeds fell before the push)."""
    data.qpos[:] = model.qpos0
    data.qvel[:] = 0.0
    mujoco.mj_forward(model, data)


def has_fallen(model: mujoco.MjModel, data: mujoco.MjData) -> bool:
    """``humanoid-push``'s failure test: the head is below :data:`FALLEN_HEAD_HEIGHT` above the feet."""
    return standing_metrics(model, data)["head_height"] < FALLEN_HEAD_HEIGHT


def recovered(model: mujoco.MjModel, data: mujoco.MjData) -> bool:
    """``humanoid-push``'s success test: :func:`is_standing` at least :data:`PUSH_SETTLE_S` s after the push."""
    return data.time >= PUSH_TIME + PUSH_DURATION + PUSH_SETTLE_S and is_standing(model, data)


def _build_push_task():
    import dataclasses

    return dataclasses.replace(
        HUMANOID_GETUP, name="humanoid-push",
        description=(f"stand, take a {PUSH_IMPULSE:g} N·s push on the torso in a random horizontal direction "
                     f"at t = {PUSH_TIME:g} s, and stay up (never head below {FALLEN_HEAD_HEIGHT:g} m; "
                     f"standing {SUCCESS_HOLD_S:g} s after it)"),
        initial_state=_standing_state, pushes=push_recovery_pushes, success=recovered, failure=has_fallen,
        default_seconds=5.0)


#: ``contactopt run humanoid-push``: push recovery with the getup task's planner and cost.
HUMANOID_PUSH = _build_push_task()


def _register() -> None:
    from .mpc_task import register_ilqg_task

    register_ilqg_task(HUMANOID_PUSH)


_register()
