"""``humanoid-getup``: the bundled 22-DoF humanoid gets up from random lying poses (iLQG MPC).

The task of the seed paper (Tassa, Erez & Todorov 2012, Sec. V), issue 4:

* **cost** (:func:`getup_cost`) — four state terms and a control term, all rates (per second):

  1. smooth-abs horizontal distance between the centre of mass (CoM) and the mean of the feet,
  2. smooth-abs horizontal distance between the torso and the CoM,
  3. smooth-abs vertical distance between the torso and a point :data:`TORSO_HEIGHT` m above
     the mean of the feet,
  4. quadratic horizontal CoM velocity,
  5. cosh control cost ``α²(cosh(u/α) − 1)`` on the 16 normalized motor commands.

  The final cost equals the running state cost (the paper's choice).
* **models** — the plant (:func:`plant_model`) is MuJoCo at 2 ms (the paper's simulator step);
  the planner (:func:`planner_model`) steps 10 ms (the paper: 8 ms) and can be given softer
  contacts (:func:`~contactopt.dynamics.smooth_contacts`).  The tuned default keeps the model
  file's contacts (``solref = (0.02, 1)``) in both.
* **initial states** (:func:`~contactopt.tasks.humanoid_states.sample_lying_state`) — random
  yaw, random roll about the body's long axis (back, front or side), random joint angles
  within the limits, dropped onto the floor and settled under zero control until at rest.
* **success** (:func:`~contactopt.tasks.humanoid_states.is_standing`) — head and torso high
  above the feet, feet on the floor, CoM above the feet and nearly still, held for
  :data:`SUCCESS_HOLD_S` seconds.

Tuned planner settings are in :data:`PLANNER_DEFAULTS`; :func:`make_planner` builds the
dynamics, cost and :class:`~contactopt.solvers.ILQG` solver from them.  ``humanoid-push``
(:mod:`.humanoid_push`: stand, take a push on the torso, stay up) uses the same planner and
cost.

Experiment log: docs/experiments/humanoid-getup-ilqg.md.

Units: metres, seconds, radians; controls are MuJoCo ``ctrl`` values in ``[-1, 1]``
(torque = gear × ctrl).
"""

from __future__ import annotations

from typing import Any

import mujoco

from ..costs import (
    CenterOfMass,
    CenterOfMassVelocity,
    Combination,
    Control,
    Cosh,
    CostTerm,
    Quadratic,
    SitePosition,
    SmoothAbs,
    StageCost,
    TrajectoryCost,
)
from ..errors import ParameterError, check_positive
from .humanoid_states import is_standing, sample_lying_state, standing_metrics

__all__ = [
    "MODEL_NAME",
    "TORSO_HEIGHT",
    "SUCCESS_HOLD_S",
    "TASK_SECONDS",
    "PLANT_TIMESTEP",
    "PLANNER_DEFAULTS",
    "COST_DEFAULTS",
    "plant_model",
    "planner_model",
    "getup_cost",
    "HUMANOID_GETUP",
    "make_planner",
]

#: Bundled model the task runs on.
MODEL_NAME = "humanoid"

#: Height (m) of the torso target point above the mean of the feet (the paper's 1.3 m).
TORSO_HEIGHT = 1.3

#: Seconds the standing test must hold without interruption to count as success.
SUCCESS_HOLD_S = 0.5

#: Simulated seconds within which the humanoid must be standing (issue 4 target).
TASK_SECONDS = 5.0

#: Plant time step (s): the paper's simulator used 2 ms.
PLANT_TIMESTEP = 0.002

#: Cost parameters of :func:`getup_cost` (weights are per second of simulated time).
COST_DEFAULTS: dict[str, float] = {
    "w_com_feet": 10.0,      # smooth-abs |CoM_xy − mean feet_xy|
    "w_torso_com": 3.0,      # smooth-abs |torso_xy − CoM_xy|
    "w_height": 10.0,        # smooth-abs |torso_z − (mean feet_z + TORSO_HEIGHT)|
    "w_com_vel": 1.0,        # ½ |CoM velocity_xy|²
    "w_control": 0.1,        # α²(cosh(u/α) − 1) summed over the 16 motors (1.0 → squats too long)
    "alpha_position": 0.1,   # smooth-abs smoothing length (m)
    "alpha_control": 0.5,    # cosh soft limit (ctrl units; ctrlrange is ±1)
    "torso_height": TORSO_HEIGHT,
    "com_vel_position_jacobian": 0.0,  # 1: include ∂(J_com v)/∂q (finite differences, ~2× cost time)
}

#: Tuned iLQG-MPC settings, consumed by an MPC loop (and by :func:`make_planner`).
#:
#: * ``planner_timestep``, ``horizon_steps``: the planner's ``h`` (s) and ``T`` (0.5 s horizon,
#:   the paper's; a 20 ms / 25-step planner halves the compute but fails to balance).
#: * ``iterations_per_update``: iLQG iterations per MPC update (``solve_from_warm_start(...,
#:   max_iterations=n)``); progress per simulated second is ``slowdown / iteration time``
#:   whatever ``n``, and ``n = 1`` keeps the policy lag smallest.
#: * ``derivative_stride``: ``MujocoDynamics(derivative_stride=...)``; 4 was worse than 2.
#: * ``planner_solref`` / ``planner_solimp``: contacts of the planner model (None = model file's).
#: * ``lag_compensation``: of :class:`~contactopt.mpc.ILQGPlanner`; ``"auto"`` plans from the
#:   state predicted at ``t + lag`` (the lag the runner measured for the previous update) under
#:   the policy in force (docs/experiments/humanoid-getup-ilqg.md).
#: * ``settings``: :class:`~contactopt.solvers.ILQGSettings` fields.  ``mu_init = 1e-3`` and a
#:   short line search (warm-started plans rarely need small α; a long one wastes rollouts).
#: * ``slowdown``: the plant slowdown the settings were tuned at (policy lag = compute / slowdown).
PLANNER_DEFAULTS: dict[str, Any] = {
    "planner_timestep": 0.01,
    "horizon_steps": 50,
    "iterations_per_update": 1,
    "derivative_stride": 2,
    "centered_differences": False,
    "planner_solref": None,
    "planner_solimp": None,
    "lag_compensation": "auto",
    "slowdown": 2.0,
    "settings": {
        "mu_init": 1e-3,
        "line_search_steps": (1.0, 0.5, 0.25, 0.1),
        "max_iterations": 1,
    },
}


# =========================================================================== models


def plant_model(timestep: float = PLANT_TIMESTEP) -> mujoco.MjModel:
    """The simulated "real" humanoid: the bundled model at ``timestep`` seconds (default 2 ms).

    Contacts are the model file's (``solref = (0.02, 1)``, the stiffer of the two models).
    """
    from ..model import load_model

    return load_model(MODEL_NAME, timestep=check_positive("timestep", timestep))


def planner_model(timestep: float | None = None, *, solref=None, solimp=None) -> mujoco.MjModel:
    """The planner's humanoid: a larger time step and (optionally) softer contacts.

    Args:
      timestep: planner step in seconds (default ``PLANNER_DEFAULTS["planner_timestep"]``).
      solref: ``(2,)`` contact (timeconst, dampratio) for every geom (default
        ``PLANNER_DEFAULTS["planner_solref"]``; None there keeps the model file's).
      solimp: ``(5,)`` contact impedance (default ``PLANNER_DEFAULTS["planner_solimp"]``).

    Returns:
      A fresh ``MjModel``.

    Raises:
      ParameterError: non-positive time step, or a ``solref`` time constant below twice the
        time step (MuJoCo would silently stiffen such a contact).
    """
    from ..dynamics import smooth_contacts
    from ..model import load_model

    h = PLANNER_DEFAULTS["planner_timestep"] if timestep is None else timestep
    h = check_positive("timestep", h)
    solref = PLANNER_DEFAULTS["planner_solref"] if solref is None else solref
    solimp = PLANNER_DEFAULTS["planner_solimp"] if solimp is None else solimp
    model = load_model(MODEL_NAME, timestep=h)
    if solref is not None and float(solref[0]) > 0 and float(solref[0]) < 2 * h:
        raise ParameterError(f"planner solref time constant {solref[0]} s is below 2 × the time step "
                             f"({h} s); MuJoCo would silently stiffen it")
    if solref is not None or solimp is not None:
        model = smooth_contacts(model, solref=solref, solimp=solimp)
    return model


# =========================================================================== cost


def _feet_mean(model, axes):
    return [(-0.5, SitePosition(model, "left_foot", axes=axes)),
            (-0.5, SitePosition(model, "right_foot", axes=axes))]


def getup_cost(model: mujoco.MjModel, *, timestep: float | None = None, **weights) -> TrajectoryCost:
    """The paper's get-up cost on ``model`` (the planner's humanoid).

    Running cost rate (per second)::

        ℓ(x, u) = w_com_feet  · sabs(CoM_xy − ½(lf + rf)_xy)
                + w_torso_com · sabs(torso_xy − CoM_xy)
                + w_height    · sabs(torso_z − ½(lf + rf)_z − torso_height)
                + w_com_vel   · ½ |v_CoM,xy|²
                + w_control   · Σ_j α_u² (cosh(u_j/α_u) − 1)

    with ``sabs(r) = Σ_k √(r_k² + α²) − α`` (α = ``alpha_position``, m) and ``lf, rf`` the
    ``left_foot``/``right_foot`` sites.  The final cost is the state part counted as one
    more step (:class:`~contactopt.costs.TrajectoryCost` with no terminal cost).

    Args:
      model: a humanoid model with sites ``torso``, ``left_foot``, ``right_foot``.
      timestep: planner step ``h`` (s) that multiplies the running cost; default
        ``model.opt.timestep``.
      **weights: overrides of :data:`COST_DEFAULTS` (unknown names are an error).

    Returns:
      :class:`~contactopt.costs.TrajectoryCost` over ``x = [qpos (23), qvel (22)]``, ``u (16,)``.

    Raises:
      ParameterError: unknown weight names, negative weights, a model without the sites.
    """
    unknown = set(weights) - set(COST_DEFAULTS)
    if unknown:
        raise ParameterError(f"getup_cost: unknown parameters {sorted(unknown)}; "
                             f"known: {sorted(COST_DEFAULTS)}")
    p = {**COST_DEFAULTS, **weights}
    a_pos = check_positive("alpha_position", p["alpha_position"])
    a_u = check_positive("alpha_control", p["alpha_control"])
    com_feet = Combination([(1.0, CenterOfMass(model, axes="xy"))] + _feet_mean(model, "xy"),
                           name="com_over_feet")
    torso_com = Combination([(1.0, SitePosition(model, "torso", axes="xy")),
                             (-1.0, CenterOfMass(model, axes="xy"))], name="torso_over_com")
    height = Combination([(1.0, SitePosition(model, "torso", axes="z"))] + _feet_mean(model, "z"),
                         offset=[float(p["torso_height"])], name="torso_height")
    com_vel = CenterOfMassVelocity(model, axes="xy", name="com_velocity",
                                   position_jacobian=bool(p["com_vel_position_jacobian"]))
    terms = [
        CostTerm(com_feet, SmoothAbs(a_pos), p["w_com_feet"]),
        CostTerm(torso_com, SmoothAbs(a_pos), p["w_torso_com"]),
        CostTerm(height, SmoothAbs(a_pos), p["w_height"]),
        CostTerm(com_vel, Quadratic(), p["w_com_vel"]),
        CostTerm(Control(model), Cosh(a_u), p["w_control"]),
    ]
    return TrajectoryCost(StageCost(model, terms), timestep=timestep)


# =========================================================================== planner


def make_planner(model: mujoco.MjModel | None = None, *, nthread: int | None = None, **overrides):
    """Build ``(dynamics, cost, solver)`` for iLQG MPC from :data:`PLANNER_DEFAULTS`.

    Args:
      model: the planner model (default :func:`planner_model`).
      nthread: derivative threads (default all cores).
      **overrides: keys of :data:`PLANNER_DEFAULTS` (``settings`` is merged key by key).

    Returns:
      ``(MujocoDynamics, TrajectoryCost, ILQG)``.
    """
    from ..dynamics import MujocoDynamics
    from ..solvers import ILQG, ILQGSettings

    unknown = set(overrides) - set(PLANNER_DEFAULTS)
    if unknown:
        raise ParameterError(f"make_planner: unknown settings {sorted(unknown)}")
    cfg = {**PLANNER_DEFAULTS, **overrides}
    cfg["settings"] = {**PLANNER_DEFAULTS["settings"], **overrides.get("settings", {})}
    if model is None:
        model = planner_model(cfg["planner_timestep"], solref=cfg["planner_solref"],
                              solimp=cfg["planner_solimp"])
    dyn = MujocoDynamics(model, nthread=nthread, derivative_stride=cfg["derivative_stride"],
                         centered=cfg["centered_differences"])
    cost = getup_cost(model)
    solver = ILQG(dyn, cost, ILQGSettings(**cfg["settings"]))
    return dyn, cost, solver


# =========================================================================== task registration


def _initial_state(model, data, rng) -> None:
    qpos, qvel = sample_lying_state(model, rng)
    data.qpos[:] = qpos
    data.qvel[:] = qvel


def _head_height(model, data) -> float:
    return standing_metrics(model, data)["head_height"]


def _ilqg_defaults() -> dict:
    cfg = PLANNER_DEFAULTS
    return {"horizon": cfg["horizon_steps"], "iterations_per_update": cfg["iterations_per_update"],
            "initial_iterations": 20, "derivative_stride": cfg["derivative_stride"],
            "lag_compensation": cfg["lag_compensation"],
            "settings": {k: v for k, v in cfg["settings"].items() if k != "max_iterations"}}


def _planner_model_default():
    cfg = PLANNER_DEFAULTS
    return planner_model(cfg["planner_timestep"], solref=cfg["planner_solref"], solimp=cfg["planner_solimp"])


def _build_task():
    from .mpc_task import MPCTask

    return MPCTask(
        name="humanoid-getup", model=MODEL_NAME,
        description="get up from a random lying pose and stand (head above 1.35 m, balanced, for 0.5 s)",
        plant_model=plant_model, planner_model=_planner_model_default,
        cost=lambda m: getup_cost(m), initial_state=_initial_state, success=is_standing,
        metric=_head_height, metric_label="head height above the feet [m]", success_hold=SUCCESS_HOLD_S, default_seconds=TASK_SECONDS,
        ilqg=_ilqg_defaults(), target_slowdown=float(PLANNER_DEFAULTS["slowdown"]))


#: The registered :class:`~contactopt.tasks.mpc_task.MPCTask` (``contactopt run humanoid-getup``).
HUMANOID_GETUP = _build_task()


def _register() -> None:
    from .mpc_task import register_ilqg_task

    register_ilqg_task(HUMANOID_GETUP)


_register()
