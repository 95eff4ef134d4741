"""Costs shared by every solver: residual terms × norms, with analytic derivatives.

A cost is a weighted sum of *terms*; a term is a *residual* ``r(x, u) ∈ R^m``
passed through a *norm* ``n(r) ≥ 0``::

    ℓ(x, u) = Σ_k  w_k · n_k(r_k(x, u))

Derivatives are taken in the state's **tangent space** (the convention of
``mjd_transitionFD`` and :func:`contactopt.model.state_integrate`):
``dx = [dq (nv), dv (nv), dact (na)]`` of size ``ndx = 2 nv + na``, so
``∂ℓ/∂x`` means ``∂ℓ(x ⊕ dx)/∂dx`` at ``dx = 0``.  With the residual Jacobians
``J_x = ∂r/∂dx (m, ndx)`` and ``J_u = ∂r/∂u (m, nu)`` and the norm's gradient
``g = ∂n/∂r`` and Hessian ``H = ∂²n/∂r²``::

    ℓ_x  = Σ w J_xᵀ g          ℓ_u  = Σ w J_uᵀ g
    ℓ_xx = Σ w J_xᵀ H J_x      ℓ_uu = Σ w J_uᵀ H J_u      ℓ_ux = Σ w J_uᵀ H J_x

The second-order terms ``gᵀ ∂²r`` are dropped (the Gauss-Newton Hessian), so
``ℓ_xx`` and ``ℓ_uu`` are positive semi-definite whenever every norm is convex.

Norms (vectorized over any number of leading axes, ``r`` of shape ``(..., m)``):

* :class:`Quadratic`  ``½ ‖r‖²``
* :class:`SmoothAbs`  ``Σ_j √(r_j² + α²) − α``  (linear far away, quadratic near 0)
* :class:`Cosh`       ``Σ_j α² (cosh(r_j/α) − 1)``  (control-limiting; curvature 1 at 0)
* :class:`L2`         ``√(rᵀr + p²) − p``  (smooth Euclidean distance)

Residuals (``target`` is subtracted; positions in metres, world frame):

* :class:`SitePosition`, :class:`BodyPosition` — ``xpos − target`` (``mj_jacSite``/``mj_jacBody``)
* :class:`CenterOfMass` — subtree centre of mass of a body (default: whole model)
  (``mj_jacSubtreeCom``)
* :class:`CenterOfMassVelocity` — its linear velocity ``J_com(q) v``
* :class:`Qpos` — ``q ⊖ q_target`` on the configuration manifold (``mj_differentiatePos``),
  exact Jacobian for quaternion joints
* :class:`Qvel` — ``v − v_target``
* :class:`Control` — ``u − u_target``
* :class:`MechanicalEnergy` — ``½vᵀMv − m gᵀc − E_target``
* :class:`Combination` — ``Σ c_k r_k − offset`` (e.g. centre of mass minus the mean of the feet)
* :class:`UserResidual` — any callable, Jacobian by central finite differences
* :class:`AccelerationResidual` — the base of goal-directed dynamics' terms written over the
  acceleration at one state (end effector, damping, centre of mass or pressure, contact force,
  posture; :mod:`contactopt.solvers.gdd.terms`): ``CostTerm(term, weight=w)`` like any other
  residual, consumed by the ``gdd`` planner only (:mod:`contactopt.costs.acceleration`)

Time-step convention
--------------------
:class:`TrajectoryCost` evaluates the discrete total cost ::

    J(X, U) = Σ_{i=0}^{T-1} h · ℓ(x_i, u_i)  +  ℓ_f(x_T)

with ``h`` the planner's time step in seconds: the running cost is a *rate*
(cost per second) and is multiplied by ``h`` so that the total does not depend
on how finely the horizon is sampled; the terminal cost is a plain cost and is
*not* multiplied.  When no terminal cost is given, ``ℓ_f(x) = h · ℓ_state(x)``,
the state terms of the running cost counted as one more step (the seed paper's
"final cost equal to the running cost").  :class:`LinearQuadraticCost` (for
Euclidean test systems) has no time step; its weights already include it.

MuJoCo work per stage: ``mj_kinematics`` + ``mj_comPos`` (positions, frames,
subtree centres of mass) — nothing else.  The built-in residuals except :class:`Qpos`
(and :class:`CenterOfMassVelocity` with its finite-difference position block) are
evaluated for all stages of a trajectory at once from per-stage copies of the
positions and Jacobians they need (:meth:`Residual.batch_requests`); the others stage
by stage.  :class:`MechanicalEnergy` (``mj_crb`` and its finite differences per stage)
runs its own compiled loop over the stages.  A :class:`UserResidual` that needs
more (contacts, sensors) may call further MuJoCo stages on the ``data`` it is
given.  Cost objects own a scratch ``MjData`` and are not thread-safe; use one
per thread.
"""

from __future__ import annotations

from .acceleration import AccelerationResidual
from .frames import BodyPosition, CenterOfMass, CenterOfMassVelocity, SitePosition
from .norms import L2, Cosh, Norm, OneSidedQuadratic, Quadratic, SmoothAbs
from .residuals import Combination, Control, MechanicalEnergy, Qpos, Qvel, Residual, UserResidual
from .stage import CostDerivatives, CostTerm, StageCost, StageDerivatives
from .trajectory import LinearQuadraticCost, TrajectoryCost, TrajectoryCostLike

__all__ = [
    # norms
    "Norm",
    "Quadratic",
    "SmoothAbs",
    "Cosh",
    "L2",
    "OneSidedQuadratic",
    # residuals
    "Residual",
    "SitePosition",
    "BodyPosition",
    "CenterOfMass",
    "CenterOfMassVelocity",
    "Qpos",
    "Qvel",
    "Control",
    "MechanicalEnergy",
    "Combination",
    "UserResidual",
    "AccelerationResidual",
    # costs
    "CostTerm",
    "StageCost",
    "StageDerivatives",
    "CostDerivatives",
    "TrajectoryCostLike",
    "TrajectoryCost",
    "LinearQuadraticCost",
]
