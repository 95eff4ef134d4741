"""``hopper-hop`` (iLQG, ``--planner ilqg``): the point-foot hopper hops forward.

An :class:`~contactopt.tasks.mpc_task.MPCTask`: plant 5 ms, planner 5 ms, both with the soft
contact ``solref (0.02, 1)``, ``solimp (0, 0.95, 0.02, 0.5, 2)``; horizon 0.8 s (160 steps),
1 iteration per update, derivatives at every step, lag compensation ``"auto"``
(:class:`~contactopt.mpc.ILQGPlanner`: each update plans from the state predicted at
``t + lag`` under the policy in force, the lag being the shortest of the last few updates').
Running cost::

    2 · smoothabs_0.2(ẋ_torso − 0.5)  +  10 · smoothabs_0.1(z_torso − 1.2)
    + 3 · smoothabs_0.2(pitch)  +  3 · cosh_0.5(u)  +  0.03 · ½‖v‖²
    + 10 · ½(knee − 0.5)²  +  3 · smoothabs_0.1(x_foot − x_com − 0.05)
    + 1000 · ½ min(z_torso − 0.85, 0)²  +  1000 · ½ max(|pitch| − 0.35, 0)²

The torso target 1.2 m is above the straight-leg standing height (1.05 m), so the plan
hops; the one-sided bounds (:class:`~contactopt.costs.OneSidedQuadratic`) keep the plan's
crouch above 0.85 m and its pitch within ±0.35 rad.
Success: torso beyond x = 1.5 m, above 0.7 m and pitch within ±0.7 rad for 1 s, and
never below/over those limits earlier in the run (no fall-and-get-up), within 6 s.
The IDTO hopper task (footed hopper) is :mod:`.hopper`.

Experiment log: docs/experiments/hopper-hop-ilqg.md.
"""

from __future__ import annotations

import numpy as np

from .mpc_task import MPCTask, register_ilqg_task

__all__ = ["HOPPER_HOP"]

HOP_PLANT_DT = 0.005
HOP_PLAN_DT = 0.005
HOP_SOLREF = (0.02, 1.0)
HOP_SOLIMP = (0.0, 0.95, 0.02, 0.5, 2.0)      # force grows smoothly from 0 with penetration
HOP_VX = 0.5
HOP_HEIGHT = 1.2
HOP_HEIGHT_ALPHA = 0.1
HOP_W = {"vx": 2.0, "height": 10.0, "pitch": 3.0, "ctrl": 3.0, "qvel": 0.03, "foot": 3.0}
HOP_FOOT_OFFSET = 0.05
HOP_KNEE = (10.0, 0.5)  # (weight, target knee angle) of a knee-posture term (a bent, springy leg)
HOP_SUCCESS_X = 1.5
HOP_MIN_Z = 0.7
#: (weight, z_low): one-sided quadratic ``w · ½ min(z_torso − z_low, 0)²`` — keeps the plan's
#: crouch above the failure height :data:`HOP_MIN_Z` (0 weight: off)
HOP_LOW = (1000.0, 0.85)
#: (weight, bound): ``w · ½ max(|pitch| − bound, 0)²`` — keeps the plan's torso pitch inside
#: ±bound, well within the failure limit ±0.7 rad (0 weight: off)
HOP_PITCH_BOUND = (1000.0, 0.35)
#: (solref, solimp) of the plant's contacts, None: the model file's (foot solref 0.01).  The
#: planner's soft contact is used: with the stiff contact the closed loop falls even with
#: lag 0 (the plan's impulsive pushes do not transfer) — docs/experiments/hopper-hop-ilqg.md.
HOP_PLANT_CONTACT = (HOP_SOLREF, HOP_SOLIMP)


def _hopper_plant():
    from ..dynamics import smooth_contacts
    from ..model import load_model

    m = load_model("hopper", timestep=HOP_PLANT_DT)
    if HOP_PLANT_CONTACT is not None:
        m = smooth_contacts(m, solref=HOP_PLANT_CONTACT[0], solimp=HOP_PLANT_CONTACT[1])
    return m


def _hopper_planner():
    from ..dynamics import smooth_contacts
    from ..model import load_model

    m = load_model("hopper", timestep=HOP_PLAN_DT)
    if HOP_SOLREF is not None or HOP_SOLIMP is not None:
        m = smooth_contacts(m, solref=HOP_SOLREF, solimp=HOP_SOLIMP)
    return m


def _hopper_cost(m):
    from ..costs import (CenterOfMass, Combination, Control, CostTerm, Cosh, OneSidedQuadratic, Qpos,
                         Quadratic, Qvel, SitePosition, SmoothAbs, StageCost, TrajectoryCost)

    w = HOP_W
    terms = [CostTerm(Qvel(m, [HOP_VX], dofs=[0], name="vx"), SmoothAbs(0.2), w["vx"]),
             CostTerm(SitePosition(m, "torso", target=[0.0, 0.0, HOP_HEIGHT], axes="z"),
                      SmoothAbs(HOP_HEIGHT_ALPHA), w["height"]),
             CostTerm(Qpos(m, np.zeros(m.nq), dofs=[2], wrap=False), SmoothAbs(0.2), w["pitch"]),
             CostTerm(Control(m), Cosh(0.5), w["ctrl"])]
    if w["qvel"]:
        terms.append(CostTerm(Qvel(m), Quadratic(), w["qvel"]))
    if HOP_KNEE[0]:
        qk = np.zeros(m.nq)
        qk[4] = HOP_KNEE[1]
        terms.append(CostTerm(Qpos(m, qk, dofs=[4], name="knee", wrap=False), Quadratic(), HOP_KNEE[0]))
    if w["foot"]:
        foot = Combination([(1.0, SitePosition(m, "foot", axes="x")),
                            (-1.0, CenterOfMass(m, axes="x"))],
                           offset=[HOP_FOOT_OFFSET], name="foot_under_com")
        terms.append(CostTerm(foot, SmoothAbs(0.1), w["foot"]))
    if HOP_LOW[0]:
        terms.append(CostTerm(SitePosition(m, "torso", target=[0.0, 0.0, HOP_LOW[1]], axes="z", name="low"),
                              OneSidedQuadratic(upper=False), HOP_LOW[0]))
    if HOP_PITCH_BOUND[0]:
        for sign in (1.0, -1.0):
            qp = np.zeros(m.nq)
            qp[2] = sign * HOP_PITCH_BOUND[1]
            terms.append(CostTerm(Qpos(m, qp, dofs=[2], name="pitch_bound", wrap=False), OneSidedQuadratic(upper=sign > 0),
                                  HOP_PITCH_BOUND[0]))
    return TrajectoryCost(StageCost(m, terms), timestep=m.opt.timestep)


def _hopper_initial(model, data, rng):
    """The "home" crouch with ±0.05 rad on hip, knee and torso pitch and ±0.1 m/s on the root."""
    key = model.key("home")
    data.qpos[:] = key.qpos
    data.qpos[2:5] += rng.uniform(-0.05, 0.05, size=3)
    data.qvel[:] = 0.0
    data.qvel[:2] = rng.uniform(-0.1, 0.1, size=2)


def _hopper_up(model, data) -> bool:
    return bool(data.site("torso").xpos[2] > HOP_MIN_Z and abs(data.qpos[2]) < 0.7)


def _hopper_fell(model, data) -> bool:
    """The failure test (latched by the runner): torso below 0.7 m or pitch beyond ±0.7 rad."""
    return not _hopper_up(model, data)


def _hopper_success(model, data):
    """Beyond x = 1.5 m, torso above 0.7 m and pitch within ±0.7 rad (a fall earlier in the
    run is a failure the runner latches: :func:`_hopper_fell`)."""
    return bool(_hopper_up(model, data) and data.site("torso").xpos[0] > HOP_SUCCESS_X)


def _hopper_metric(model, data):
    return float(data.site("torso").xpos[0])


HOPPER_HOP = MPCTask(
    name="hopper-hop", model="hopper",
    description="hop forward: torso beyond x = 1.5 m, upright and above 0.7 m, for 1 s",
    plant_model=_hopper_plant, planner_model=_hopper_planner, cost=_hopper_cost,
    initial_state=_hopper_initial, success=_hopper_success, failure=_hopper_fell, metric=_hopper_metric,
    metric_label="torso x [m]",
    success_hold=1.0, default_seconds=6.0,
    ilqg={"horizon": 160,
          "settings": {"mu_init": 1e-3, "line_search_steps": (1.0, 0.5, 0.25, 0.1, 0.03)},
          "iterations_per_update": 1, "initial_iterations": 60, "derivative_stride": 1,
          "lag_compensation": "auto"},
)

register_ilqg_task(HOPPER_HOP)
