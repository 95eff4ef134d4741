"""The acrobot scenario: swing up from hanging and balance, with iLQG or IDTO.

One task, ``acrobot``, one initial-state distribution (both hinges uniform in ±0.2 rad, at
rest) and one success test: the tip above 4.0 m (target 4.2 m) continuously for 1 s.
Each planner brings its own planning model and cost:

* ``--planner ilqg`` (:data:`ACROBOT_ILQG`): plant 2 ms, planner 10 ms, horizon 1.5 s,
  derivatives every 2nd step.  Running cost (per second)::

      1.0 · smoothabs_1(E − E_up) + 1.0 · smoothabs_0.1(tip_xz − (0, 4.2))
      + 0.01 · ½‖v‖² + 0.05 · cosh_1.5(u)

  with ``E`` the mechanical energy (:class:`~contactopt.costs.MechanicalEnergy`) and ``E_up``
  that of the upright rest state; terminal ``5 · ½‖tip − target‖² + 0.5 · ½‖v‖²``.
* ``--planner idto`` (:data:`ACROBOT_IDTO`): ``h`` 0.02 s, 3 s horizon, 2 iterations per
  update every 10 ms with a 10 ms lag; terminal-only position cost toward the upright
  configuration with the winding of each hinge chosen with hysteresis (:func:`_idto_nominal`),
  penalty method on the unactuated shoulder, PD gains 20/3.

Experiment logs: docs/experiments/acrobot-swingup-ilqg.md, docs/experiments/acrobot-idto.md.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from ..costs import MechanicalEnergy
from .idto_task import IDTOTask, register_idto_task
from .mpc_task import MPCTask, register_ilqg_task

__all__ = ["ACROBOT_ILQG", "ACROBOT_IDTO", "success", "initial_state"]

TIP_TARGET = 4.2        # m: tip height of the upright acrobot
SUCCESS_HEIGHT = 4.0    # m
UPRIGHT = np.array([math.pi, 0.0])


def initial_state(model, data, rng):
    """Both hinges uniform in ±0.2 rad from hanging, at rest."""
    data.qpos[:] = rng.uniform(-0.2, 0.2, size=2)
    data.qvel[:] = 0.0


def tip_height(model, data) -> float:
    """Height of the ``tip`` site [m]."""
    return float(data.site("tip").xpos[2])


def success(model, data) -> bool:
    """The tip above :data:`SUCCESS_HEIGHT`."""
    return tip_height(model, data) > SUCCESS_HEIGHT


def metric(model, data) -> float:
    """|x| + |z − 4.2| of the tip [m]."""
    return float(np.abs(data.site("tip").xpos[[0, 2]] - [0.0, TIP_TARGET]).sum())


# =========================================================================== iLQG

ILQG_PLANT_DT = 0.002
ILQG_PLAN_DT = 0.01     # 15–20 ms planner steps cannot balance the 2 ms plant (Euler error)
ILQG_W = {"energy": 1.0, "tip": 1.0, "qvel": 0.01, "ctrl": 0.05}
ILQG_CTRL_ALPHA = 1.5
ILQG_WF = {"energy": 0.0, "tip": 5.0, "qvel": 0.5}


def _plant():
    from ..model import load_model

    return load_model("acrobot", timestep=ILQG_PLANT_DT)


def _ilqg_planner_model():
    from ..model import load_model

    return load_model("acrobot", timestep=ILQG_PLAN_DT)


def upright_energy(m) -> float:
    """Mechanical energy [J] of the upright acrobot at rest."""
    d = mujoco.MjData(m)
    d.qpos[:] = UPRIGHT
    mujoco.mj_kinematics(m, d)
    mujoco.mj_comPos(m, d)
    return MechanicalEnergy(m).energy(d)


def _ilqg_cost(m):
    from ..costs import Control, CostTerm, Cosh, Quadratic, Qvel, SitePosition, SmoothAbs, StageCost, TrajectoryCost

    w, wf = ILQG_W, ILQG_WF
    tip = SitePosition(m, "tip", target=[0.0, 0.0, TIP_TARGET], axes="xz")
    energy = MechanicalEnergy(m, upright_energy(m))
    running = StageCost(m, [CostTerm(energy, SmoothAbs(1.0), w["energy"]),
                            CostTerm(tip, SmoothAbs(0.1), w["tip"]),
                            CostTerm(Qvel(m), Quadratic(), w["qvel"]),
                            CostTerm(Control(m), Cosh(ILQG_CTRL_ALPHA), w["ctrl"])])
    terminal = StageCost(m, [CostTerm(energy, SmoothAbs(1.0), wf["energy"]),
                             CostTerm(tip, Quadratic(), wf["tip"]),
                             CostTerm(Qvel(m), Quadratic(), wf["qvel"])])
    return TrajectoryCost(running, terminal, timestep=m.opt.timestep)


ACROBOT_ILQG = MPCTask(
    name="acrobot", model="acrobot",
    description="swing the acrobot up and balance it (tip above 4.0 m for 1 s)",
    plant_model=_plant, planner_model=_ilqg_planner_model, cost=_ilqg_cost,
    initial_state=initial_state, success=success, metric=metric, success_hold=1.0,
    default_seconds=15.0,
    ilqg={"horizon": 150,
          "settings": {"mu_init": 1e-3, "line_search_steps": (1.0, 0.5, 0.25, 0.1, 0.03)},
          "iterations_per_update": 1, "initial_iterations": 10, "derivative_stride": 2},
)


# =========================================================================== IDTO

IDTO_REWIND = 1.5 * math.pi  # rad: re-pick a hinge's upright winding only this far from it


def _idto_nominal(model, T, h):
    """Upright nominal ``q = (π + 2π k_0, 2π k_1)`` held over the horizon (``v_nom`` = 0).

    Both hinges are 2π-periodic; the winding ``k_j`` is the one nearest the measured angle at
    the first plan (``t ≤ 0``) and afterwards changes only when the measured angle is more than
    :data:`IDTO_REWIND` from the current target (hysteresis: re-picking the nearest winding at
    every update flips the target by 2π whenever a hinge passes ±π from it, and the warm-started
    plan then chases the new winding).
    """
    q = np.tile(UPRIGHT, (T + 1, 1))
    two_pi = 2 * math.pi

    def nominal(t, x):
        k = nominal.winding
        near = np.round((np.asarray(x[:2]) - UPRIGHT) / two_pi)
        if k is None or t <= 0.0:
            k = near
        else:
            far = np.abs(x[:2] - (UPRIGHT + two_pi * k)) > IDTO_REWIND
            k = np.where(far, near, k)
        nominal.winding = k
        return q + two_pi * k, None

    nominal.winding = None
    return nominal


ACROBOT_IDTO = IDTOTask(
    name="acrobot", model="acrobot",
    description="swing the acrobot up and balance it (tip above 4.0 m for 1 s)",
    # h = 0.02 s, not the authors' 0.05 s: coarser plans are untrackable by the plant
    # (docs/experiments/acrobot-idto.md); a 3 s horizon with 2 iterations per update
    horizon=150, time_step=0.02,
    # terminal-only position cost (the swing is free), penalty method on the shoulder; R = 1 on
    # the elbow keeps the planned torque near the plant's ±5 N·m limit
    weights=dict(Qq=0.0, Qv=[0.1, 0.1], Qf_q=[100.0, 100.0], Qf_v=[10.0, 10.0], R=[1.0, 1.0],
                 unactuated_penalty=100.0),
    contact=None, nominal=_idto_nominal, initial_state=initial_state, success=success,
    metric=metric, success_hold=1.0, default_seconds=10.0, kp=20.0, kd=3.0, lag=0.01,
    update_period=0.01, rate_target_hz=100.0, initial_iterations=300, iterations_per_update=2,
    solver=dict(initial_radius=1.0),
)

register_ilqg_task(ACROBOT_ILQG)
register_idto_task(ACROBOT_IDTO)
