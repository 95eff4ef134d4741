"""Contact-space geometry and contact models (joint limits and contacts as rows of a contact Jacobian).

* :mod:`.geometry` — active joint limits and contacts of a MuJoCo state within a
  distance ``w_max``: Jacobian rows (t1, t2, normal), distances, friction, frames.
* :mod:`.convex` — the convex, smooth, invertible contact model (Todorov 2011):
  forward ``(A, c) → (f, v)`` and inverse ``(A, v) → (f, c)`` by a primal
  interior-point Newton method at fixed κ, single and batched (numba).
* :mod:`.convex_dynamics` — that model in generalized coordinates on any MuJoCo
  model: forward ``(q, w, u) → (q⁺, w⁺)``, inverse ``(q, w, w⁺) → u``, and the
  stepper behind ``simulate(..., contact="convex")``.
* :mod:`.smooth` — the smooth diagonal contact model of the online-iLQG paper (Tassa, Erez &
  Todorov 2012, eqs. 14–17): :class:`~.smooth.SmoothContactDynamics` is a planner
  :class:`~contactopt.dynamics.Dynamics` (rollouts, derivatives) and a plant stepper.
* :mod:`.reference` — the exact conic problem 13 solved by Clarabel (optional).
* :mod:`.compliant` — IDTO's compliant contact model: :class:`~.compliant.ContactParameters`,
  :class:`~.compliant.CompliantContactModel` (softplus normal force, smoothed Hunt–Crossley
  dissipation, regularized friction); :mod:`.compliant_batch` —
  :class:`~.compliant_batch.CompliantContactBatch`, its forces (and ``∂F/∂v``, the analytic
  ``∂F/∂q``) of many configurations at once (imported from their modules).
"""

from .convex import (
    BatchSolution,
    ContactBatch,
    ContactSolution,
    ContactStatus,
    ConvexContactModel,
    velocity_barrier,
)
from .convex_dynamics import ConvexContactProblem, ConvexDynamics, ForwardStep, InverseStep
from .smooth_dynamics import SingularInertiaError, UnconstrainedDynamics
from .geometry import ContactSpace, contact_space
from .smooth import SmoothContactDynamics, SmoothContactModel

__all__ = [
    "BatchSolution", "ContactBatch", "ContactSolution", "ContactStatus", "ConvexContactModel",
    "velocity_barrier", "ContactSpace", "contact_space",
    "ConvexContactProblem", "ConvexDynamics", "ForwardStep", "InverseStep", "SingularInertiaError",
    "UnconstrainedDynamics", "SmoothContactDynamics", "SmoothContactModel",
]
