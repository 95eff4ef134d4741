"""Acceleration-level residuals: cost terms over the generalized acceleration at one state.

Most of the shared cost language is written over states and controls, ``r(x, u)``, and every
planner consumes it.  Goal-directed dynamics (:mod:`contactopt.solvers.gdd`) also has terms that
are written directly over the acceleration ``a`` (``nv``, rad/s² or m/s²) at the measured state
``(q, v)``: an end-effector acceleration toward a spring target, damping, a centre-of-mass or
centre-of-pressure target, a contact-force target, a posture PD law.  They are residuals of the
same :class:`~contactopt.costs.CostTerm` as every other term::

    CostTerm(EndEffectorAcceleration(model, site="hand", target=spring), weight=200.0)

and their value is ``w · ℓ_t(a)`` with ``ℓ_t`` the term's own quadratic form in ``a`` (and in the
constraint forces ``f(a)``, for the force terms); the term's own ``weight`` (default 1) multiplies
the :class:`~contactopt.costs.CostTerm`'s.  Only a planner that optimizes accelerations consumes
them (``gdd``); iLQG and IDTO plan over states and controls and refuse a cost that holds one,
naming the term, before any run starts.
"""

from __future__ import annotations

__all__ = ["AccelerationResidual"]


class AccelerationResidual:
    """Base of the terms written over the generalized acceleration ``a`` at one state.

    A marker type: :class:`~contactopt.costs.CostTerm` accepts it as its residual, the state-level
    evaluators (:class:`~contactopt.costs.StageCost`, hence iLQG and IDTO) refuse it, and
    goal-directed dynamics (:class:`contactopt.solvers.gdd.AccelerationTerm`, its one subclass
    family) evaluates it.

    Attributes:
      name: label used in logs and error messages.
      model: the ``MjModel`` the term was built for, or None for a term that needs none
        (e.g. damping, ``−β v``).
    """

    name: str = "acceleration term"
    model = None
