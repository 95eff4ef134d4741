"""Trajectory optimizers.  Each has a settings dataclass, ``solve()``, a warm start and a result object.

* :mod:`contactopt.solvers.ilqg` — iterative LQG with state regularization, the
  improved value update, expected-reduction line search and control limits
  (Tassa, Erez & Todorov 2012).
"""

from .ilqg import (
    ILQG,
    BoxQPResult,
    BoxQPStatus,
    ILQGResult,
    ILQGSettings,
    IterationLog,
    Regularization,
    Status,
    ValueUpdate,
    decrease_regularization,
    increase_regularization,
    shift_plan,
    solve_box_qp,
)

__all__ = [
    "ILQG",
    "ILQGSettings",
    "ILQGResult",
    "IterationLog",
    "Regularization",
    "ValueUpdate",
    "Status",
    "BoxQPResult",
    "BoxQPStatus",
    "solve_box_qp",
    "shift_plan",
    "increase_regularization",
    "decrease_regularization",
]
