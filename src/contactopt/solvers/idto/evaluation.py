"""Evaluation of :class:`~contactopt.solvers.idto.problem.IDTOProblem` (mixed into it as
:class:`_EvaluationMixin`): the inverse dynamics of each backend, the velocities and trajectories
of a configuration sequence (the rigid-body terms as compiled loops or MuJoCo calls, split over
the worker threads; the compliant contact batch), the residuals and the cost, and the retraction
``q ⊕ dq``."""

from __future__ import annotations

import mujoco
import numpy as np

from ...costs.residuals import _wrap_angle
from ...errors import as_array
from . import problem as _problem
from .kernels import _retract_kernel, _rigid_kernel, _velocity_kernel
from .linearize import _SQRT_EPS
from .trajectory import Trajectory


def _native() -> bool:
    """:func:`contactopt.solvers.idto.problem._native` (reads the switch ``NATIVE_STEPS`` there)."""
    return _problem._native()


_NO_M = np.zeros((0, 0, 0))


class _EvaluationMixin:
    """Evaluation methods of :class:`~contactopt.solvers.idto.problem.IDTOProblem`."""

    # ------------------------------------------------------------------ evaluation

    def _data(self) -> mujoco.MjData:
        d = getattr(self._local, "data", None)
        if d is None:
            d = self._local.data = mujoco.MjData(self._m)
        return d

    def _convex(self):
        cd = getattr(self._local, "convex", None)
        if cd is None:
            from ...contact import ConvexDynamics
            cd = self._local.convex = ConvexDynamics(self._mh, self._convex_contact)
        elif cd.contact_model is not self._convex_contact:  # κ changed (set_convex_contact)
            cd.contact_model = self._convex_contact
        return cd

    def _diff(self, q0, q1, dt) -> np.ndarray:
        out = np.empty(self.nv)
        mujoco.mj_differentiatePos(self.model, out, dt, q0, q1)
        return out

    def _plus(self, q, dq) -> np.ndarray:
        out = q.copy()
        mujoco.mj_integratePos(self.model, out, dq, 1.0)
        return out

    def _steps(self, q) -> np.ndarray:
        """Forward-difference steps ``√ε·max(1, |q_i|)`` per tangent dof."""
        mag = np.ones(self.nv)
        lin = self._dof_qadr >= 0
        mag[lin] = np.maximum(1.0, np.abs(q[self._dof_qadr[lin]]))
        return _SQRT_EPS * mag

    def inverse_dynamics(self, q_next, v_next, a, *, mass_matrix: bool = False):
        """``τ = M(q') a + c(q', v') − F_passive(q', v') − F_contact(q', v')``.

        Args:
          q_next: ``(nq,)``; v_next: ``(nv,)``; a: ``(nv,)``.
          mass_matrix: also return the dense ``M(q') (nv, nv)``.

        Returns:
          ``(τ (nv,), F_contact (nv,))`` or ``(τ, F_contact, M)``.
        """
        m, d = self._m, self._data()
        tau = self._rigid_terms(q_next, v_next, a)  # leaves d at (q', v')
        fc = np.zeros(self.nv)
        if self.contact is not None:
            fc = self.contact.forces(d, v_next).generalized
            tau -= fc
        if mass_matrix:
            M = np.empty((self.nv, self.nv))
            mujoco.mj_fullM(m, d, M)
            return tau, fc, M
        return tau, fc

    def step_inverse_dynamics(self, q, v, q_next, v_next):
        """``τ_t`` of the selected backend for the step ``(q_t, v_t) → (q_{t+1}, v_{t+1})``.

        Args:
          q, q_next: ``(nq,)``; v, v_next: ``(nv,)`` (``v_next`` is ``(q_next ⊖ q)/h``).

        Returns:
          ``(τ (nv,), F_contact (nv,))``: for ``"mujoco"`` the contact term is
          MuJoCo's ``qfrc_constraint``, for ``"convex"`` ``Jᵀf/h``.
        """
        h = self.h
        if self.backend == "compliant":
            return self.inverse_dynamics(q_next, v_next, (v_next - v) / h)
        if self.backend == "mujoco":
            m, d = self._m, self._data()
            d.qpos[:] = q
            d.qvel[:] = v
            d.qacc[:] = (v_next - v) / h
            mujoco.mj_inverse(m, d)
            return d.qfrc_inverse.copy(), d.qfrc_constraint.copy()
        st = self._convex().inverse(q, v, v_next)
        fc = st.problem.space.J.T @ st.f / h if st.f.size else np.zeros(self.nv)
        return st.qfrc.copy(), fc

    def trajectory(self, q) -> Trajectory:
        """Velocities, accelerations, inverse-dynamics forces of a trajectory ``q (T+1, nq)``."""
        q = self.check_trajectory(q, name="q")
        return self._trajectory(q)

    def _velocities(self, q) -> np.ndarray:
        v = np.empty((self.T + 1, self.nv))
        v[0] = self.v_init
        if self._euclidean:
            np.subtract(q[1:], q[:-1], out=v[1:])
            v[1:] /= self.h
            return v
        if _native():  # read through pointers: float64, C order, (T+1, nq)
            _velocity_kernel(self.model._address, v, self.h,
                             as_array("q", q, (self.T + 1, self.nq), finite=False))
            return v
        for t in range(1, self.T + 1):
            mujoco.mj_differentiatePos(self.model, v[t], self.h, q[t - 1], q[t])
        return v

    def _rigid_batch(self, q, v, a, mass: bool = False, idx=None):
        """Rigid-body terms ``ρ_t = M(q_{t+1}) a_t + c − F_passive`` (one ``mj_inverse`` per step).

        Args:
          q: ``(T+1, nq)``; v: ``(T+1, nv)``; a: ``(T, nv)``; mass: also the dense ``M(q_{t+1})``;
          idx: time steps to evaluate (a ``range``, default all).

        Returns:
          ``(ρ (n, nv), M (n, nv, nv) or None)`` for the ``n`` steps of ``idx``.
        """
        m, d = self._m, self._data()
        steps = range(self.T) if idx is None else idx
        n = len(steps)
        rho = np.empty((n, self.nv))
        M = np.empty((n, self.nv, self.nv)) if mass else None
        if _native() and steps.step == 1:
            _rigid_kernel(m._address, d._address, d.qpos, d.qvel, d.qacc, d.qfrc_inverse, q, v, a,
                          steps.start, mass, rho, _NO_M if M is None else M)
            return rho, M
        inv, full = mujoco.mj_inverse, mujoco.mj_fullM
        for k, t in enumerate(steps):
            d.qpos[:] = q[t + 1]
            d.qvel[:] = v[t + 1]
            d.qacc[:] = a[t]
            inv(m, d)
            rho[k] = d.qfrc_inverse
            if mass:
                full(m, d, M[k])
        return rho, M

    def _chunks(self, n: int):
        """Split ``range(n)`` into one contiguous chunk per worker thread."""
        w = min(self.workers, n) if self._pool is not None else 1
        b = np.linspace(0, n, w + 1).astype(int)
        return [range(b[i], b[i + 1]) for i in range(w)]

    def _pmap(self, fn, chunks):
        if self._pool is not None and len(chunks) > 1:
            return list(self._pool.map(fn, chunks))
        return [fn(c) for c in chunks]

    def _compliant_eval(self, q, v, a, *, derivatives: bool = False):
        """Compliant inverse dynamics of every step.

        The rigid-body terms (compiled MuJoCo loops or MuJoCo calls, both without the GIL) run
        in chunks of time steps on the worker threads while this thread evaluates the contact
        batch.  With ``derivatives`` the workers also take ``∂ρ/∂(q', v')`` (``mjd_inverseFD``)
        of their chunk in the same task — one hand-off per linearization.

        Returns ``(τ (T, nv), F_contact (T, nv), M (T, nv, nv) | None, BatchForces | None,
        (∂ρ/∂q', ∂ρ/∂v') (T, nv, nv) each | None)``; with ``derivatives`` the contact batch
        carries ``∂F/∂v`` (and the closed-form ``∂F/∂q``).
        """
        T, nv = self.T, self.nv
        analytic = derivatives and self.contact_derivatives in ("analytic", "auto")
        chunks = self._chunks(T)

        def work(c):
            rho, M = self._rigid_batch(q, v, a, derivatives, c)
            return (rho, M) + (self._rigid_derivatives(q, v, a, c) if derivatives else (None, None))

        futures = None
        if self._pool is not None and len(chunks) > 1 and self._cbatch is not None:
            futures = [self._pool.submit(work, c) for c in chunks]
            parts = None
        else:
            parts = self._pmap(work, chunks)
        bf = None
        if self._cbatch is not None:
            bf = self._cbatch.forces(q[1:], v[1:], dv=derivatives, dq=analytic)
        if futures is not None:
            parts = [f.result() for f in futures]

        def join(i):
            return np.concatenate([p[i] for p in parts]) if len(parts) > 1 else parts[0][i]

        rho = join(0)
        M = join(1) if derivatives else None
        dr = (join(2), join(3)) if derivatives else None
        if bf is not None:
            fc = bf.F
            tau = rho - fc
        else:
            fc = np.zeros((T, nv))
            tau = rho
        return tau, fc, M, bf, dr

    def _trajectory(self, q) -> Trajectory:
        v = self._velocities(q)
        a = np.diff(v, axis=0) / self.h
        if self.backend == "compliant":
            tau, fc, _, _, _ = self._compliant_eval(q, v, a)
            return Trajectory(q, v, a, tau, fc)
        tau = np.empty((self.T, self.nv))
        fc = np.empty((self.T, self.nv))
        for t in range(self.T):
            tau[t], fc[t] = self.step_inverse_dynamics(q[t], v[t], q[t + 1], v[t + 1])
        return Trajectory(q, v, a, tau, fc)

    def residuals(self, q) -> np.ndarray:
        """Residual ``r(q)`` with ``cost = ½‖r‖²``.

        Layout (``m = 2(T+1)nv + T mτ``): ``[r_q,0 … r_q,T, r_v,0 … r_v,T, r_τ,0 … r_τ,T−1]``
        with ``r_q,t = w_q,t ⊙ q̃_t``, ``r_v,t = w_v,t ⊙ ṽ_t`` (``w = √(2hQ)`` for
        ``t < T``, ``√(2Q_f)`` at ``T``) and ``r_τ,t = [W τ_t; ℓ_t]``, ``W = [diag√(2hR); √(2h w_u) Zᵀ]``
        (the penalty rows only with ``penalize_unactuated``) and ``ℓ_t`` the actuator-limit rows
        ``√(2h w_lim)·(max(u − hi, 0) − max(lo − u, 0))`` of the limited actuators (only with
        ``actuator_limit_weight > 0``), then the joint-limit rows of ``q_{t+1}`` (only with
        ``joint_limit_weight > 0``) and the knot-cost rows.  The ``t = 0`` entries are constant
        (``q_0, v_0`` fixed).
        """
        q = self.check_trajectory(q, name="q")
        return self._residuals(self._trajectory(q))

    def unactuated_forces(self, tau) -> np.ndarray:
        """``(T·nz,)`` stacked ``Zᵀ τ_t`` of ``tau (T, nv)`` (the equality constraints ``h(q) = 0``)."""
        return (np.asarray(tau) @ self.Z).ravel()

    def _residuals(self, tr: Trajectory) -> np.ndarray:
        T, nv = self.T, self.nv
        if self._euclidean:
            rq = tr.q - self.q_nom
        else:
            rq = np.empty((T + 1, nv))
            for t in range(T + 1):
                rq[t] = self._diff(self.q_nom[t], tr.q[t], 1.0)
        if self.wrap_dofs.size:
            rq[:, self.wrap_dofs] = _wrap_angle(rq[:, self.wrap_dofs])
        rv = tr.v - self.v_nom
        rq[:T] *= self._wq
        rq[T] *= self._wqf
        rv[:T] *= self._wv
        rv[T] *= self._wvf
        rt = tr.tau @ self._Wtau.T
        if self.num_limit_rows:
            rt = np.concatenate([rt, self._limit_residuals(tr.tau)], axis=1)
        if self.num_joint_limit_rows:
            rt = np.concatenate([rt, self._jlim_scale * self.joint_limit_excess(tr.q[1:])], axis=1)
        if self.knot_cost is not None:
            rt = np.concatenate([rt, self.knot_cost.residuals(tr.q, tr.v, tr.tau)[0]], axis=1)
        return np.concatenate([rq.ravel(), rv.ravel(), rt.ravel()])

    def cost(self, q) -> float:
        """``L(q) = ½‖r(q)‖²`` for a trajectory ``q (T+1, nq)``."""
        r = self.residuals(q)
        return 0.5 * float(r @ r)

    def unactuated_violation(self, tau) -> float:
        """``max_t ‖Zᵀ τ_t‖_∞`` of ``tau (T, nv)``: generalized force no actuator can give."""
        if self.Z.shape[1] == 0:
            return 0.0
        return float(np.max(np.abs(np.asarray(tau) @ self.Z), initial=0.0))

    def retract(self, q, dq) -> np.ndarray:
        """``q_t ⊕ dq_t`` for ``t = 1 … T`` (``dq (T, nv)`` or ``(T·nv,)``); ``q_0`` unchanged."""
        dq = np.ascontiguousarray(np.asarray(dq, dtype=float).reshape(self.T, self.nv))
        # float64, C order and (T+1, nq): what the compiled loop reads and writes through pointers
        out = as_array("q", q, (self.T + 1, self.nq), finite=False).copy()
        if _native():
            _retract_kernel(self.model._address, out, dq)
            return out
        for t in range(1, self.T + 1):
            mujoco.mj_integratePos(self.model, out[t], dq[t - 1], 1.0)
        return out
