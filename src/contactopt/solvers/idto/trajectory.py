"""Data of one IDTO trajectory (:class:`Trajectory`) and of the problem's linearization at it
(:class:`Linearization`), see :class:`~contactopt.solvers.idto.problem.IDTOProblem`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Linearization", "Trajectory"]


@dataclass(frozen=True)
class Trajectory:
    """Quantities of one trajectory ``q (T+1, nq)``.

    Attributes:
      q: ``(T+1, nq)`` configurations; v: ``(T+1, nv)`` velocities [per s];
      a: ``(T, nv)`` accelerations; tau: ``(T, nv)`` generalized forces
      (``τ_t`` realizes the step ``t → t+1``); contact: ``(T, nv)``
      generalized contact forces at ``(q_{t+1}, v_{t+1})``.
    """

    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    tau: np.ndarray
    contact: np.ndarray


@dataclass
class Linearization:
    """Residual and block Jacobian of the problem at one trajectory.

    Decision block ``k = 0 … T−1`` is the tangent perturbation of ``q_{k+1}``.

    Attributes:
      r: ``(m,)`` residual vector (:meth:`IDTOProblem.residuals` layout).
      Jq: ``(T, nv, nv)`` ∂r_q,t/∂q_t for ``t = 1 … T``.
      Jv: ``(T, 2, nv, nv)`` ∂r_v,t/∂(q_{t−1}, q_t) for ``t = 1 … T`` (slot 0 is zero for ``t = 1``).
      Jtau: ``(T, 3, mτ, nv)`` ∂r_τ,t/∂(q_{t−1}, q_t, q_{t+1}) for ``t = 0 … T−1``
        (slots of the fixed ``q_{−1}, q_0`` are zero); rows as :meth:`IDTOProblem.residuals`
        (``R`` rows, unactuated-penalty rows, actuator-limit rows).
      times: seconds spent in ``"residual"`` and ``"jacobian"``.
      tau: ``(T, nv)`` inverse-dynamics forces at the linearization point.
      dtau: ``(T, 3, nv, nv)`` the unweighted ∂τ_t/∂(q_{t−1}, q_t, q_{t+1}) (``Jtau = W dtau``
        on the ``R`` and penalty rows).
    """

    r: np.ndarray
    Jq: np.ndarray
    Jv: np.ndarray
    Jtau: np.ndarray
    times: dict
    tau: np.ndarray | None = None
    dtau: np.ndarray | None = None
