"""Model-predictive control: one runner for every planner, policies, and the iLQG planner.

* :func:`run_mpc` — receding-horizon control of a MuJoCo plant, synchronous (seeded,
  lag modeled) or asynchronous (planner and plant threads, real-time pacing).
* :class:`ILQGPlanner` — iLQG with warm starts and feedback policies.
* :class:`IDTOPlanner` — IDTO, one trust-region iteration per update, with a
  cubic-spline + PD policy (:class:`IDTOPolicy`).
* :class:`TrajectoryPolicy` — ``u = Ū(t) + K(t)(x ⊖ X̄(t))`` between updates.
"""

from .idto_planner import IDTOPlanner, IDTOPolicy
from .ilqg_planner import ILQGPlanner
from .policy import ConstantPolicy, Policy, TrajectoryPolicy
from .runner import (
    MPCResult,
    MPCSettings,
    Planner,
    PlannerUpdate,
    Push,
    UpdateRecord,
    find_min_slowdown,
    model_error,
    perturb_model,
    plant_stepper,
    run_mpc,
)

__all__ = ["run_mpc", "MPCSettings", "MPCResult", "Planner", "PlannerUpdate", "UpdateRecord", "Push",
           "perturb_model", "model_error", "plant_stepper", "find_min_slowdown", "ILQGPlanner", "IDTOPlanner", "IDTOPolicy", "Policy", "TrajectoryPolicy",
           "ConstantPolicy"]
