"""The shared cost language (:mod:`contactopt.costs`) at IDTO's knots.

A :class:`~contactopt.costs.TrajectoryCost` ``J = Σ_{t<T} h ℓ(x_t, u_t) + s_f ℓ_f(x_T)`` is
evaluated on IDTO's trajectory ``q_0 … q_T``: ``x_t = [q_t, v_t]`` with
``v_t = (q_t ⊖ q_{t−1})/h`` and the controls ``u_t = G⁺ τ_t`` (``G = ∂qfrc_actuator/∂ctrl``,
``τ_t`` the inverse-dynamics force that realizes the step ``t → t+1``).  Every term enters
in its norm's least-squares form (:meth:`~contactopt.costs.StageCost.least_squares`), so
``J = ½‖c‖²`` with the rows

    c_t = √h ρ(x_t, u_t)            (t = 0 … T−1, running)
    c_f = √s_f ρ_f(x_T)             (terminal, placed in step T−1's block)

appended to each step's ``τ`` block of :class:`~contactopt.solvers.idto.problem.IDTOProblem`
(the rows of step ``t`` depend on ``q_{t−1}, q_t, q_{t+1}``, the stencil of ``τ_t``).
Their Jacobians follow the chain rule through the velocities and the inverse dynamics::

    ∂c_t/∂q_{t−1} = √h (J_v ∂v_t/∂q_{t−1} + J_u G⁺ ∂τ_t/∂q_{t−1})
    ∂c_t/∂q_t     = √h (J_q + J_v ∂v_t/∂q_t + J_u G⁺ ∂τ_t/∂q_t)
    ∂c_t/∂q_{t+1} = √h  J_u G⁺ ∂τ_t/∂q_{t+1}

with ``J_q, J_v, J_u`` the residual Jacobians in the tangent space (slots of the fixed
``q_0`` are zero).  :func:`quadratic_tracking` recognizes costs that IDTO's own diagonal
tracking weights express exactly (the fast path, no knot rows).
"""

from __future__ import annotations

import mujoco
import numpy as np

from ...costs import Control, CostTerm, Qpos, Quadratic, Qvel, TrajectoryCost
from ...errors import ParameterError

__all__ = ["KnotCost", "knot_nominal", "quadratic_tracking"]


class KnotCost:
    """A :class:`~contactopt.costs.TrajectoryCost` as extra rows of IDTO's ``τ`` blocks.

    Args:
      cost: the trajectory cost (built on the IDTO problem's model; its time step must be
        the problem's ``h``).
      control_map: ``G⁺ (nu, nv)``, the controls of a generalized force (``u = G⁺ τ``).
      num_steps: ``T``.

    Attributes:
      num_rows: rows per step block, ``m_run + m_term``.
    """

    def __init__(self, cost: TrajectoryCost, control_map: np.ndarray, num_steps: int):
        if not isinstance(cost, TrajectoryCost):
            raise ParameterError(f"IDTO cost must be a contactopt.costs.TrajectoryCost, got {type(cost).__name__}")
        self.cost = cost
        self.model = cost.model
        self.G_pinv = np.asarray(control_map, dtype=float)
        self.T = int(num_steps)
        self.m_run = cost.running.num_rows
        self.m_term = cost.terminal.num_rows
        self.num_rows = self.m_run + self.m_term
        self._sqrt_h = np.sqrt(cost.timestep)
        self._sqrt_f = np.sqrt(cost.terminal_scale)

    def _states(self, q, v) -> np.ndarray:
        model = self.model
        X = np.zeros((q.shape[0], model.nq + model.nv + model.na))
        X[:, :model.nq] = q
        X[:, model.nq:model.nq + model.nv] = v
        return X

    def controls(self, tau) -> np.ndarray:
        """``U (T, nu) = τ G⁺ᵀ``: the controls of the planned forces ``tau (T, nv)``."""
        return np.asarray(tau, dtype=float) @ self.G_pinv.T

    def residuals(self, q, v, tau, *, derivatives: bool = False):
        """Rows ``(T, num_rows)`` of the trajectory ``q (T+1, nq)``, ``v (T+1, nv)``, ``tau (T, nv)``.

        With ``derivatives`` also the residual Jacobians ``(Jx_run (T, m_run, ndx),
        Ju_run (T, m_run, nu) | None, Jx_term (1, m_term, ndx))`` (already scaled).
        """
        T = self.T
        X = self._states(q, v)
        U = self.controls(tau)
        rho, Jx, Ju = self.cost.running.least_squares(X[:T], U, derivatives=derivatives)
        rho_f, Jx_f, _ = self.cost.terminal.least_squares(X[T:], None, derivatives=derivatives,
                                                          row_offset=T)
        rows = np.zeros((T, self.num_rows))
        rows[:, :self.m_run] = self._sqrt_h * rho
        rows[T - 1, self.m_run:] = self._sqrt_f * rho_f[0]
        if not derivatives:
            return rows, None
        return rows, (self._sqrt_h * Jx, None if Ju is None else self._sqrt_h * Ju, self._sqrt_f * Jx_f)

    def total(self, q, v, tau) -> float:
        """``J`` of the trajectory: ``½‖c‖²`` of :meth:`residuals`."""
        rows, _ = self.residuals(q, v, tau)
        return 0.5 * float(np.sum(rows * rows))

    def jacobian(self, q, v, tau, dtau, dvdq_cur, dvdq_back):
        """Rows and their block Jacobian ``(T, 3, num_rows, nv)`` (slots ``q_{t−1}, q_t, q_{t+1}``).

        Args:
          q, v, tau: the trajectory (``(T+1, nq)``, ``(T+1, nv)``, ``(T, nv)``).
          dtau: ``(T, 3, nv, nv)`` unweighted ``∂τ_t/∂(q_{t−1}, q_t, q_{t+1})``.
          dvdq_cur, dvdq_back: ``(T+1, nv, nv)`` ``∂v_t/∂q_t`` and ``∂v_t/∂q_{t−1}``.

        Returns:
          ``(rows (T, num_rows), J (T, 3, num_rows, nv))``.
        """
        T, nv = self.T, self.model.nv
        rows, (Jx, Ju, Jx_f) = self.residuals(q, v, tau, derivatives=True)
        J = np.zeros((T, 3, self.num_rows, nv))
        run = slice(0, self.m_run)
        Jq, Jv = Jx[:, :, :nv], Jx[:, :, nv:2 * nv]
        # state part: q_t and v_t(q_{t−1}, q_t); q_0 and v_0 are fixed (no slot for step 0)
        if T > 1:
            J[1:, 1, run] = Jq[1:] + Jv[1:] @ dvdq_cur[1:T]
        if T > 2:
            J[2:, 0, run] = Jv[2:] @ dvdq_back[2:T]
        # control part: u_t = G⁺ τ_t(q_{t−1}, q_t, q_{t+1})
        if Ju is not None:
            JuG = Ju @ self.G_pinv  # (T, m_run, nv)
            J[:, :, run] += JuG[:, None] @ dtau
            J[0, :2] = 0.0  # q_{−1}, q_0: fixed
            if T > 1:
                J[1, 0] = 0.0
        # terminal rows in step T−1's block: slots q_{T−1} (1) and q_T (2)
        term = slice(self.m_run, self.num_rows)
        Jq_f, Jv_f = Jx_f[0, :, :nv], Jx_f[0, :, nv:2 * nv]
        J[T - 1, 2, term] = Jq_f + Jv_f @ dvdq_cur[T]
        if T > 1:
            J[T - 1, 1, term] = Jv_f @ dvdq_back[T]
        return rows, J


def _simple_motor_weights(model: mujoco.MjModel, G_pinv: np.ndarray, actuators) -> np.ndarray | None:
    """Diagonal ``D (nv,)`` with ``‖(G⁺τ)[actuators]‖² = τᵀ diag(D) τ`` for every τ, or None when
    the selected rows of ``G⁺`` are not supported on distinct dofs (then no diagonal exists)."""
    P = G_pinv[actuators]  # (k, nv)
    nz = np.abs(P) > 1e-12 * max(np.abs(P).max(initial=0.0), 1.0)
    if np.any(nz.sum(axis=0) > 1):
        return None
    return np.sum(P * P, axis=0)


def quadratic_tracking(cost: TrajectoryCost, G_pinv: np.ndarray):
    """IDTO's diagonal weights equal to ``cost``, or None when they cannot express it exactly.

    Exact when every term is :class:`~contactopt.costs.Quadratic` on :class:`Qpos` (its wrapped
    hinge angles become the problem's ``wrap_dofs``, so IDTO compares those targets by the
    shortest angular difference too),
    :class:`Qvel` or :class:`Control` (zero control target, each selected actuator driving its
    own dof: ``‖G⁺τ‖²`` diagonal in ``τ``), with at most one target per dof.  Then, with IDTO's
    cost ``h Σ q̃ᵀQ_q q̃ + ṽᵀQ_v ṽ + τᵀRτ + q̃_Tᵀ Q_f,q q̃_T + ṽ_Tᵀ Q_f,v ṽ_T`` (no ½):
    ``Q = w/2`` on the selected dofs, ``R = (w/2) diag(G⁺ᵀG⁺)``, and the terminal weights
    ``s_f w/2``.

    A :class:`Qpos` or :class:`Qvel` whose target follows a reference
    (:meth:`~contactopt.costs.Residual.with_reference`) becomes a nominal per knot:
    :func:`knot_nominal` reads its scheduled targets.  Two terms on one dof must then follow the
    same reference callable (else None: the general knot rows handle them).

    Returns:
      dict with ``Qq, Qv, R, Qf_q, Qf_v`` (``(nv,)``), ``q_nom (nq,)``, ``v_nom (nv,)``,
      ``wrap_dofs`` (the hinge dofs whose error wraps, sorted) and ``moving``: a list of
      ``("q", residual, qpos indices)`` / ``("v", residual, dofs)`` for the moving targets.
    """
    model = cost.model
    nv = model.nv
    out = {k: np.zeros(nv) for k in ("Qq", "Qv", "R", "Qf_q", "Qf_v")}
    q_nom = model.qpos0.copy()
    v_nom = np.zeros(nv)
    q_set = np.zeros(model.nq, dtype=bool)
    wrap = np.zeros(nv, dtype=bool)
    plain = np.zeros(nv, dtype=bool)
    v_set = np.zeros(nv, dtype=bool)
    q_ref: list = [None] * model.nq  # the reference callable of each qpos index (None: fixed)
    v_ref: list = [None] * nv
    moving: list = []
    for stage, scale, wq, wv in ((cost.running, 1.0, "Qq", "Qv"),
                                 (cost.terminal, cost.terminal_scale, "Qf_q", "Qf_v")):
        for term in stage.terms:
            if not isinstance(term, CostTerm) or type(term.norm) is not Quadratic:
                return None
            res, w = term.residual, 0.5 * scale * term.weight
            if type(res) is Qpos:
                w_dofs = np.zeros(nv, dtype=bool)
                w_dofs[res.dofs[res.wrapped]] = True
                sel = np.zeros(nv, dtype=bool)
                sel[res.dofs] = True
                wrap |= w_dofs
                plain |= sel & ~w_dofs
                if np.any(wrap & plain):  # one dof wrapped by one term and not by another
                    return None
                adr = _joint_qpos_addresses(model, res.dofs)
                if not _same_targets(q_set[adr], [q_ref[i] for i in adr], res.reference,
                                     q_nom[adr], res.target[adr]):
                    return None
                q_nom[adr] = res.target[adr]
                q_set[adr] = True
                for i in adr:
                    q_ref[i] = res.reference
                if res.reference is not None and all(res is not r for _, r, _ in moving):
                    moving.append(("q", res, adr))
                out[wq][res.dofs] += w
            elif type(res) is Qvel:
                if not _same_targets(v_set[res.dofs], [v_ref[i] for i in res.dofs], res.reference,
                                     v_nom[res.dofs], res.target):
                    return None
                v_nom[res.dofs] = res.target
                v_set[res.dofs] = True
                for i in res.dofs:
                    v_ref[i] = res.reference
                if res.reference is not None and all(res is not r for _, r, _ in moving):
                    moving.append(("v", res, res.dofs))
                out[wv][res.dofs] += w
            elif type(res) is Control and stage is cost.running:
                if res.reference is not None or np.any(res.target != 0.0):
                    return None
                D = _simple_motor_weights(model, G_pinv, res.actuators)
                if D is None:
                    return None
                out["R"] += w * D
            else:
                return None
    return {**out, "q_nom": q_nom, "v_nom": v_nom, "wrap_dofs": np.flatnonzero(wrap), "moving": moving}


def _same_targets(already, refs, reference, old, new) -> bool:
    """Whether a term's targets agree with those already set on its coordinates: fixed targets
    equal, or both following the very same reference callable."""
    for was_set, ref, a, b in zip(np.atleast_1d(already), refs, np.atleast_1d(old), np.atleast_1d(new)):
        if not was_set:
            continue
        if ref is not reference or (reference is None and a != b):
            return False
    return True


def knot_nominal(fast: dict, num_knots: int):
    """IDTO's per-knot nominal ``(q_nom (K, nq), v_nom (K, nv))`` of :func:`quadratic_tracking`'s
    result ``fast``: its fixed ``q_nom``/``v_nom`` with the coordinates of every moving target
    replaced by that residual's scheduled targets (:meth:`~contactopt.costs.Residual.schedule`;
    knot ``k`` ← scheduled stage ``k``, the last row repeated past the schedule's end)."""
    K = int(num_knots)
    q_nom = np.tile(fast["q_nom"], (K, 1))
    v_nom = np.tile(fast["v_nom"], (K, 1))
    for kind, res, idx in fast.get("moving", ()):
        targets = res.scheduled_targets
        if targets is None:
            continue
        rows = targets[np.minimum(np.arange(K), len(targets) - 1)]
        if kind == "q":
            q_nom[:, idx] = rows[:, idx]
        else:
            v_nom[:, idx] = rows
    return q_nom, v_nom


def _joint_qpos_addresses(model: mujoco.MjModel, dofs) -> np.ndarray:
    """The qpos indices of the joints that own ``dofs`` (all coordinates of each joint, so a
    quaternion's four): where a :class:`Qpos` target on those dofs enters ``q ⊖ q_nom``."""
    sizes = {int(mujoco.mjtJoint.mjJNT_FREE): 7, int(mujoco.mjtJoint.mjJNT_BALL): 4}
    out = []
    for j in sorted({int(model.dof_jntid[d]) for d in np.asarray(dofs).tolist()}):
        adr = int(model.jnt_qposadr[j])
        out.extend(range(adr, adr + sizes.get(int(model.jnt_type[j]), 1)))
    return np.array(out, dtype=np.intp)
