"""Block Jacobian of :class:`~contactopt.solvers.idto.problem.IDTOProblem` (mixed into it as
:class:`_LinearizationMixin`): the exact difference Jacobians ``∂v/∂q``, the chain rule of the
compliant backend (batched ``mjd_inverseFD``, exact ``∂F/∂v``, ``∂F/∂q`` in closed form or by
batched forward differences), the forward differences of the other backends, and the dense
assembly for tests."""

from __future__ import annotations

import math
import time

import mujoco
import numpy as np

from . import problem as _problem
from .kernels import _rigid_fd_kernel
from .trajectory import Linearization, Trajectory

_SQRT_EPS = math.sqrt(np.finfo(float).eps)


def _native() -> bool:
    """:func:`contactopt.solvers.idto.problem._native` (reads the switch ``NATIVE_STEPS`` there)."""
    return _problem._native()


class _LinearizationMixin:
    """Derivative methods of :class:`~contactopt.solvers.idto.problem.IDTOProblem`."""

    # ------------------------------------------------------------------ derivatives

    def _diff_jac(self, q0, q1, dt, wrt0: bool, wrt1: bool):
        """∂(q1 ⊖ q0)/dt w.r.t. tangent perturbations of q0 and/or q1 (``(nv, nv)`` each or None).

        Exact: ``±I/dt`` on hinge, slide and free-joint translation dofs, ``mjd_subQuat`` on the
        rotational dofs of ball and free joints.
        """
        nv = self.nv
        J0 = J1 = None
        lin = self._lin_dofs
        if wrt0:
            J0 = np.zeros((nv, nv))
            J0[lin, lin] = -1.0 / dt
        if wrt1:
            J1 = np.zeros((nv, nv))
            J1[lin, lin] = 1.0 / dt
        if self._quat_joints:
            Da = np.empty(9)
            Db = np.empty(9)
            for qa, da in self._quat_joints:
                # mj_differentiatePos: v = subQuat(q1, q0)/dt, ∂/∂q1 = Da, ∂/∂q0 = Db
                mujoco.mjd_subQuat(q1[qa:qa + 4], q0[qa:qa + 4], Da, Db)
                if wrt0:
                    J0[da:da + 3, da:da + 3] = Db.reshape(3, 3) / dt
                if wrt1:
                    J1[da:da + 3, da:da + 3] = Da.reshape(3, 3) / dt
        return J0, J1

    def _diff_jac_fd(self, q0, q1, dt, wrt0: bool, wrt1: bool):
        """Forward-difference version of :meth:`_diff_jac` (reference for tests)."""
        base = self._diff(q0, q1, dt)
        J0 = J1 = None
        if wrt0:
            J0 = np.empty((self.nv, self.nv))
            for i, s in enumerate(self._steps(q0)):
                e = np.zeros(self.nv)
                e[i] = s
                J0[:, i] = (self._diff(self._plus(q0, e), q1, dt) - base) / s
        if wrt1:
            J1 = np.empty((self.nv, self.nv))
            for i, s in enumerate(self._steps(q1)):
                e = np.zeros(self.nv)
                e[i] = s
                J1[:, i] = (self._diff(q0, self._plus(q1, e), dt) - base) / s
        return J0, J1

    def _rigid_terms(self, q_next, v_next, a) -> np.ndarray:
        """``M(q') a + c(q', v') − F_passive(q', v')`` (no contact), ``(nv,)``."""
        m, d = self._m, self._data()
        d.qpos[:] = q_next
        d.qvel[:] = v_next
        mujoco.mj_fwdPosition(m, d)
        mujoco.mj_fwdVelocity(m, d)
        out = np.empty(self.nv)
        mujoco.mj_mulM(m, d, out, a)
        out += d.qfrc_bias
        out -= d.qfrc_passive
        return out

    def _tau_jac_compliant(self, t, q, v, dvdq_prev, dvdq_cur, dvdq_next):
        """Blocks ∂τ_t/∂(q_{t−1}, q_t, q_{t+1}) of the compliant backend, by the chain rule.

        With ``τ = ρ(q', v', a) − F(q', v')`` (``ρ`` rigid-body terms, ``F`` compliant contact),
        ``a = (v' − v)/h``, ``v' = v_{t+1}``, ``v = v_t``::

            A_q = ∂ρ/∂q' − ∂F/∂q'            (forward differences at fixed v', a)
            A_v = M/h + ∂ρ/∂v' − ∂F/∂v'       (∂ρ/∂v' forward differences, ∂F/∂v' exact)
            ∂τ_t/∂q_{t+1} = A_q + A_v ∂v_{t+1}/∂q_{t+1}
            ∂τ_t/∂q_t     = A_v ∂v_{t+1}/∂q_t − (M/h) ∂v_t/∂q_t
            ∂τ_t/∂q_{t−1} = −(M/h) ∂v_t/∂q_{t−1}

        Only ``nv + 1`` contact evaluations per time step (instead of ``2 nv + 1`` full inverse
        dynamics); the rigid-body differences are cheap MuJoCo calls.
        """
        nv, h = self.nv, self.h
        out = np.zeros((3, nv, nv))
        qn, vn = q[t + 1], v[t + 1]
        a = (vn - v[t]) / h
        m, d = self._m, self._data()
        rho0 = self._rigid_terms(qn, vn, a)
        M = np.empty((nv, nv))
        mujoco.mj_fullM(m, d, M)
        Aq = np.empty((nv, nv))
        Av = np.empty((nv, nv))
        for i, s in enumerate(self._steps(qn)):
            e = np.zeros(nv)
            e[i] = s
            Aq[:, i] = (self._rigid_terms(self._plus(qn, e), vn, a) - rho0) / s
        for i in range(nv):
            s = _SQRT_EPS * max(1.0, abs(vn[i]))
            vp = vn.copy()
            vp[i] += s
            Av[:, i] = (self._rigid_terms(qn, vp, a) - rho0) / s
        Av += M / h
        if self.contact is not None:
            d.qpos[:] = qn
            cf = self.contact.forces(d, vn, derivative=True)
            F0 = cf.generalized
            Av -= cf.dforce_dv
            # No pair within φ_max: a √ε perturbation cannot bring one in with more than a
            # √ε force, so ∂F/∂q' = 0 to finite-difference accuracy (skip nv contact queries).
            for i, s in enumerate(self._steps(qn) if cf.gamma.shape[0] else ()):
                e = np.zeros(nv)
                e[i] = s
                d.qpos[:] = self._plus(qn, e)
                Aq[:, i] -= (self.contact.forces(d, vn).generalized - F0) / s
        if t >= 2:
            out[0] = -M @ dvdq_prev[t] / h
        if t >= 1:
            out[1] = Av @ dvdq_next[t + 1] - M @ dvdq_cur[t] / h
        out[2] = Aq + Av @ dvdq_cur[t + 1]
        return out

    def _tau_jac(self, t, q, v, dvdq_prev):
        """Blocks ∂τ_t/∂(q_{t−1}, q_t, q_{t+1}) (3, nv, nv); zero for fixed configurations.

        τ_t depends on q_{t−1} only through ``v_t``, so that block is
        ``(∂τ_t/∂v_t)(∂v_t/∂q_{t−1})``; for the compliant backend ``∂τ_t/∂v_t = −M(q_{t+1})/h``
        analytically, for the others a forward difference in ``v_t``.
        ∂/∂q_t and ∂/∂q_{t+1} are forward differences of the full inverse dynamics.
        """
        nv, h = self.nv, self.h
        out = np.zeros((3, nv, nv))
        v_t = v[t]
        v_n = v[t + 1]
        compliant = self.backend == "compliant"
        if compliant:
            tau0, _, M = self.inverse_dynamics(q[t + 1], v_n, (v_n - v_t) / h, mass_matrix=True)
        else:
            tau0 = self.step_inverse_dynamics(q[t], v_t, q[t + 1], v_n)[0]
        if t >= 2:
            if compliant:
                out[0] = -M @ dvdq_prev[t] / h
            else:
                dtdv = np.empty((nv, nv))
                for i in range(nv):
                    s = _SQRT_EPS * max(1.0, abs(v_t[i]))
                    vp = v_t.copy()
                    vp[i] += s
                    dtdv[:, i] = (self.step_inverse_dynamics(q[t], vp, q[t + 1], v_n)[0] - tau0) / s
                out[0] = dtdv @ dvdq_prev[t]
        if t >= 1:  # perturb q_t: changes v_t and v_{t+1}
            for i, s in enumerate(self._steps(q[t])):
                e = np.zeros(nv)
                e[i] = s
                qp = self._plus(q[t], e)
                vt = self._diff(q[t - 1], qp, h)
                vn = self._diff(qp, q[t + 1], h)
                out[1][:, i] = (self.step_inverse_dynamics(qp, vt, q[t + 1], vn)[0] - tau0) / s
        for i, s in enumerate(self._steps(q[t + 1])):  # perturb q_{t+1}
            e = np.zeros(nv)
            e[i] = s
            qp = self._plus(q[t + 1], e)
            vn = self._diff(q[t], qp, h)
            out[2][:, i] = (self.step_inverse_dynamics(q[t], v_t, qp, vn)[0] - tau0) / s
        return out

    def linearize(self, q) -> Linearization:
        """Residual and block Jacobian at ``q (T+1, nq)`` (see :class:`Linearization`)."""
        q = self.check_trajectory(q, name="q")
        return self._linearize(q)

    def _linearize(self, q) -> Linearization:
        T = self.T
        if self.backend == "compliant" and self.analytic_chain_rule:
            return self._linearize_compliant(q)
        t0 = time.perf_counter()
        tr = self._trajectory(q)
        r = self._residuals(tr)
        t1 = time.perf_counter()
        Jq, Jv, dvdq_prev, dvdq_cur, dvdq_back = self._kinematic_jacobians(q)
        if self.backend == "compliant":
            def job(t):
                return self._tau_jac_compliant(t, q, tr.v, dvdq_prev, dvdq_cur, dvdq_back)
        else:
            def job(t):
                return self._tau_jac(t, q, tr.v, dvdq_prev)
        if self._pool is not None:
            blocks = list(self._pool.map(job, range(T)))
        else:
            blocks = [job(t) for t in range(T)]
        dtau = np.asarray(blocks)
        Jtau = self._tau_block_jacobian(tr, dtau, dvdq_cur, dvdq_back)  # (T, 3, mτ, nv)
        t2 = time.perf_counter()
        return Linearization(r, Jq, Jv, Jtau, {"residual": t1 - t0, "jacobian": t2 - t1}, tr.tau, dtau)

    def _kinematic_jacobians(self, q):
        """Weighted ``Jq``, ``Jv`` and the velocity Jacobians ``∂v_t/∂q_{t−1}``, ``∂v_t/∂q_t``.

        Returns ``(Jq (T, nv, nv), Jv (T, 2, nv, nv), dvdq_prev, dvdq_cur, dvdq_back)`` with the
        last three ``(T+1, nv, nv)``: ``∂v_t/∂q_{t−1}`` for ``t ≥ 2``, ``∂v_t/∂q_t``, and
        ``∂v_t/∂q_{t−1}`` also for ``t = 1``.
        """
        T, nv, h = self.T, self.nv, self.h
        Jv = np.zeros((T, 2, nv, nv))
        dvdq_prev = np.zeros((T + 1, nv, nv))
        dvdq_cur = np.zeros((T + 1, nv, nv))
        dvdq_back = np.zeros((T + 1, nv, nv))
        if self._euclidean:
            eye = np.eye(nv)
            Jq = np.broadcast_to(eye, (T, nv, nv)).copy()
            dvdq_cur[1:] = eye / h
            dvdq_back[1:] = -eye / h
            dvdq_prev[2:] = -eye / h
            Jv[:, 1] = eye / h
            Jv[1:, 0] = -eye / h
        else:
            # ±I/h on the non-quaternion dofs, mjd_subQuat blocks on ball / free-joint rotations
            lin = self._lin_dofs
            Jq = np.zeros((T, nv, nv))
            Jq[:, lin, lin] = 1.0
            dvdq_cur[1:, lin, lin] = 1.0 / h
            dvdq_back[1:, lin, lin] = -1.0 / h
            Da = np.empty(9)
            Db = np.empty(9)
            sub = mujoco.mjd_subQuat
            for qa, da in self._quat_joints:
                r = slice(da, da + 3)
                for t in range(1, T + 1):
                    sub(q[t, qa:qa + 4], self.q_nom[t, qa:qa + 4], Da, Db)
                    Jq[t - 1, r, r] = Da.reshape(3, 3)
                    sub(q[t, qa:qa + 4], q[t - 1, qa:qa + 4], Da, Db)
                    dvdq_cur[t, r, r] = Da.reshape(3, 3) / h
                    dvdq_back[t, r, r] = Db.reshape(3, 3) / h
            dvdq_prev[2:] = dvdq_back[2:]
            Jv[:, 1] = dvdq_cur[1:]
            Jv[1:, 0] = dvdq_back[2:]
        wq = np.vstack([np.broadcast_to(self._wq, (T - 1, nv)), self._wqf[None]]) if T > 1 else self._wqf[None]
        wv = np.vstack([np.broadcast_to(self._wv, (T - 1, nv)), self._wvf[None]]) if T > 1 else self._wvf[None]
        Jq *= wq[:, :, None]
        Jv *= wv[:, None, :, None]
        return Jq, Jv, dvdq_prev, dvdq_cur, dvdq_back

    def _fd_eps(self, q) -> np.ndarray:
        """Forward-difference step of each configuration of ``q (n, nq)``: ``√ε·max(1, max_i|q_i|)``
        over the non-quaternion coordinates, ``(n,)``."""
        lin = self._dof_qadr[self._lin_dofs]
        if not lin.size:
            return np.full(q.shape[0], _SQRT_EPS)
        return _SQRT_EPS * np.maximum(1.0, np.abs(q[:, lin]).max(axis=1))

    def _rigid_derivatives(self, q, v, a, idx):
        """``∂ρ/∂q'`` and ``∂ρ/∂v'`` (``(n, nv, nv)`` each) of the steps ``idx`` (``mjd_inverseFD``)."""
        m, d = self._m, self._data()
        nv = self.nv
        n = len(idx)
        DfDq = np.empty((n, nv, nv))
        DfDv = np.empty((n, nv, nv))
        eps = self._fd_eps(q[idx.start + 1:idx.stop + 1])
        if _native() and idx.step == 1:
            _rigid_fd_kernel(m._address, d._address, d.qpos, d.qvel, d.qacc, q, v, a, idx.start, eps,
                             DfDq, DfDv)
            return DfDq.transpose(0, 2, 1), DfDv.transpose(0, 2, 1)
        fd = mujoco.mjd_inverseFD
        eps = eps.tolist()
        for k, t in enumerate(idx):
            d.qpos[:] = q[t + 1]
            d.qvel[:] = v[t + 1]
            d.qacc[:] = a[t]
            # outputs are transposed (row i = derivative w.r.t. dof i)
            fd(m, d, eps[k], 0, DfDq[k], DfDv[k], None, None, None, None, None)
        return DfDq.transpose(0, 2, 1), DfDv.transpose(0, 2, 1)

    def _contact_fd(self, q, v, F0, active, dofs):
        """Forward differences ``∂F/∂q'`` of the contact force at the steps ``active`` (batched).

        Only the dofs that move a body of one of the step's contact pairs (``dofs (T, nv)``) are
        perturbed: the others cannot change those pairs, and a pair they bring into range has a
        force below the contact model's threshold (``√ε`` by default).
        """
        nv, nq = self.nv, self.nq
        n = active.size
        out = np.zeros((n, nv, nv))
        if not n:
            return out
        kk, ii = np.nonzero(dofs[active])  # (step, dof) pairs to perturb
        if not kk.size:
            return out
        base = q[active + 1]  # (n, nq)
        steps = np.array([self._steps(b) for b in base])  # (n, nv)
        s = steps[kk, ii]
        if self._euclidean:
            Q = base[kk].copy()
            Q[np.arange(kk.size), ii] += s
        else:
            Q = np.empty((kk.size, nq))
            e = np.zeros(nv)
            for r, (k, i) in enumerate(zip(kk.tolist(), ii.tolist())):
                e[i] = s[r]
                Q[r] = base[k]
                mujoco.mj_integratePos(self.model, Q[r], e, 1.0)
                e[i] = 0.0
        V = v[active + 1][kk]
        Fp = self._cbatch.forces(Q, V).F
        out[kk, :, ii] = (Fp - F0[active][kk]) / s[:, None]
        return out

    def _linearize_compliant(self, q) -> Linearization:
        """Compliant backend: residual and Jacobian with batched contact and rigid-body derivatives.

        Same chain rule as :meth:`_tau_jac_compliant` (``A_q = ∂ρ/∂q' − ∂F/∂q'``,
        ``A_v = M/h + ∂ρ/∂v' − ∂F/∂v'``), vectorized over time steps: ``∂ρ/∂(q', v')`` from
        ``mjd_inverseFD`` per step, ``∂F/∂v'`` exact, ``∂F/∂q'`` by ``contact_derivatives``.
        """
        T, nv, h = self.T, self.nv, self.h
        t0 = time.perf_counter()
        v = self._velocities(q)
        a = np.diff(v, axis=0) / h
        tau, fc, M, bf, (Aq, Av) = self._compliant_eval(q, v, a, derivatives=True)
        tr = Trajectory(q, v, a, tau, fc)
        r = self._residuals(tr)
        t1 = time.perf_counter()
        Jq, Jv, dvdq_prev, dvdq_cur, dvdq_back = self._kinematic_jacobians(q)
        Av = Av + M / h
        if bf is not None:
            Av -= bf.dFdv
            mode = self.contact_derivatives
            if mode != "fd":
                Aq = Aq - bf.dFdq
            if mode != "analytic":
                # No pair within φ_max: a √ε perturbation cannot bring one in with more than a
                # √ε force, so ∂F/∂q' = 0 to finite-difference accuracy (no queries).
                todo = bf.count > 0
                if mode == "auto":
                    todo &= ~bf.exact
                    Aq[todo] += bf.dFdq[todo]  # replaced by finite differences below
                active = np.flatnonzero(todo)
                if active.size:
                    Aq = Aq.copy()
                    Aq[active] -= self._contact_fd(q, v, fc, active, bf.dofs)
        dtau = np.zeros((T, 3, nv, nv))
        Mh = M / h
        dtau[:, 2] = Aq + Av @ dvdq_cur[1:]
        if T > 1:
            dtau[1:, 1] = Av[1:] @ dvdq_back[2:] - Mh[1:] @ dvdq_cur[1:T]
        if T > 2:
            dtau[2:, 0] = -Mh[2:] @ dvdq_prev[2:T]
        Jtau = self._tau_block_jacobian(tr, dtau, dvdq_cur, dvdq_back)  # (T, 3, mτ, nv)
        t2 = time.perf_counter()
        return Linearization(r, Jq, Jv, Jtau, {"residual": t1 - t0, "jacobian": t2 - t1}, tau, dtau)

    def dense_jacobian(self, lin: Linearization) -> np.ndarray:
        """Dense ``(m, T·nv)`` Jacobian assembled from the blocks (for tests and small problems)."""
        T, nv, mt = self.T, self.nv, self.m_tau
        J = np.zeros((self.num_residuals, T * nv))
        offq, offv, offt = 0, (T + 1) * nv, 2 * (T + 1) * nv
        for t in range(1, T + 1):
            k = t - 1
            J[offq + t * nv: offq + (t + 1) * nv, k * nv:(k + 1) * nv] = lin.Jq[k]
            J[offv + t * nv: offv + (t + 1) * nv, k * nv:(k + 1) * nv] = lin.Jv[k, 1]
            if k >= 1:
                J[offv + t * nv: offv + (t + 1) * nv, (k - 1) * nv:k * nv] = lin.Jv[k, 0]
        for t in range(T):
            for slot in range(3):
                k = t - 2 + slot  # decision block of q_{t−1+slot}
                if k >= 0:
                    J[offt + t * mt: offt + (t + 1) * mt, k * nv:(k + 1) * nv] = lin.Jtau[t, slot]
        return J
