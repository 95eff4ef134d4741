"""Cost terms over accelerations for goal-directed dynamics, composable and weighted.

Every term is, at a given state, a (Gauss-Newton) quadratic in the acceleration
``a (nv,)`` and, through MuJoCo's inverse constraint force ``f(a) = −∇s(J a − aref)``
(piecewise affine in ``a`` for pyramidal cones), in the constraint forces::

    ℓ_t(a) = ½ aᵀ Q a + qᵀ a + c0 + ½ ‖Ka a + Kf f(a) + e‖²

:meth:`AccelerationTerm.fill` writes a term's data for one
:class:`~contactopt.solvers.gdd.problem.GDDProblem` in place (no allocation on the
solver's hot path); :class:`Cost` gathers the terms into :class:`CostArrays`,
the form the solver kernel takes, and :meth:`AccelerationTerm.term_model` returns the
weighted arrays of one term (:class:`TermModel`).  :meth:`AccelerationTerm.evaluate` gives value, gradient and
Hessian (exact inside each piece where the constraint states are fixed:
``∇ℓ = Qa + q + Kᵀr``, ``H = Q + KᵀK`` with ``K = Ka + Kf ∂f/∂a``).

Terms (Todorov, *Goal directed dynamics*, sections II and V):

* :class:`EndEffectorAcceleration` — ``(w/2)‖J_e a + J̇_e v − a*_e‖²`` (eq. 11) for a
  site or body, 3 rows (position) or 6 rows (pose), with ``a*_e`` from a
  :class:`SpringDamper` toward a spatial goal, a :class:`MinimumJerk` profile, or
  a fixed array;
* :class:`Damping` — ``(α/2)‖a + βv‖²_M`` (eq. 26);
* :class:`CenterOfMassAcceleration` — ``(w/2)‖J_c a + J̇_c v − a*_c‖²``;
* :class:`CenterOfPressure` — ``(w/2)‖Σ_c f_n,c (p_c − p*)_xy / F‖²`` over ground contacts;
* :class:`ContactForce` — ``(w/2)‖F_body(f) − F*‖²``, the net contact force on a body;
* :class:`AccelerationTarget` — ``(w/2)‖a − a*‖²_W`` with an acceleration target
  handed in by an external policy (``W = M`` or identity on chosen dofs).

Units: accelerations m/s² (rad/s²), forces N; a weight multiplies the squared
residual, so its unit is that of the objective (N²/kg ≡ N·m/s²) divided by the
squared residual unit.

The pieces live in :mod:`~contactopt.solvers.gdd.cost_base` (the base class, :class:`Cost`,
:class:`CostArrays`, :class:`TermModel`), :mod:`~contactopt.solvers.gdd.targets` (the desired
accelerations) and :mod:`~contactopt.solvers.gdd.terms` (the terms); this module re-exports them.
"""

from __future__ import annotations

from .cost_base import AccelerationTerm, Cost, CostArrays, TermModel
from .targets import FrameState, MinimumJerk, PostureTarget, SpringDamper
from .terms import (
    AccelerationTarget,
    CenterOfMassAcceleration,
    CenterOfPressure,
    ContactForce,
    Damping,
    EndEffectorAcceleration,
)

__all__ = [
    "FrameState",
    "TermModel",
    "CostArrays",
    "AccelerationTerm",
    "Cost",
    "SpringDamper",
    "MinimumJerk",
    "EndEffectorAcceleration",
    "Damping",
    "CenterOfMassAcceleration",
    "CenterOfPressure",
    "ContactForce",
    "AccelerationTarget",
    "PostureTarget",
]
