"""Iterative LQG (Tassa, Erez & Todorov 2012).

* :mod:`.solver` — :class:`ILQG`, its settings, results and the box QP (Python reference of
  the backward pass);
* :mod:`.kernels` — the compiled (numba) backward pass and box QP.
"""

from .solver import (
    ILQG,
    BoxQPResult,
    BoxQPStatus,
    ILQGIterationLog,
    ILQGResult,
    ILQGSettings,
    ILQGStatus,
    Regularization,
    ValueUpdate,
    decrease_regularization,
    increase_regularization,
    shift_plan,
    solve_box_qp,
)

__all__ = [
    "ILQG",
    "BoxQPResult",
    "BoxQPStatus",
    "ILQGIterationLog",
    "ILQGResult",
    "ILQGSettings",
    "ILQGStatus",
    "Regularization",
    "ValueUpdate",
    "decrease_regularization",
    "increase_regularization",
    "shift_plan",
    "solve_box_qp",
]
