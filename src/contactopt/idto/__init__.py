"""Inverse-dynamics trajectory optimization (IDTO): problem, compliant contact, trust-region solver.

* :mod:`.contact` — :class:`ContactParameters`, :class:`ContactModel` (softplus
  normal force, smoothed Hunt–Crossley dissipation, regularized friction).
* :mod:`.problem` — :class:`IDTOProblem`: decision variables ``q_1 … q_T``,
  implicit inverse dynamics, residual form ``L = ½‖r‖²`` and block Jacobians.
* :mod:`.batch` — :class:`ContactBatch`: the compliant contact forces (and ``∂F/∂v``, the
  analytic ``∂F/∂q``) of many configurations at once, IDTO's hot path.
* :mod:`.solver` — :class:`IDTOSolver`: Gauss–Newton with a block-pentadiagonal
  Hessian, banded Cholesky, diagonal scaling and a dogleg trust region; penalty or
  equality-constrained (Lagrange-multiplier) treatment of underactuation.
"""

from .contact import (
    ContactForces,
    ContactModel,
    ContactParameters,
    hunt_crossley_factor,
    regularized_friction,
    softplus_normal_force,
)
from .batch import BatchForces, ContactBatch
from .problem import IDTOProblem, Linearization, Trajectory
from .solver import (
    BandedHessian,
    ConvergenceCriteria,
    IDTOSolver,
    IterationLog,
    SolverOptions,
    SolverResult,
    SolverStatus,
    gauss_newton_system,
)

__all__ = [
    "ContactForces", "ContactModel", "ContactParameters", "hunt_crossley_factor",
    "regularized_friction", "softplus_normal_force", "IDTOProblem", "Linearization",
    "Trajectory", "BandedHessian", "ConvergenceCriteria", "IDTOSolver", "IterationLog",
    "SolverOptions", "SolverResult", "SolverStatus", "gauss_newton_system", "ContactBatch", "BatchForces",
]
