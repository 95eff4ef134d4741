"""Inverse-dynamics trajectory optimization (IDTO): problem and trust-region solver.

* :mod:`.problem` — :class:`IDTOProblem`: decision variables ``q_1 … q_T``,
  implicit inverse dynamics, residual form ``L = ½‖r‖²`` and block Jacobians; contact
  forces of a :class:`~contactopt.contact.compliant.CompliantContactModel` (batched by
  :class:`~contactopt.contact.compliant_batch.CompliantContactBatch`, IDTO's hot path) or the
  convex model.
* :mod:`.solver` — :class:`IDTOSolver`: Gauss–Newton with a block-pentadiagonal
  Hessian, banded Cholesky, diagonal scaling and a dogleg trust region; penalty or
  equality-constrained (Lagrange-multiplier) treatment of underactuation.
* :mod:`.continuation` — :func:`solve_with_continuation`: κ-continuation on the convex
  contact model (geometric :class:`KappaSchedule`, each stage warm-started from the last).
"""

from .continuation import ContinuationResult, ContinuationStage, KappaSchedule, solve_with_continuation
from .problem import IDTOProblem, Linearization, Trajectory
from .solver import (
    BandedHessian,
    ConvergenceCriteria,
    IDTOIterationLog,
    IDTOResult,
    IDTOSettings,
    IDTOSolver,
    IDTOStatus,
    gauss_newton_system,
)

# Deprecated alias, not exported: mpc/builders.py and tasks/idto_task.py still import it.

__all__ = [
    "IDTOProblem", "Linearization", "Trajectory", "BandedHessian", "ConvergenceCriteria",
    "IDTOSolver", "IDTOIterationLog", "IDTOResult", "IDTOSettings", "IDTOStatus",
    "gauss_newton_system", "KappaSchedule", "ContinuationStage", "ContinuationResult",
    "solve_with_continuation",
]
