"""Goal-directed dynamics (Todorov): a cost over accelerations in, physical controls out.

* :class:`GDDSolver` / :func:`gdd_step` — the solver of the inverse formulation (eq. 8)
  and a stepping helper for goal-directed simulation.
* :mod:`contactopt.solvers.gdd.costs` — composable, weighted cost terms.
* :mod:`contactopt.solvers.gdd.problem` — the per-state quantities read from one MuJoCo evaluation.
"""

from .costs import (
    AccelerationTarget,
    AccelerationTerm,
    CenterOfMassAcceleration,
    CenterOfPressure,
    ContactForce,
    Cost,
    CostArrays,
    Damping,
    EndEffectorAcceleration,
    FrameState,
    MinimumJerk,
    PostureTarget,
    SpringDamper,
    TermModel,
)
from .problem import ActuationArrays, ActuationModel, GDDProblem, build_problem
from .solver import (
    DualUpdate,
    GDDIterationLog,
    GDDResult,
    GDDSettings,
    GDDSolver,
    GDDStatus,
    LineSearch,
    gdd_step,
)

# Deprecated alias, not exported: tests/test_gdd_reference.py still imports it.

__all__ = [
    # solver
    "GDDSolver", "GDDSettings", "GDDResult", "GDDIterationLog", "GDDStatus", "LineSearch", "DualUpdate",
    "gdd_step",
    # cost terms
    "Cost", "AccelerationTerm", "CostArrays", "TermModel", "FrameState", "SpringDamper", "MinimumJerk",
    "EndEffectorAcceleration", "Damping", "CenterOfMassAcceleration", "CenterOfPressure",
    "ContactForce", "AccelerationTarget", "PostureTarget",
    # per-state quantities
    "GDDProblem", "build_problem", "ActuationModel", "ActuationArrays",
]
