"""Compiled (numba) kernels of the goal-directed dynamics solver.

Everything here works on the quantities of ONE MuJoCo evaluation of a state
(position and velocity stages): the dense inertia ``M``, the force
``c = qfrc_bias − qfrc_passive − (applied forces)``, and the constraint rows
``J, aref, D, R, frictionloss`` with their types.  No MuJoCo call is made.

Inverse dynamics with MuJoCo's soft constraints (GDD eq. 14)::

    jar  = J a − aref
    f    = −∇s(jar)                       (efc_force, reimplemented below)
    g(a) = M a + c − Jᵀ f                 (qfrc_inverse minus the non-control forces)
    P    = ∂g/∂a = M + Jᵀ H[s] J          (eq. 15)

Per row, ``s`` is (``D = 1/R``):

* equality rows: ``½ D jar²``;
* friction-loss rows: Huber, ``½ D jar²`` for ``|jar| < R·floss``, else linear
  with slope ``±floss``;
* limits, frictionless and pyramidal contact rows: ``½ D jar²`` for ``jar < 0``,
  else 0;
* elliptic contacts (dim rows together): zero in the top zone, ``Σ ½ D jar²`` in
  the bottom zone and ``½ Dm (N − μT)²`` in the middle ("cone") zone, with
  ``U = (μ jar₀, friction ⊙ jar₁..)``, ``N = U₀``, ``T = ‖U₁..‖``,
  ``Dm = D₀ / (μ²(1+μ²))``.

So with pyramidal cones ``f`` is piecewise affine in ``a`` and ``H[s]`` is
piecewise constant; the elliptic middle zone is smooth but not quadratic.

The goal-directed problem (GDD eq. 8) is solved by :func:`gdd_solve`.  Loops
are written row-major so LLVM vectorizes them; ``fastmath`` allows
reassociation and contraction only (NaN/inf semantics are kept, the solver
checks for them).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit
from numba.extending import intrinsic

from ...native import (
    mj_fwdposition,
    mj_fwdvelocity,
    raw_f64,
    raw_f64_2d,
    raw_i32,
    raw_i64,
    raw_i64_2d,
    raw_u64,
)

FM = {"reassoc", "contract", "arcp", "nsz"}

# ---------------------------------------------------------------- row kinds / states

ROW_EQUALITY = 0
ROW_FRICTION = 1
ROW_ONESIDED = 2  # joint/tendon limits, frictionless and pyramidal contact rows
ROW_CONE = 3  # first (normal) row of an elliptic contact
ROW_CONE_TAIL = 4  # remaining rows of an elliptic contact (handled with their head)

# mujoco.mjtConstraint numbers
_CNSTR_EQUALITY = 0
_CNSTR_FRICTION_DOF = 1
_CNSTR_FRICTION_TENDON = 2
_CNSTR_CONTACT_ELLIPTIC = 7

# same numbers as mujoco.mjtConstraintState
STATE_SATISFIED = 0
STATE_QUADRATIC = 1
STATE_LINEARNEG = 2
STATE_LINEARPOS = 3
STATE_CONE = 4

# solver status codes (mirrored by contactopt.solvers.gdd.solver.GDDStatus)
STATUS_CONVERGED = 0
STATUS_MAX_ITERATIONS = 1
STATUS_MAX_DUAL_UPDATES = 2
STATUS_STALLED = 3
STATUS_NUMERICAL_ERROR = 4
STATUS_WORKSPACE = 5  # internal: the workspace is too small (sizes in stats[ST_WS_*]); call again

# float parameters
PAR_PENALTY = 0
PAR_TOL_GRAD = 1
PAR_TOL_FEAS = 2
PAR_NPAR = 3

# int parameters
IPAR_MAX_ITER = 0
IPAR_MAX_DUAL = 1
IPAR_EXACT_LS = 2  # 1: piecewise-quadratic sweep (pyramidal only), 0: 1-D Newton/bisection
IPAR_NEWTON_DUAL = 3  # 1: second-order multiplier update, 0: first-order λ += ρ h
IPAR_SCALES = 4  # 1: (re)compute the penalty/violation scales now (cleared by the solve)
IPAR_PATTERN = 5  # 1: (re)compute the sparsity of Ceq/Cbox (cleared by the solve), 0: the workspace holds it
IPAR_NZ = 6  # sizes of the packed actuation: unactuated directions, box rows, controls
IPAR_NB = 7
IPAR_NC = 8
IPAR_KM = 9  # sizes of the packed cost: mass terms, diagonal terms, rows, force rows
IPAR_KD = 10
IPAR_M1 = 11
IPAR_M2 = 12
IPAR_SAFEGUARD = 13  # 1: guard against non-finite / huge initial guesses and steps (restart cold)
IPAR_NEFC = 14  # out (gdd_step): the state's number of constraint rows
IPAR_OUT_NEED = 15  # out (gdd_step): the length of the float output it needs
IPAR_SINCE_SCALES = 16  # in/out: solves since the scales were computed
IPAR_SCALE_INTERVAL = 17  # recompute the scales when IPAR_SINCE_SCALES reaches this
IPAR_NIPAR = 18

# statistics
ST_STATUS = 0
ST_ITER = 1
ST_DUAL = 2
ST_FACT = 3
ST_GRAD = 4
ST_FEAS_EQ = 5
ST_FEAS_BOX = 6
ST_OBJECTIVE = 7
ST_COST = 8
ST_EVENTS = 9
ST_LS_EVALS = 10
ST_CLAMPED = 11
ST_WS_FLOAT = 12  # workspace lengths needed (with STATUS_WORKSPACE)
ST_WS_INT = 13
ST_SAFEGUARD = 14  # step safeguard actions (non-finite / huge / non-descent step replaced)
ST_NSTAT = 15

# per-iteration log columns
LOG_OBJECTIVE = 0
LOG_GRAD = 1
LOG_STEP = 2
LOG_ALPHA = 3
LOG_EVENTS = 4
LOG_NACTIVE = 5
LOG_FACTORED = 6
LOG_OUTER = 7
LOG_NCOL = 8


# ---------------------------------------------------------------- inverse constraint force


@njit(cache=True, error_model="numpy")
def row_kinds(efc_type, efc_id, con_dim, con_mu, con_fric, con_adr, kind, cdim, cmu, cfric):
    """Row kinds from ``efc_type`` and, for elliptic contacts, the contact data.

    Args:
      efc_type, efc_id: ``(nefc,)`` MuJoCo's row types and object ids.
      con_dim, con_mu, con_fric (ncon, 5), con_adr: contact ``dim``, ``mu``,
        ``friction`` and ``efc_address`` (only read for elliptic rows).
    Outputs:
      kind (nefc,) ``ROW_*``; cdim, cmu (nefc,), cfric (nefc, 5) on elliptic head rows.
    """
    for i in range(efc_type.shape[0]):
        t = efc_type[i]
        cdim[i] = 0
        cmu[i] = 0.0
        if t == _CNSTR_EQUALITY:
            kind[i] = ROW_EQUALITY
        elif t == _CNSTR_FRICTION_DOF or t == _CNSTR_FRICTION_TENDON:
            kind[i] = ROW_FRICTION
        elif t == _CNSTR_CONTACT_ELLIPTIC:
            cid = efc_id[i]
            if con_adr[cid] == i:
                kind[i] = ROW_CONE
                cdim[i] = con_dim[cid]
                cmu[i] = con_mu[cid]
                for j in range(5):
                    cfric[i, j] = con_fric[cid, j]
            else:
                kind[i] = ROW_CONE_TAIL
        else:
            kind[i] = ROW_ONESIDED


@njit(cache=True, error_model="numpy")
def constraint_update(jar, D, R, floss, kind, cdim, cmu, cfric, f, state, hdiag, hcone):
    """MuJoCo's inverse constraint force ``f = −∇s(jar)`` and the Hessian of ``s``.

    Args:
      jar: ``(nefc,)`` ``J a − aref``.
      D, R, floss: ``(nefc,)`` ``efc_D``, ``efc_R``, ``efc_frictionloss``.
      kind, cdim, cmu, cfric: from :func:`row_kinds`.
    Outputs (in place):
      f: ``(nefc,)`` constraint force; state: ``(nefc,)`` ``mjtConstraintState``;
      hdiag: ``(nefc,)`` diagonal of ``H[s]`` for rows not in a cone zone;
      hcone: ``(nefc, 6, 6)`` dim×dim Hessian block on the head row of an elliptic
      contact in the cone zone.
    Returns:
      ``s(jar)``, the constraint cost.
    """
    n = jar.shape[0]
    cost = 0.0
    i = 0
    while i < n:
        k = kind[i]
        x = jar[i]
        if k == ROW_EQUALITY:
            f[i] = -D[i] * x
            hdiag[i] = D[i]
            state[i] = STATE_QUADRATIC
            cost += 0.5 * D[i] * x * x
        elif k == ROW_FRICTION:
            rf = R[i] * floss[i]
            if x <= -rf:
                f[i] = floss[i]
                hdiag[i] = 0.0
                state[i] = STATE_LINEARNEG
                cost += -0.5 * R[i] * floss[i] * floss[i] - floss[i] * x
            elif x >= rf:
                f[i] = -floss[i]
                hdiag[i] = 0.0
                state[i] = STATE_LINEARPOS
                cost += -0.5 * R[i] * floss[i] * floss[i] + floss[i] * x
            else:
                f[i] = -D[i] * x
                hdiag[i] = D[i]
                state[i] = STATE_QUADRATIC
                cost += 0.5 * D[i] * x * x
        elif k == ROW_ONESIDED or k == ROW_CONE_TAIL:
            if x >= 0.0:
                f[i] = 0.0
                hdiag[i] = 0.0
                state[i] = STATE_SATISFIED
            else:
                f[i] = -D[i] * x
                hdiag[i] = D[i]
                state[i] = STATE_QUADRATIC
                cost += 0.5 * D[i] * x * x
        else:  # ROW_CONE
            dim = cdim[i]
            mu = cmu[i]
            N = x * mu
            T2 = 0.0
            for j in range(1, dim):
                u = jar[i + j] * cfric[i, j - 1]
                T2 += u * u
            T = math.sqrt(T2)
            if N >= mu * T or (T <= 0.0 and N >= 0.0):
                for j in range(dim):
                    f[i + j] = 0.0
                    hdiag[i + j] = 0.0
                    state[i + j] = STATE_SATISFIED
            elif mu * N + T <= 0.0 or (T <= 0.0 and N < 0.0):
                for j in range(dim):
                    xj = jar[i + j]
                    f[i + j] = -D[i + j] * xj
                    hdiag[i + j] = D[i + j]
                    state[i + j] = STATE_QUADRATIC
                    cost += 0.5 * D[i + j] * xj * xj
            else:
                Dm = D[i] / (mu * mu * (1.0 + mu * mu))
                NmT = N - mu * T
                cost += 0.5 * Dm * NmT * NmT
                f0 = -Dm * NmT * mu
                f[i] = f0
                for j in range(1, dim):
                    uj = jar[i + j] * cfric[i, j - 1]
                    f[i + j] = -f0 / T * uj * cfric[i, j - 1]
                # Hessian of ½ Dm (N − μT)² w.r.t. jar (as MuJoCo's cone Hessian)
                H = hcone[i]
                for r in range(dim):
                    for cc in range(dim):
                        H[r, cc] = 0.0
                H[0, 0] = 1.0
                for j in range(1, dim):
                    H[0, j] = -mu / T * jar[i + j] * cfric[i, j - 1]
                scl = mu * N / (T * T * T)
                for r in range(1, dim):
                    ur = jar[i + r] * cfric[i, r - 1]
                    for cc in range(r, dim):
                        H[r, cc] = scl * ur * jar[i + cc] * cfric[i, cc - 1]
                scl = mu * mu - mu * N / T
                for j in range(1, dim):
                    H[j, j] += scl
                for r in range(dim):
                    sr = Dm * (mu if r == 0 else cfric[i, r - 1])
                    for cc in range(r, dim):
                        H[r, cc] *= sr * (mu if cc == 0 else cfric[i, cc - 1])
                for r in range(dim):
                    for cc in range(r + 1, dim):
                        H[cc, r] = H[r, cc]
                for j in range(dim):
                    hdiag[i + j] = 0.0
                    state[i + j] = STATE_CONE
            i += dim
            continue
        i += 1
    return cost


@njit(cache=True, fastmath=FM, error_model="numpy")
def hs_mul(x, kind, cdim, state, hdiag, hcone, out):
    """``out = H[s] x`` for a vector in constraint space ``(nefc,)``."""
    n = x.shape[0]
    i = 0
    while i < n:
        if kind[i] == ROW_CONE and state[i] == STATE_CONE:
            dim = cdim[i]
            for r in range(dim):
                s = 0.0
                for cc in range(dim):
                    s += hcone[i, r, cc] * x[i + cc]
                out[i + r] = s
            i += dim
        else:
            out[i] = hdiag[i] * x[i]
            i += 1


@njit(cache=True, fastmath=FM, error_model="numpy")
def com_bias(cdof_dot, qvel, ancestors, bodies, roots, mass, cvel, xipos, subtree_com, out):
    """Centre-of-mass acceleration at ``a = 0`` (``J̇_c v``, m/s²) from MuJoCo's com-based data.

    Body b's spatial acceleration at ``a = 0`` is ``Σ_j ancestors[k, j] cdof_dot_j v_j``
    (``(angular, linear)``, reference point ``subtree_com[root]``); the classical
    acceleration of its centre of mass is ``α × r + a_lin + ω × (v_lin + ω × r)``,
    ``r = xipos_b − subtree_com[root]``.  ``out (3,)`` gets the mass-weighted mean.
    """
    nbod = bodies.shape[0]
    nv = qvel.shape[0]
    total = 0.0
    for c in range(3):
        out[c] = 0.0
    acc6 = np.empty(6)
    for k in range(nbod):
        for c in range(6):
            acc6[c] = 0.0
        for j in range(nv):
            w = ancestors[k, j] * qvel[j]
            if w != 0.0:
                for c in range(6):
                    acc6[c] += cdof_dot[j, c] * w
        b = bodies[k]
        rt = roots[k]
        r0 = xipos[b, 0] - subtree_com[rt, 0]
        r1 = xipos[b, 1] - subtree_com[rt, 1]
        r2 = xipos[b, 2] - subtree_com[rt, 2]
        w0 = cvel[b, 0]
        w1 = cvel[b, 1]
        w2 = cvel[b, 2]
        v0 = cvel[b, 3] + w1 * r2 - w2 * r1
        v1 = cvel[b, 4] + w2 * r0 - w0 * r2
        v2 = cvel[b, 5] + w0 * r1 - w1 * r0
        a0 = acc6[3] + acc6[1] * r2 - acc6[2] * r1 + w1 * v2 - w2 * v1
        a1 = acc6[4] + acc6[2] * r0 - acc6[0] * r2 + w2 * v0 - w0 * v2
        a2 = acc6[5] + acc6[0] * r1 - acc6[1] * r0 + w0 * v1 - w1 * v0
        mb = mass[k]
        out[0] += mb * a0
        out[1] += mb * a1
        out[2] += mb * a2
        total += mb
    for c in range(3):
        out[c] /= total


@njit(cache=True, fastmath=FM, error_model="numpy")
def spring_residual(jac, jacdot, qvel, pos, goal, k, b, cap, use_jacdot, out):
    """Residual ``e = J̇ v − a*`` of a 3-row frame term (end effector, centre of mass) with a
    :class:`~contactopt.solvers.gdd.costs.SpringDamper` position target.

    ``a* = k (goal − pos) − b (jac v)`` (m/s²), scaled to norm ``cap`` when ``cap > 0``
    and ``‖a*‖ > cap``.

    Args:
      jac: ``(3, nv)`` frame Jacobian J; jacdot: ``(3, nv)`` its time derivative J̇
        (read only when ``gains[3] != 0``); qvel: ``(nv,)`` v;
      pos, goal: ``(3,)`` frame and goal positions, m;
      k [1/s²], b [1/s], cap [m/s²] or 0 (no cap): the spring-damper gains;
      use_jacdot: nonzero to compute the bias ``J̇ v`` here.
      out: ``(3,)``; on input the bias acceleration ``J̇ v`` when ``use_jacdot == 0``
        (e.g. from :func:`com_bias`), on output the residual e.
    """
    nv = qvel.shape[0]
    lin0 = 0.0
    lin1 = 0.0
    lin2 = 0.0
    for r in range(3):
        vel = 0.0
        for j in range(nv):
            vel += jac[r, j] * qvel[j]
        x = k * (goal[r] - pos[r]) - b * vel
        if r == 0:
            lin0 = x
        elif r == 1:
            lin1 = x
        else:
            lin2 = x
    if cap > 0.0:
        n = math.sqrt(lin0 * lin0 + lin1 * lin1 + lin2 * lin2)
        if n > cap:
            sc = cap / n
            lin0 *= sc
            lin1 *= sc
            lin2 *= sc
    for r in range(3):
        bias = out[r]
        if use_jacdot != 0.0:
            bias = 0.0
            for j in range(nv):
                bias += jacdot[r, j] * qvel[j]
        out[r] = bias - (lin0 if r == 0 else (lin1 if r == 1 else lin2))


@njit(cache=True, fastmath=FM, error_model="numpy")
def com_spring_residual(cdof_dot, qvel, ancestors, bodies, roots, mass, cvel, xipos, subtree_com,
                        body, jac, goal, k, b, cap, out):
    """Residual ``e = J̇_c v − a*`` of a centre-of-mass term with a spring-damper target:
    :func:`com_bias` followed by :func:`spring_residual` at ``subtree_com[body]`` (one call)."""
    com_bias(cdof_dot, qvel, ancestors, bodies, roots, mass, cvel, xipos, subtree_com, out)
    spring_residual(jac, jac, qvel, subtree_com[body], goal, k, b, cap, 0.0, out)


# ---------------------------------------------------------------- small dense linear algebra


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _four_row_dots(X, r, v, n):
    """``X[r:r+4, :n] @ v[:n]``: four dot products that share each load of ``v[k]``.

    The small dense kernels below (Cholesky factor, forward substitution, Gram matrix) are
    bound by the latency of one dot product after another; four independent sums keep the
    multiply-adds busy instead.
    """
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for k in range(n):
        vk = v[k]
        s0 += X[r, k] * vk
        s1 += X[r + 1, k] * vk
        s2 += X[r + 2, k] * vk
        s3 += X[r + 3, k] * vk
    return s0, s1, s2, s3


@njit(cache=True, fastmath=FM, error_model="numpy")
def cholesky(A, L):
    """Lower Cholesky factor ``A = L Lᵀ`` from the lower triangle of ``A``; False if not SPD.

    Column by column (Cholesky–Crout): ``L_jj = √(A_jj − ‖L_j,:j‖²)``, then
    ``L_ij = (A_ij − L_i,:j · L_j,:j) / L_jj`` for ``i > j`` — dot products of contiguous row
    prefixes.  The entries of one column are independent, so four rows are summed together
    (:func:`_four_row_dots`): on small matrices the factor is bound by the latency of each
    dot product, which the row-by-row order chains one after the other (22×22: ~2.3×
    faster).  No allocation; ``L`` must not alias ``A``; its strict upper triangle is set
    to zero.
    """
    n = A.shape[0]
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > 0.0:
            return False
        d = math.sqrt(s)
        L[j, j] = d
        inv = 1.0 / d
        i = j + 1
        while i + 4 <= n:
            s0, s1, s2, s3 = _four_row_dots(L, i, L[j], j)
            L[i, j] = (A[i, j] - s0) * inv
            L[i + 1, j] = (A[i + 1, j] - s1) * inv
            L[i + 2, j] = (A[i + 2, j] - s2) * inv
            L[i + 3, j] = (A[i + 3, j] - s3) * inv
            i += 4
        while i < n:
            s = A[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            L[i, j] = s * inv
            i += 1
    for i in range(n - 1):
        for j in range(i + 1, n):
            L[i, j] = 0.0
    return True


@njit(cache=True, fastmath=FM, error_model="numpy")
def chol_solve(L, b, x):
    """Solve ``L Lᵀ x = b`` (``x`` may alias ``b``)."""
    n = L.shape[0]
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= L[i, k] * x[k]
        x[i] = s / L[i, i]
    for i in range(n - 1, -1, -1):
        xi = x[i] / L[i, i]
        x[i] = xi
        for k in range(i):
            x[k] -= L[i, k] * xi


@njit(cache=True, fastmath=FM, error_model="numpy")
def ldl_factor(rownnz, rowadr, colind, qld, dinv):
    """In place ``M = Lᵀ diag(D) L`` (``L`` unit lower triangular) in MuJoCo's ``qLD`` layout.

    ``qld`` holds the lower triangle of ``M`` by CSR rows (``rownnz, rowadr, colind``; each
    row's columns increasing, the diagonal last, and the columns of row ``i`` a prefix of
    those of every row ``k`` that has ``i`` as a column — a kinematic tree's ancestor
    chains, or a dense triangle) and is overwritten with ``L`` (strict part) and ``D``
    (diagonal); ``dinv = 1/D``.  For ``k = n−1 … 0``: every column ``i < k`` of row ``k``
    updates row ``i`` by ``−L_ki/D_k`` times the prefix of row ``k``, then row ``k`` is
    divided by ``D_k`` (the algorithm of ``mj_factorM``, so a tree-sparse ``M`` keeps its
    sparsity).  False if some ``D_k`` is not positive (``M`` not positive definite, or NaN).
    """
    n = rownnz.shape[0]
    for k in range(n - 1, -1, -1):
        start = rowadr[k]
        diag = rownnz[k] - 1
        dk = qld[start + diag]
        if not dk > 0.0:
            return False
        inv = 1.0 / dk
        for p in range(diag - 1, -1, -1):
            ri = rowadr[colind[start + p]]
            s = -qld[start + p] * inv
            for q_ in range(p + 1):
                qld[ri + q_] += s * qld[start + q_]
        for p in range(diag):
            qld[start + p] *= inv
        dinv[k] = inv
    return True


@njit(cache=True, fastmath=FM, error_model="numpy")
def ldl_dense(M, rownnz, rowadr, colind, qld, dinv):
    """:func:`ldl_factor` of a dense ``M (n, n)`` (lower triangle read) in a dense-triangle
    layout: row ``i`` has columns ``0 … i`` (``rownnz (n,)``, ``rowadr (n,)``, ``colind`` and
    ``qld`` of ``n(n+1)/2``).  False if ``M`` is not positive definite."""
    n = M.shape[0]
    adr = 0
    for i in range(n):
        rownnz[i] = i + 1
        rowadr[i] = adr
        for j in range(i + 1):
            colind[adr + j] = j
            qld[adr + j] = M[i, j]
        adr += i + 1
    return ldl_factor(rownnz, rowadr, colind, qld, dinv)


@njit(cache=True, fastmath=FM, error_model="numpy")
def ldl_solve(rownnz, rowadr, colind, qld, dinv, b, x):
    """``x = M⁻¹ b = L⁻¹ D⁻¹ L⁻ᵀ b`` with the factor of :func:`ldl_factor` (``x`` may alias
    ``b``); sparse rows cost their nonzeros only (as ``mj_solveM``)."""
    n = dinv.shape[0]
    for i in range(n):
        x[i] = b[i]
    for i in range(n - 1, -1, -1):  # Lᵀ y = b: row i scatters into its columns
        xi = x[i]
        if xi != 0.0:
            adr = rowadr[i]
            for p in range(rownnz[i] - 1):
                x[colind[adr + p]] -= qld[adr + p] * xi
    for i in range(n):
        x[i] *= dinv[i]
    for i in range(n):  # L x = z
        adr = rowadr[i]
        s = x[i]
        for p in range(rownnz[i] - 1):
            s -= qld[adr + p] * x[colind[adr + p]]
        x[i] = s


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _m_solve(pb, b, x):
    """``x = M⁻¹ b`` with the problem's factor of ``M``."""
    ldl_solve(pb.Lrn, pb.Lra, pb.Lci, pb.Lq, pb.Ldi, b, x)


@njit(cache=True, fastmath=FM, error_model="numpy")
def _lower_solve_rows(L, X):
    """In place ``X ← L⁻¹ X`` for ``X (n, m)`` (row axpys)."""
    n = L.shape[0]
    m = X.shape[1]
    for i in range(n):
        for k in range(i):
            lik = L[i, k]
            if lik != 0.0:
                for j in range(m):
                    X[i, j] -= lik * X[k, j]
        inv = 1.0 / L[i, i]
        for j in range(m):
            X[i, j] *= inv


@njit(cache=True, fastmath=FM, error_model="numpy")
def _lower_solve_rhs_rows(L, XT):
    """In place ``XT ← (L⁻¹ XTᵀ)ᵀ`` for ``XT (m, n)``: each row of ``XT`` a right-hand side.

    Forward substitution ``x_i = (b_i − L_i,:i · x_:i) / L_ii`` as dot products of contiguous
    row prefixes, four right-hand sides together (:func:`_four_row_dots`): the substitution
    of one right-hand side is a chain of latency-bound dot products.
    """
    n = L.shape[0]
    m = XT.shape[0]
    for i in range(n):
        inv = 1.0 / L[i, i]
        j = 0
        while j + 4 <= m:
            s0, s1, s2, s3 = _four_row_dots(XT, j, L[i], i)
            XT[j, i] = (XT[j, i] - s0) * inv
            XT[j + 1, i] = (XT[j + 1, i] - s1) * inv
            XT[j + 2, i] = (XT[j + 2, i] - s2) * inv
            XT[j + 3, i] = (XT[j + 3, i] - s3) * inv
            j += 4
        while j < m:
            s0 = XT[j, i]
            for k in range(i):
                s0 -= L[i, k] * XT[j, k]
            XT[j, i] = s0 * inv
            j += 1


@njit(cache=True, fastmath=FM, error_model="numpy")
def _dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@njit(cache=True, fastmath=FM, error_model="numpy")
def _matvec(A, x, out):
    n = A.shape[0]
    m = A.shape[1]
    for i in range(n):
        s = 0.0
        for k in range(m):
            s += A[i, k] * x[k]
        out[i] = s


@njit(cache=True, fastmath=FM, error_model="numpy")
def _matTvec_add(A, y, out, scale):
    """``out += scale · Aᵀ y``."""
    n = A.shape[0]
    m = A.shape[1]
    for i in range(n):
        yi = y[i]
        if yi != 0.0:
            yi *= scale
            for k in range(m):
                out[k] += A[i, k] * yi


@njit(cache=True, error_model="numpy")
def _sparse_rows(C, idx, nnz):
    """Nonzero column indices of each row of ``C``."""
    for r in range(C.shape[0]):
        cnt = 0
        for k in range(C.shape[1]):
            if C[r, k] != 0.0:
                idx[r, cnt] = k
                cnt += 1
        nnz[r] = cnt


@njit(cache=True, fastmath=FM, error_model="numpy")
def _srow_dot(C, idx, nnz, r, x):
    s = 0.0
    for p in range(nnz[r]):
        k = idx[r, p]
        s += C[r, k] * x[k]
    return s


@njit(cache=True, fastmath=FM, error_model="numpy")
def _smatvec(C, idx, nnz, x, out):
    for r in range(C.shape[0]):
        out[r] = _srow_dot(C, idx, nnz, r, x)


# ---------------------------------------------------------------- problem bundle

Prob = namedtuple("Prob", [
    "M", "Lrn", "Lra", "Lci", "Lq", "Ldi", "c", "J", "aref", "D", "R", "floss", "kind", "cdim", "cmu", "cfric",
    "jnz", "jnnz", "Ceq", "ce_idx", "ce_nnz", "Cbox", "cb_idx", "cb_nnz", "lo", "hi",
    "rho_e", "rho_b", "sc_e", "sc_b", "Q", "q", "Ka2", "Kf2", "e2",
])

Work = namedtuple("Work", [
    "jar", "f", "state", "hdiag", "hcone", "g", "y", "h", "w", "nu", "bact", "r2", "gradg",
    "grad", "tmp_nv", "tmp_efc", "tmp_efc2", "K2", "P", "Hm", "LH",
    "kink", "release", "nk", "Z", "kidx", "nuk", "scr", "scri", "Qa",
])


@njit(cache=True, error_model="numpy")
def _scratch_size(nv, nefc, nz, nb, m2):
    """Float scratch (``Work.scr``) that the temporaries of :func:`_dual_newton`, :func:`_face_step`,
    :func:`_linesearch_1d` and :func:`_probe_states` take in turn (never two at once)."""
    na = nz + nb
    dual = nv * na + na + 2 * na * na + nv * nefc + 2 * nefc * nefc + nefc * na + nefc
    face = nv * nefc + nv + 4 * nefc * nefc + 2 * nefc
    line = 6 * nv + 41 * nefc + nz + 2 * nb + m2
    return max(dual, face, line, 2 * nefc)


@njit(cache=True, error_model="numpy")
def _ws_sizes(nv, nefc, nz, nb, m2, ncone):
    """Lengths ``(float64, int64)`` of the workspace :func:`gdd_solve` carves its arrays from."""
    nev = 2 * nefc + 1
    tri = nv * (nv + 1) // 2
    nf = (nefc * 14 + nv * nv * 4 + tri + nv * 15 + m2 * (nv * 2 + nefc + 4) + nz * 3 + nb * 4
          + ncone * 36 + nev + (nv + nz + nb + m2) * nv + _scratch_size(nv, nefc, nz, nb, m2))
    ni = (nz + nb + nefc) * (nv + 1) + nefc * 10 + nb * 5 + nev * 3 + 1 + 2 * nv + tri
    return nf, ni


@njit(cache=True, error_model="numpy")
def _take(buf, o, n):
    return buf[o:o + n], o + n


@intrinsic
def _as_2d(typingctx, arr, n, m):
    """The C-contiguous 1-D ``arr`` (at least ``n·m`` long) seen as an ``(n, m)`` array,
    without an owner (meminfo NULL; see :func:`_unmanaged`): unlike ``reshape`` no runtime
    helper call (numba's ``reshape`` checks the layout through one, ~40 ns a view)."""
    from numba.core import cgutils, types

    outty = types.Array(arr.dtype, 2, "C")

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, value=args[0])
        out = context.make_array(outty)(context, builder)
        size = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(arr.dtype)))
        n_ = context.cast(builder, args[1], signature.args[1], types.intp)
        m_ = context.cast(builder, args[2], signature.args[2], types.intp)
        context.populate_array(out, data=src.data, shape=cgutils.pack_array(builder, [n_, m_]),
                               strides=cgutils.pack_array(builder, [builder.mul(m_, size), size]),
                               itemsize=size, meminfo=None)
        return out._getvalue()

    return outty(arr, n, m), codegen


@njit(cache=True, error_model="numpy")
def _take2(buf, o, n, m):
    return _as_2d(buf[o:o + n * m], n, m), o + n * m


@njit(cache=True, error_model="numpy")
def _fill(x, value):
    """``x[:] = value`` for a 1-D array (a plain loop: no allocation)."""
    for i in range(x.shape[0]):
        x[i] = value


@njit(cache=True, error_model="numpy")
def _all_finite(x):
    """Whether every entry of the 1-D ``x`` is finite (a plain loop: no allocation)."""
    for i in range(x.shape[0]):
        if not math.isfinite(x[i]):
            return False
    return True


@njit(cache=True, error_model="numpy")
def _cost_blocks(costbuf, km, kd, m1, nv):
    """Views of the packed cost buffer: mass-weighted targets (``km``), diagonal terms
    (``kd``), first-order acceleration terms (``m1``); returns them and the next offset."""
    o = 0
    mass_w, o = _take(costbuf, o, km)
    mass_t, o = _take2(costbuf, o, km, nv)
    diag_w, o = _take(costbuf, o, kd)
    diag_m, o = _take2(costbuf, o, kd, nv)
    diag_t, o = _take2(costbuf, o, kd, nv)
    Ka1, o = _take2(costbuf, o, m1, nv)
    e1, o = _take(costbuf, o, m1)
    wa, o = _take(costbuf, o, m1)
    return mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, o


# ---------------------------------------------------------------- objective


@njit(cache=True, error_model="numpy")
def _box_psi(w, lo, hi, mu_lo, mu_hi, rho):
    """Σ_j ψ(w_j − hi_j, μ⁺_j) + ψ(lo_j − w_j, μ⁻_j), ψ(t, μ) = (max(0, μ + ρt)² − μ²)/(2ρ)."""
    val = 0.0
    for j in range(w.shape[0]):
        if np.isfinite(hi[j]):
            u = mu_hi[j] + rho[j] * (w[j] - hi[j])
            val += (max(0.0, u) ** 2 - mu_hi[j] ** 2) / (2.0 * rho[j])
        if np.isfinite(lo[j]):
            u = mu_lo[j] + rho[j] * (lo[j] - w[j])
            val += (max(0.0, u) ** 2 - mu_lo[j] ** 2) / (2.0 * rho[j])
    return val


@njit(cache=True, error_model="numpy")
def _box_nu(w, lo, hi, mu_lo, mu_hi, rho, nu, act):
    """``nu = dψ/dw``; ``act[j]`` = 1 (upper term on), −1 (lower term on), 0."""
    for j in range(w.shape[0]):
        nu[j] = 0.0
        act[j] = 0
        if np.isfinite(hi[j]):
            u = mu_hi[j] + rho[j] * (w[j] - hi[j])
            if u > 0.0:
                nu[j] += u
                act[j] = 1
        if np.isfinite(lo[j]):
            u = mu_lo[j] + rho[j] * (lo[j] - w[j])
            if u > 0.0:
                nu[j] -= u
                act[j] = -1


@njit(cache=True, fastmath=FM, error_model="numpy")
def _cost_jacobian(pb, wk):
    """``K2 = Ka2 − Kf2 H[s] J``: Jacobian of the force-dependent cost residual."""
    m2 = pb.Ka2.shape[0]
    nv = pb.Ka2.shape[1]
    nefc = pb.J.shape[0]
    for r in range(m2):
        for i in range(nefc):
            wk.tmp_efc[i] = pb.Kf2[r, i]
        hs_mul(wk.tmp_efc, pb.kind, pb.cdim, wk.state, wk.hdiag, wk.hcone, wk.tmp_efc2)
        for k in range(nv):
            wk.K2[r, k] = pb.Ka2[r, k]
        for i in range(nefc):
            s = wk.tmp_efc2[i]
            if s != 0.0:
                for k in range(nv):
                    wk.K2[r, k] -= s * pb.J[i, k]


@njit(cache=True, fastmath=FM, error_model="numpy")
def _evaluate(pb, wk, a, lam, mu_lo, mu_hi):
    """Objective, cost and gradient at ``a``; fills the work arrays. Returns ``(L, ℓ)``."""
    nv = a.shape[0]
    nefc = pb.J.shape[0]
    _matvec(pb.J, a, wk.jar)
    for i in range(nefc):
        wk.jar[i] -= pb.aref[i]
    constraint_update(wk.jar, pb.D, pb.R, pb.floss, pb.kind, pb.cdim, pb.cmu, pb.cfric,
                      wk.f, wk.state, wk.hdiag, wk.hcone)
    _mark_kinks(pb, wk)
    # g = M a + c − Jᵀ f ;  y = M⁻¹ g
    _matvec(pb.M, a, wk.g)
    for k in range(nv):
        wk.g[k] += pb.c[k]
    _matTvec_add(pb.J, wk.f, wk.g, -1.0)
    _m_solve(pb, wk.g, wk.y)
    _matvec(pb.Q, a, wk.Qa)  # (kept for the gradient)
    return _evaluation_tail(pb, wk, a, lam, mu_lo, mu_hi)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _evaluation_tail(pb, wk, a, lam, mu_lo, mu_hi):
    """The end of :func:`_evaluate` and :func:`_evaluate_step`, from ``g``, ``y = M⁻¹g``, ``Q a``
    and the forces at ``a``: ``h = Ceq g``, ``w = Cbox g``, the objective, the cost
    ``ℓ = ½ aᵀQa + qᵀa + ½‖Ka2 a + Kf2 f + e2‖²`` and the gradient.  Returns ``(L, ℓ)``."""
    nv = a.shape[0]
    nefc = pb.J.shape[0]
    m2 = pb.Ka2.shape[0]
    _smatvec(pb.Ceq, pb.ce_idx, pb.ce_nnz, wk.g, wk.h)
    _smatvec(pb.Cbox, pb.cb_idx, pb.cb_nnz, wk.g, wk.w)
    phi = 0.5 * _dot(wk.g, wk.y) + _constraint_terms(pb, wk, lam, mu_lo, mu_hi)
    ell = 0.5 * _dot(a, wk.Qa) + _dot(pb.q, a)
    for r in range(m2):
        s = pb.e2[r]
        for k in range(nv):
            s += pb.Ka2[r, k] * a[k]
        for i in range(nefc):
            s += pb.Kf2[r, i] * wk.f[i]
        wk.r2[r] = s
        ell += 0.5 * s * s
    phi += ell
    # ∇_g L = y + Ceqᵀ(λ + ρ h) + Cboxᵀ ν
    _lagrangian_gradient(pb, wk, a, lam)
    return phi, ell


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _evaluate_step(pb, wk, a, alpha, Jd, g1, y1, Qd, lam, mu_lo, mu_hi):
    """:func:`_evaluate` at ``a`` = the previous point + ``α d``, when the constraint rows kept
    their states on the open segment (the line search crossed no breakpoint, no row pinned):
    there ``f`` is affine in ``α``, so ``jar``, ``g = M a + c − Jᵀ f``, ``y = M⁻¹ g`` and ``Q a``
    move by ``α`` times their slopes ``J d``, ``g1 = P d``, ``y1 = M⁻¹ g1`` and ``Q d`` (from
    :func:`_linesearch_sweep`) — no matrix product and no solve with ``M``.  The states and
    forces are recomputed from the new ``jar`` and everything else as in :func:`_evaluate`.
    Returns ``(L, ℓ)``."""
    nv = a.shape[0]
    nefc = pb.J.shape[0]
    for i in range(nefc):
        wk.jar[i] += alpha * Jd[i]
    constraint_update(wk.jar, pb.D, pb.R, pb.floss, pb.kind, pb.cdim, pb.cmu, pb.cfric,
                      wk.f, wk.state, wk.hdiag, wk.hcone)
    _mark_kinks(pb, wk)
    for k in range(nv):
        wk.g[k] += alpha * g1[k]
        wk.y[k] += alpha * y1[k]
        wk.Qa[k] += alpha * Qd[k]
    return _evaluation_tail(pb, wk, a, lam, mu_lo, mu_hi)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _reevaluate_multipliers(pb, wk, a, lam, mu_lo, mu_hi, ell):
    """Objective and gradient after the multipliers changed (a, g, f and ℓ unchanged)."""
    phi = 0.5 * _dot(wk.g, wk.y) + ell + _constraint_terms(pb, wk, lam, mu_lo, mu_hi)
    _lagrangian_gradient(pb, wk, a, lam)
    return phi


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _constraint_terms(pb, wk, lam, mu_lo, mu_hi):
    """Augmented-Lagrangian terms of the constraints at the current ``h = Ceq g``, ``w = Cbox g``:
    ``Σ_e λ_e h_e + ½ ρ_e h_e²`` plus the box penalty ψ; updates the box multipliers ``ν``."""
    _box_nu(wk.w, pb.lo, pb.hi, mu_lo, mu_hi, pb.rho_b, wk.nu, wk.bact)
    total = 0.0
    for e in range(pb.Ceq.shape[0]):
        total += lam[e] * wk.h[e] + 0.5 * pb.rho_e[e] * wk.h[e] * wk.h[e]
    return total + _box_psi(wk.w, pb.lo, pb.hi, mu_lo, mu_hi, pb.rho_b)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _lagrangian_gradient(pb, wk, a, lam):
    """``∇_g L`` (:func:`_gradient_in_g`), then the gradient in ``a`` (:func:`_eval_gradient`)."""
    _gradient_in_g(pb, wk, lam)
    _eval_gradient(pb, wk, a)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _reevaluate_multipliers_piece(pb, wk, a, lam, mu_lo, mu_hi, ell):
    """:func:`_reevaluate_multipliers` when ``wk.P`` is ``P = ∂g/∂a`` at ``a`` (built by
    :func:`_build_hessian` at this ``a``: with elliptic cones it depends on ``a``, not only on
    the states).  With ``a`` fixed only ``∇_g L`` changes, and
    ``∇L = P ∇_g L + …`` moves by ``P Δ(∇_g L)``; the change is nonzero on the columns of the
    constraint rows only — no product with ``M`` and ``J``."""
    nv = a.shape[0]
    phi = 0.5 * _dot(wk.g, wk.y) + ell + _constraint_terms(pb, wk, lam, mu_lo, mu_hi)
    old = wk.tmp_nv
    for k in range(nv):
        old[k] = wk.gradg[k]
    _gradient_in_g(pb, wk, lam)
    P = wk.P
    for k in range(nv):
        dk = wk.gradg[k] - old[k]
        if dk != 0.0:
            for r in range(nv):
                wk.grad[r] += P[k, r] * dk  # (P symmetric: its row k is its column k)
    return phi


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _gradient_in_g(pb, wk, lam):
    """``∇_g L = y + Ceqᵀ(λ + ρ h) + Cboxᵀ ν`` into ``wk.gradg`` (sparse rows)."""
    nv = wk.gradg.shape[0]
    for k in range(nv):
        wk.gradg[k] = wk.y[k]
    for e in range(pb.Ceq.shape[0]):
        s = lam[e] + pb.rho_e[e] * wk.h[e]
        for p in range(pb.ce_nnz[e]):
            k = pb.ce_idx[e, p]
            wk.gradg[k] += pb.Ceq[e, k] * s
    for j in range(pb.Cbox.shape[0]):
        s = wk.nu[j]
        if s != 0.0:
            for p in range(pb.cb_nnz[j]):
                k = pb.cb_idx[j, p]
                wk.gradg[k] += pb.Cbox[j, k] * s


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _eval_gradient(pb, wk, a):
    """``∇L = P ∇_g L + Q a + q + K2ᵀ r2`` with ``P z = M z + Jᵀ H (J z)`` for the current states
    (``wk.Qa``: ``Q a``, from :func:`_evaluate`)."""
    nv = a.shape[0]
    m2 = pb.Ka2.shape[0]
    _matvec(pb.M, wk.gradg, wk.grad)
    _matvec(pb.J, wk.gradg, wk.tmp_efc)
    hs_mul(wk.tmp_efc, pb.kind, pb.cdim, wk.state, wk.hdiag, wk.hcone, wk.tmp_efc2)
    _matTvec_add(pb.J, wk.tmp_efc2, wk.grad, 1.0)
    for k in range(nv):
        wk.grad[k] += wk.Qa[k] + pb.q[k]
    if m2 > 0:
        _cost_jacobian(pb, wk)
        _matTvec_add(wk.K2, wk.r2, wk.grad, 1.0)


@njit(cache=True, error_model="numpy")
def _probe_states(pb, wk, a, d, Jd):
    """Take the constraint states (and H[s]) just ahead along ``d`` and redo the gradient.

    At a kink the states at ``a`` describe only one side; the Newton direction
    built from them may be blocked.  The states at ``a + ε d`` describe the side
    the direction enters (used with elliptic cones, whose zone boundaries are not pinned).
    """
    nefc = pb.J.shape[0]
    an = math.sqrt(_dot(a, a))
    dn = math.sqrt(_dot(d, d))
    if dn == 0.0:
        return
    eps = 1e-7 * (1.0 + an) / dn
    jp, o = _take(wk.scr, 0, nefc)
    fp, o = _take(wk.scr, o, nefc)
    for i in range(nefc):
        jp[i] = wk.jar[i] + eps * Jd[i]
    constraint_update(jp, pb.D, pb.R, pb.floss, pb.kind, pb.cdim, pb.cmu, pb.cfric,
                      fp, wk.state, wk.hdiag, wk.hcone)
    _eval_gradient(pb, wk, a)


@njit(cache=True, fastmath=FM, error_model="numpy")
def _gram_lower(Q, ZT, ncol, out):
    """Lower triangle of ``out = Q + Z Zᵀ`` (``out[r, k]`` for ``k ≤ r``), ``Z = ZT[:, :ncol]``.

    Each entry is a dot product of two rows of ``ZT``; four entries of a row are accumulated
    together (:func:`_four_row_dots`, instead of one latency-bound reduction per entry: ~2.5×
    faster for 22 rows), the last one to three in one more pass.
    """
    nv = Q.shape[0]
    for r in range(nv):
        k = 0
        while k + 4 <= r + 1:
            s0, s1, s2, s3 = _four_row_dots(ZT, k, ZT[r], ncol)
            q0 = Q[r, k]
            q1 = Q[r, k + 1]
            q2 = Q[r, k + 2]
            q3 = Q[r, k + 3]
            out[r, k] = q0 + s0
            out[r, k + 1] = q1 + s1
            out[r, k + 2] = q2 + s2
            out[r, k + 3] = q3 + s3
            k += 4
        rem = r + 1 - k
        if rem == 1:
            s0 = Q[r, k]
            for t in range(ncol):
                s0 += ZT[r, t] * ZT[k, t]
            out[r, k] = s0
        elif rem == 2:
            s0 = Q[r, k]
            s1 = Q[r, k + 1]
            for t in range(ncol):
                z = ZT[r, t]
                s0 += z * ZT[k, t]
                s1 += z * ZT[k + 1, t]
            out[r, k] = s0
            out[r, k + 1] = s1
        elif rem == 3:
            s0 = Q[r, k]
            s1 = Q[r, k + 1]
            s2 = Q[r, k + 2]
            for t in range(ncol):
                z = ZT[r, t]
                s0 += z * ZT[k, t]
                s1 += z * ZT[k + 1, t]
                s2 += z * ZT[k + 2, t]
            out[r, k] = s0
            out[r, k + 1] = s1
            out[r, k + 2] = s2


@njit(cache=True, fastmath=FM, error_model="numpy")
def _build_hessian(pb, wk):
    """Gauss-Newton Hessian ``Pᵀ S P + Q + K2ᵀK2`` (eq. 18 with the AL terms), factored into LH.

    ``S = M⁻¹ + Ceqᵀ diag(ρ_e) Ceq + Cboxᵀ diag(ρ_b · on) Cbox``; ``Pᵀ M⁻¹ P = XᵀX``
    with ``X = D^(−½) L⁻ᵀ P`` (``M = Lᵀ D L``, :func:`ldl_factor`: row axpys over the
    factor's nonzeros, no explicit inverse).  Returns False if
    the factorization fails even after a small relative diagonal shift.
    """
    M = pb.M
    J = pb.J
    nv = M.shape[0]
    nefc = J.shape[0]
    nz = pb.Ceq.shape[0]
    nb = pb.Cbox.shape[0]
    m2 = pb.Ka2.shape[0]
    P = wk.P
    Hm = wk.Hm
    # P = M + Jᵀ H J.  The rows with a diagonal H (all but elliptic cones) as the Gram matrix
    # of the rows √h_i J_i: stored transposed (JT, nv × rows, in the scratch that the later
    # steps take in turn), the lower triangle by _gram_lower, then mirrored.
    JT = _take2(wk.scr, 0, nv, nefc)[0]
    na = 0
    i = 0
    while i < nefc:
        if pb.kind[i] == ROW_CONE and wk.state[i] == STATE_CONE:
            i += pb.cdim[i]
            continue
        hi_ = wk.hdiag[i]
        if hi_ > 0.0:
            sh = math.sqrt(hi_)
            for k in range(nv):
                JT[k, na] = sh * J[i, k]
            na += 1
        i += 1
    _gram_lower(M, JT, na, P)
    for r in range(nv):
        for k in range(r):
            P[k, r] = P[r, k]
    # elliptic cones in their cone state: dense blocks over the rows' nonzero columns
    i = 0
    while i < nefc:
        if pb.kind[i] == ROW_CONE and wk.state[i] == STATE_CONE:
            dim = pb.cdim[i]
            nnz = pb.jnnz[i]
            for r in range(dim):
                for cc in range(dim):
                    hrc = wk.hcone[i, r, cc]
                    if hrc != 0.0:
                        for p in range(nnz):
                            kp = pb.jnz[i, p]
                            jp = J[i + r, kp] * hrc
                            for pp in range(nnz):
                                kq = pb.jnz[i, pp]
                                P[kp, kq] += jp * J[i + cc, kq]
            i += dim
            continue
        i += 1
    # Hm = Q + ZᵀZ with the rows of Z: X = D^(−½) L⁻ᵀ P (nv rows; P M⁻¹ P = XᵀX since P is
    # symmetric), √ρ_e Ceq_e P, √ρ_j Cbox_j P (box terms on) and the rows of K2.  Z is stored
    # transposed (ZT, nv × rows); Hm_rk = Q_rk + ZT_r · ZT_k (contiguous dot products of
    # length "rows": _gram_lower).  Only the lower triangle of Hm is formed (all the
    # Cholesky factor reads).
    ZT = wk.Z
    X = wk.LH  # scratch until the factorization below
    for t in range(nv):
        for k in range(nv):
            X[t, k] = P[t, k]
    rn = pb.Lrn
    ra = pb.Lra
    ci = pb.Lci
    lq = pb.Lq
    for t in range(nv - 1, -1, -1):  # Lᵀ X = P: row t scatters into the rows of its columns
        adr = ra[t]
        for p in range(rn[t] - 1):
            j = ci[adr + p]
            lt = lq[adr + p]
            for k in range(nv):
                X[j, k] -= lt * X[t, k]
    for t in range(nv):
        sd = math.sqrt(pb.Ldi[t])
        for k in range(nv):
            ZT[k, t] = sd * X[t, k]
    ncol = nv
    for e in range(nz):
        sr = math.sqrt(pb.rho_e[e])
        for k in range(nv):
            ZT[k, ncol] = 0.0
        for p in range(pb.ce_nnz[e]):
            t = pb.ce_idx[e, p]
            cv = sr * pb.Ceq[e, t]
            for k in range(nv):
                ZT[k, ncol] += cv * P[t, k]
        ncol += 1
    for j in range(nb):
        if wk.bact[j] != 0:
            sr = math.sqrt(pb.rho_b[j])
            for k in range(nv):
                ZT[k, ncol] = 0.0
            for p in range(pb.cb_nnz[j]):
                t = pb.cb_idx[j, p]
                cv = sr * pb.Cbox[j, t]
                for k in range(nv):
                    ZT[k, ncol] += cv * P[t, k]
            ncol += 1
    for q_ in range(m2):
        for k in range(nv):
            ZT[k, ncol] = wk.K2[q_, k]
        ncol += 1
    _gram_lower(pb.Q, ZT, ncol, Hm)
    if cholesky(Hm, wk.LH):
        return True
    scale = 0.0
    for r in range(nv):
        scale = max(scale, abs(Hm[r, r]))
    for attempt in range(3):
        shift = scale * 1e-12 * (100.0 ** attempt)
        for r in range(nv):
            Hm[r, r] += shift
        if cholesky(Hm, wk.LH):
            return True
    return False


KINK_TOL = 1e-10

#: safeguard limits, multiples of the solve's acceleration scale (free acceleration, constraint
#: reference accelerations and cost targets): an initial guess above GUESS_LIMIT is replaced by
#: the free acceleration; a step above STEP_LIMIT or a result above RESULT_LIMIT restarts the solve
GUESS_LIMIT = 1e4
STEP_LIMIT = 1e6
RESULT_LIMIT = 1e6


@njit(cache=True, inline="always", error_model="numpy")
def _mark_kinks(pb, wk):
    """Find rows sitting on a breakpoint of ``s`` and give them a definite state.

    A one-sided row at ``jar = 0`` or a friction-loss row at ``jar = ±R·floss``
    (within ``KINK_TOL`` relative) is a *kink*: the objective is not
    differentiable there.  The row is snapped onto the breakpoint and, unless it
    was released to a side (``wk.release``), *pinned* (``wk.kink = σ_b``) in its
    zero-Hessian ("base") state: satisfied, or the linear friction state; ``σ_b``
    is the sign of ``jar − θ`` on that side.  Released rows take the state of
    their side; a release is forgotten once the row leaves the breakpoint.
    """
    nk = 0
    for i in range(pb.J.shape[0]):
        wk.kink[i] = 0
        k = pb.kind[i]
        if k == ROW_ONESIDED:
            theta = 0.0
            sb = 1
        elif k == ROW_FRICTION:
            rf = pb.R[i] * pb.floss[i]
            if wk.jar[i] >= 0.0:
                theta = rf
                sb = 1
            else:
                theta = -rf
                sb = -1
        else:
            continue
        x = wk.jar[i]
        tol = KINK_TOL * (1.0 + abs(pb.aref[i]) + abs(x + pb.aref[i]))
        if abs(x - theta) > tol:
            wk.release[i] = 0
            continue
        wk.jar[i] = theta
        side = wk.release[i]
        if side == 0 or side == sb:
            # base state (zero Hessian)
            wk.hdiag[i] = 0.0
            if k == ROW_ONESIDED:
                wk.state[i] = STATE_SATISFIED
                wk.f[i] = 0.0
            elif sb > 0:
                wk.state[i] = STATE_LINEARPOS
                wk.f[i] = -pb.floss[i]
            else:
                wk.state[i] = STATE_LINEARNEG
                wk.f[i] = pb.floss[i]
            if side == 0:
                wk.kink[i] = sb
                nk += 1
        else:
            wk.hdiag[i] = pb.D[i]
            wk.state[i] = STATE_QUADRATIC
            wk.f[i] = -pb.D[i] * theta
    wk.nk[0] = nk


@njit(cache=True, fastmath=FM, error_model="numpy")
def _fwd_solve(L, b, x):
    """``x = L⁻¹ b`` (x may alias b)."""
    n = L.shape[0]
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= L[i, k] * x[k]
        x[i] = s / L[i, i]


@njit(cache=True, fastmath=FM, error_model="numpy")
def _bwd_solve(L, x):
    """In place ``x ← L⁻ᵀ x``."""
    n = L.shape[0]
    for i in range(n - 1, -1, -1):
        xi = x[i] / L[i, i]
        x[i] = xi
        for k in range(i):
            x[k] -= L[i, k] * xi


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _pinned(wk):
    """Indices of the pinned (kink) rows: a view of ``wk.kidx``."""
    nk = wk.nk[0]
    idx = wk.kidx[:nk]
    c = 0
    for i in range(wk.kink.shape[0]):
        if wk.kink[i] != 0:
            idx[c] = i
            c += 1
    return idx


@njit(cache=True, fastmath=FM, error_model="numpy")
def _face_step(pb, wk, kidx, d, nu):
    """Newton step restricted to the face ``J_K d = 0`` of the pinned rows K.

    ``d = −H⁻¹(∇L + J_Kᵀν)`` with ``(J_K H⁻¹ J_Kᵀ) ν = −J_K H⁻¹ ∇L`` (slightly
    regularized: the rows of one pyramid are linearly dependent).  Returns the
    norm of the face gradient ``∇L + J_Kᵀν``.
    """
    nv = d.shape[0]
    nk = kidx.shape[0]
    X, o = _take2(wk.scr, 0, nv, nk)
    y, o = _take(wk.scr, o, nv)
    S, o = _take2(wk.scr, o, nk, nk)
    rhs, o = _take(wk.scr, o, nk)
    LS, o = _take2(wk.scr, o, nk, nk)
    G, o = _take2(wk.scr, o, nk, nk)
    r_, o = _take(wk.scr, o, nk)
    LG, o = _take2(wk.scr, o, nk, nk)
    _fill(wk.scr[:o], 0.0)
    for c in range(nk):
        for k in range(nv):
            X[k, c] = pb.J[kidx[c], k]
    _lower_solve_rows(wk.LH, X)
    _fwd_solve(wk.LH, wk.grad, y)
    for t in range(nv):
        yt = y[t]
        for r in range(nk):
            xr = X[t, r]
            rhs[r] -= xr * yt
            for c in range(nk):
                S[r, c] += xr * X[t, c]
    tr = 0.0
    for r in range(nk):
        tr = max(tr, S[r, r])
    for r in range(nk):
        S[r, r] += 1e-12 * tr + 1e-300
    if not cholesky(S, LS):
        for r in range(nk):
            S[r, r] += 1e-8 * tr
        cholesky(S, LS)
    chol_solve(LS, rhs, nu)
    for k in range(nv):
        s = y[k]
        for c in range(nk):
            s += X[k, c] * nu[c]
        d[k] = -s
    _bwd_solve(wk.LH, d)
    # remove the residual component off the face exactly: d ← d − J_Kᵀ(J_K J_Kᵀ)⁻¹ J_K d
    for a_ in range(nk):
        ia = kidx[a_]
        s = 0.0
        for k in range(nv):
            s += pb.J[ia, k] * d[k]
        r_[a_] = s
        for b_ in range(nk):
            ib = kidx[b_]
            s = 0.0
            for k in range(nv):
                s += pb.J[ia, k] * pb.J[ib, k]
            G[a_, b_] = s
    trg = 0.0
    for a_ in range(nk):
        trg = max(trg, G[a_, a_])
    for a_ in range(nk):
        G[a_, a_] += 1e-12 * trg + 1e-300
    if cholesky(G, LG):
        chol_solve(LG, r_, r_)
        for a_ in range(nk):
            ia = kidx[a_]
            for k in range(nv):
                d[k] -= pb.J[ia, k] * r_[a_]
    fg2 = 0.0
    for k in range(nv):
        s = wk.grad[k]
        for c in range(nk):
            s += pb.J[kidx[c], k] * nu[c]
        fg2 += s * s
    return math.sqrt(fg2)


@njit(cache=True, fastmath=FM, error_model="numpy")
def _release(pb, wk, kidx, nu, tol):
    """Release the pinned row whose leaving the face decreases L fastest.

    With ν from :func:`_face_step` at a face minimizer, moving row i off its
    breakpoint by ``t`` changes L at rate ``−ν_i t`` on the base side and
    ``(δ_i − ν_i) t`` on the other, ``δ_i = D_i (J_i ∇_g L − Kf2_iᵀ r2)``.
    Returns True if a row was released (``wk.release`` set), False if no side
    of any pinned row is a descent direction (a kink local minimum).
    """
    best = tol
    bi = -1
    bside = 0
    for c in range(kidx.shape[0]):
        i = kidx[c]
        sb = wk.kink[i]
        jn = 0.0
        jg = 0.0
        for k in range(pb.J.shape[1]):
            jn += pb.J[i, k] * pb.J[i, k]
            jg += pb.J[i, k] * wk.gradg[k]
        kr = 0.0
        for r in range(pb.Ka2.shape[0]):
            kr += pb.Kf2[r, i] * wk.r2[r]
        delta = pb.D[i] * (jg - kr)
        jn = math.sqrt(jn)
        rate_b = sb * nu[c] * jn
        rate_d = -sb * (nu[c] - delta) * jn
        if rate_b > best:
            best = rate_b
            bi = i
            bside = sb
        if rate_d > best:
            best = rate_d
            bi = i
            bside = -sb
    if bi < 0:
        return False
    wk.release[bi] = bside
    return True


# ---------------------------------------------------------------- exact line search (pyramidal)


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _piece_slopes(pb, d, Jd, rowstate, g1, y1, h1, w1, r1, dfd):
    """Slopes along the line in the current piece: ``g1 = P d``, ``y1 = M⁻¹g1``, ``h1, w1, r1``."""
    nv = d.shape[0]
    nefc = Jd.shape[0]
    m2 = pb.Ka2.shape[0]
    for i in range(nefc):
        dfd[i] = -pb.D[i] * Jd[i] if rowstate[i] == STATE_QUADRATIC else 0.0
    _matvec(pb.M, d, g1)
    _matTvec_add(pb.J, dfd, g1, -1.0)
    _m_solve(pb, g1, y1)
    _smatvec(pb.Ceq, pb.ce_idx, pb.ce_nnz, g1, h1)
    _smatvec(pb.Cbox, pb.cb_idx, pb.cb_nnz, g1, w1)
    for r in range(m2):
        s = 0.0
        for k in range(nv):
            s += pb.Ka2[r, k] * d[k]
        for i in range(nefc):
            s += pb.Kf2[r, i] * dfd[i]
        r1[r] = s


@njit(cache=True, fastmath=FM, error_model="numpy")
def _linesearch_sweep(pb, wk, a, d, Jd, lam, mu_lo, mu_hi, ls):
    """Exact minimization of the objective along ``a + α d`` when ``s`` is piecewise quadratic.

    Walks the breakpoints in increasing α — constraint rows changing state and
    box-penalty terms switching on or off — keeping the 1-D quadratic of the
    current piece (derivative and curvature) up to date, and stops at the first
    local minimizer along the ray: the minimizer of a piece that lies inside it,
    or a kink where the right derivative becomes non-negative.

    Returns ``(α, breakpoints crossed)``; ``α`` is exactly 1 when the Newton step
    is the minimizer of the first piece.  With no breakpoint crossed, ``ls`` keeps the
    slopes of that piece (``g1 = P d``, ``y1 = M⁻¹g1``) and ``Q d`` (its ``tmp_nv``) for
    :func:`_evaluate_step`.
    """
    (rowstate, g1, y1, yk, hk, h1, wk_, w1, rk, r1, dfd, tmp_nv,
     ev_alpha, ev_row, ev_type, bhi, blo, order) = ls
    nv = a.shape[0]
    nefc = Jd.shape[0]
    nz = pb.Ceq.shape[0]
    nb = pb.Cbox.shape[0]
    m2 = pb.Ka2.shape[0]
    lo = pb.lo
    hi = pb.hi
    rho_b = pb.rho_b
    # row states at α = 0⁺
    for i in range(nefc):
        x = wk.jar[i]
        s = Jd[i]
        k = pb.kind[i]
        st = STATE_QUADRATIC
        if k == ROW_ONESIDED:
            st = STATE_QUADRATIC if (x < 0.0 or (x == 0.0 and s < 0.0)) else STATE_SATISFIED
        elif k == ROW_FRICTION:
            rf = pb.R[i] * pb.floss[i]
            if x < -rf or (x == -rf and s <= 0.0):
                st = STATE_LINEARNEG
            elif x > rf or (x == rf and s >= 0.0):
                st = STATE_LINEARPOS
        rowstate[i] = st
    _piece_slopes(pb, d, Jd, rowstate, g1, y1, h1, w1, r1, dfd)
    for k in range(nv):
        yk[k] = wk.y[k]
    for e in range(nz):
        hk[e] = wk.h[e]
    for j in range(nb):
        wk_[j] = wk.w[j]
    for r in range(m2):
        rk[r] = wk.r2[r]
    _matvec(pb.Q, d, tmp_nv)  # (kept: Q d, for _evaluate_step)
    dQd = _dot(d, tmp_nv)
    ga0 = _dot(wk.Qa, d) + _dot(pb.q, d)
    for j in range(nb):
        bhi[j] = 0
        blo[j] = 0
        if np.isfinite(hi[j]):
            u = mu_hi[j] + rho_b[j] * (wk_[j] - hi[j])
            bhi[j] = 1 if (u > 0.0 or (u == 0.0 and w1[j] > 0.0)) else 0
        if np.isfinite(lo[j]):
            u = mu_lo[j] + rho_b[j] * (lo[j] - wk_[j])
            blo[j] = 1 if (u > 0.0 or (u == 0.0 and w1[j] < 0.0)) else 0
    # constraint-row breakpoints (α > 0)
    nev = 0
    for i in range(nefc):
        s = Jd[i]
        if s == 0.0:
            continue
        k = pb.kind[i]
        if k == ROW_ONESIDED:
            al = -wk.jar[i] / s
            if al > 0.0:
                ev_alpha[nev] = al
                ev_row[nev] = i
                ev_type[nev] = 0
                nev += 1
        elif k == ROW_FRICTION:
            rf = pb.R[i] * pb.floss[i]
            al = (-rf - wk.jar[i]) / s
            if al > 0.0:
                ev_alpha[nev] = al
                ev_row[nev] = i
                ev_type[nev] = -1
                nev += 1
            al = (rf - wk.jar[i]) / s
            if al > 0.0:
                ev_alpha[nev] = al
                ev_row[nev] = i
                ev_type[nev] = 1
                nev += 1
    # breakpoints in increasing α (insertion sort: few events, no allocation)
    for p in range(nev):
        al = ev_alpha[p]
        q_ = p
        while q_ > 0 and ev_alpha[order[q_ - 1]] > al:
            order[q_] = order[q_ - 1]
            q_ -= 1
        order[q_] = p
    alpha = 0.0
    crossed = 0
    pos = 0
    for _guard in range(4 * (nev + 2 * nb) + 10):
        dphi = _dot(g1, yk) + ga0 + alpha * dQd
        ddphi = _dot(g1, y1) + dQd
        for e in range(nz):
            dphi += (lam[e] + pb.rho_e[e] * hk[e]) * h1[e]
            ddphi += pb.rho_e[e] * h1[e] * h1[e]
        for j in range(nb):
            if bhi[j] != 0:
                dphi += (mu_hi[j] + rho_b[j] * (wk_[j] - hi[j])) * w1[j]
                ddphi += rho_b[j] * w1[j] * w1[j]
            if blo[j] != 0:
                dphi -= (mu_lo[j] + rho_b[j] * (lo[j] - wk_[j])) * w1[j]
                ddphi += rho_b[j] * w1[j] * w1[j]
        for r in range(m2):
            dphi += r1[r] * rk[r]
            ddphi += r1[r] * r1[r]
        if dphi >= 0.0:
            return alpha, crossed
        tstar = -dphi / ddphi if ddphi > 0.0 else np.inf
        t_row = np.inf
        if pos < nev:
            t_row = max(ev_alpha[order[pos]] - alpha, 0.0)
        t_box = np.inf
        jbox = -1
        for j in range(nb):
            if w1[j] == 0.0:
                continue
            if np.isfinite(hi[j]):
                if (bhi[j] != 0 and w1[j] < 0.0) or (bhi[j] == 0 and w1[j] > 0.0):
                    u = mu_hi[j] + rho_b[j] * (wk_[j] - hi[j])
                    t = max(-u / (rho_b[j] * w1[j]), 0.0)
                    if t < t_box:
                        t_box = t
                        jbox = j
            if np.isfinite(lo[j]):
                if (blo[j] != 0 and w1[j] > 0.0) or (blo[j] == 0 and w1[j] < 0.0):
                    u = mu_lo[j] + rho_b[j] * (lo[j] - wk_[j])
                    t = max(u / (rho_b[j] * w1[j]), 0.0)
                    if t < t_box:
                        t_box = t
                        jbox = nb + j
        t_ev = min(t_row, t_box)
        if tstar <= t_ev or not np.isfinite(t_ev):
            if crossed == 0 and abs(tstar - 1.0) <= 1e-6:
                return 1.0, crossed  # the Newton step is the minimizer of the piece (to roundoff)
            return alpha + tstar, crossed
        # advance to the event
        for k in range(nv):
            yk[k] += t_ev * y1[k]
        for e in range(nz):
            hk[e] += t_ev * h1[e]
        for j in range(nb):
            wk_[j] += t_ev * w1[j]
        for r in range(m2):
            rk[r] += t_ev * r1[r]
        alpha += t_ev
        crossed += 1
        if t_box < t_row:
            if jbox < nb:
                bhi[jbox] = 1 - bhi[jbox]
            else:
                blo[jbox - nb] = 1 - blo[jbox - nb]
            continue
        changed = False
        while pos < nev and ev_alpha[order[pos]] <= alpha:
            ev = order[pos]
            pos += 1
            i = ev_row[ev]
            s = Jd[i]
            if pb.kind[i] == ROW_ONESIDED:
                new = STATE_QUADRATIC if s < 0.0 else STATE_SATISFIED
            elif ev_type[ev] > 0:
                new = STATE_LINEARPOS if s > 0.0 else STATE_QUADRATIC
            else:
                new = STATE_LINEARNEG if s < 0.0 else STATE_QUADRATIC
            if new != rowstate[i]:
                rowstate[i] = new
                changed = True
        if changed:
            _piece_slopes(pb, d, Jd, rowstate, g1, y1, h1, w1, r1, dfd)
    return alpha, crossed


# ---------------------------------------------------------------- 1-D fallback line search


@njit(cache=True, fastmath=FM, error_model="numpy")
def _phi_line(pb, alpha, a, d, Jd, Md, lam, mu_lo, mu_hi, lw):
    """φ(α) and φ'(α) along ``a + α d`` by direct evaluation (any cone type)."""
    (at, jt, ft, st, hd, hc, gt, yt, ht, wt, nut, bact, g1t, te, te2, tn, rt) = lw
    nv = a.shape[0]
    nefc = Jd.shape[0]
    nz = pb.Ceq.shape[0]
    nb = pb.Cbox.shape[0]
    m2 = pb.Ka2.shape[0]
    for k in range(nv):
        at[k] = a[k] + alpha * d[k]
    _matvec(pb.J, at, jt)
    for i in range(nefc):
        jt[i] -= pb.aref[i]
    constraint_update(jt, pb.D, pb.R, pb.floss, pb.kind, pb.cdim, pb.cmu, pb.cfric, ft, st, hd, hc)
    _matvec(pb.M, at, gt)
    for k in range(nv):
        gt[k] += pb.c[k]
    _matTvec_add(pb.J, ft, gt, -1.0)
    _m_solve(pb, gt, yt)
    _smatvec(pb.Ceq, pb.ce_idx, pb.ce_nnz, gt, ht)
    _smatvec(pb.Cbox, pb.cb_idx, pb.cb_nnz, gt, wt)
    _box_nu(wt, pb.lo, pb.hi, mu_lo, mu_hi, pb.rho_b, nut, bact)
    # g1 = P(α) d
    hs_mul(Jd, pb.kind, pb.cdim, st, hd, hc, te2)
    for k in range(nv):
        g1t[k] = Md[k]
    _matTvec_add(pb.J, te2, g1t, 1.0)
    phi = 0.5 * _dot(gt, yt)
    dphi = _dot(g1t, yt)
    for e in range(nz):
        phi += lam[e] * ht[e] + 0.5 * pb.rho_e[e] * ht[e] * ht[e]
        dphi += (lam[e] + pb.rho_e[e] * ht[e]) * _srow_dot(pb.Ceq, pb.ce_idx, pb.ce_nnz, e, g1t)
    phi += _box_psi(wt, pb.lo, pb.hi, mu_lo, mu_hi, pb.rho_b)
    for j in range(nb):
        if nut[j] != 0.0:
            dphi += nut[j] * _srow_dot(pb.Cbox, pb.cb_idx, pb.cb_nnz, j, g1t)
    _matvec(pb.Q, at, tn)
    phi += 0.5 * _dot(at, tn) + _dot(pb.q, at)
    dphi += _dot(tn, d) + _dot(pb.q, d)
    for r in range(m2):
        s = pb.e2[r]
        sd = 0.0
        for k in range(nv):
            s += pb.Ka2[r, k] * at[k]
            sd += pb.Ka2[r, k] * d[k]
        for i in range(nefc):
            s += pb.Kf2[r, i] * ft[i]
            sd -= pb.Kf2[r, i] * te2[i]
        phi += 0.5 * s * s
        dphi += s * sd
    return phi, dphi


@njit(cache=True, error_model="numpy")
def _linesearch_1d(pb, a, d, Jd, dphi0, lam, mu_lo, mu_hi, scr, scri):
    """Safeguarded 1-D search for the first zero of φ'(α) (used with elliptic cones).

    Brackets the first sign change of φ' by doubling from α = 1 (the Newton
    step), then secant steps safeguarded by bisection.  φ' may jump at
    breakpoints; a bracket collapsing onto a jump is a kink minimum.
    Returns ``(α, evaluations)``.  ``scr``, ``scri``: float / int scratch (:func:`_ws_sizes`).
    """
    nv = a.shape[0]
    nefc = Jd.shape[0]
    nz = pb.Ceq.shape[0]
    nb = pb.Cbox.shape[0]
    m2 = pb.Ka2.shape[0]
    at, o = _take(scr, 0, nv)
    jt, o = _take(scr, o, nefc)
    ft, o = _take(scr, o, nefc)
    hd, o = _take(scr, o, nefc)
    hc1, o = _take(scr, o, nefc * 36)
    gt, o = _take(scr, o, nv)
    yt, o = _take(scr, o, nv)
    ht, o = _take(scr, o, nz)
    wt, o = _take(scr, o, nb)
    nut, o = _take(scr, o, nb)
    g1t, o = _take(scr, o, nv)
    te, o = _take(scr, o, nefc)
    te2, o = _take(scr, o, nefc)
    tn, o = _take(scr, o, nv)
    rt, o = _take(scr, o, m2)
    Md, o = _take(scr, o, nv)
    _fill(hc1, 0.0)
    st, oi = _take(scri, 0, nefc)
    bact, oi = _take(scri, oi, nb)
    lw = (at, jt, ft, st, hd, hc1.reshape((nefc, 6, 6)), gt, yt, ht, wt, nut, bact, g1t, te, te2,
          tn, rt)
    _matvec(pb.M, d, Md)
    lo_a = 0.0
    dlo = dphi0
    hi_a = 1.0
    evals = 1
    _, dhi = _phi_line(pb, hi_a, a, d, Jd, Md, lam, mu_lo, mu_hi, lw)
    while dhi < 0.0 and evals < 60:
        lo_a = hi_a
        dlo = dhi
        hi_a *= 2.0
        _, dhi = _phi_line(pb, hi_a, a, d, Jd, Md, lam, mu_lo, mu_hi, lw)
        evals += 1
    if dhi <= 0.0:
        return hi_a, evals
    best = hi_a
    for it in range(100):
        width = hi_a - lo_a
        t = lo_a - dlo * width / (dhi - dlo) if dhi != dlo else 0.5 * (lo_a + hi_a)
        if not (t > lo_a + 0.01 * width and t < hi_a - 0.01 * width) or it % 3 == 2:
            t = 0.5 * (lo_a + hi_a)
        _, dt = _phi_line(pb, t, a, d, Jd, Md, lam, mu_lo, mu_hi, lw)
        evals += 1
        best = t
        if dt < 0.0:
            lo_a = t
            dlo = dt
        else:
            hi_a = t
            dhi = dt
        if abs(dt) <= 1e-15 * abs(dphi0) or (hi_a - lo_a) <= 1e-15 * hi_a:
            break
    return best, evals


# ---------------------------------------------------------------- multiplier update


@njit(cache=True, fastmath=FM, error_model="numpy")
def _dual_newton(pb, wk, kidx, lam, mu_lo, mu_hi, with_grad):
    """Second-order augmented-Lagrangian multiplier update.

    In the current piece the inner minimizer ``a(ν)`` and the constraint values
    ``t(ν)`` are affine in the multipliers ν of the equality rows and of the box
    rows whose penalty is on; ``dt/dν = −C H⁻¹ Cᵀ`` with rows ``C_k = n_k P``.
    The update ``ν += (C H⁻¹ Cᵀ)⁻¹ t`` makes the next inner solve land on
    ``t = 0`` when the piece does not change (box multipliers are clipped at 0).
    With pinned kink rows K the inner solve is restricted to ``J_K d = 0`` and
    ``H⁻¹`` is replaced by ``H⁻¹ − H⁻¹J_Kᵀ(J_K H⁻¹ J_Kᵀ)⁻¹J_K H⁻¹``.
    With ``with_grad`` (no pinned rows only) ``a`` need not be an inner minimizer:
    the Newton step from ``a`` with the new multipliers is ``δ = −H⁻¹(∇L + CᵀΔν)``
    and ``t + Cδ = 0`` gives ``Δν = (C H⁻¹ Cᵀ)⁻¹ (t − C H⁻¹ ∇L)`` (a KKT step of the
    current piece, so that the first Gauss-Newton step already lands on the constraints).
    Returns False if ``C H⁻¹ Cᵀ`` is singular (the caller then uses ``ν += ρ t``).
    """
    nv = pb.M.shape[0]
    nz = pb.Ceq.shape[0]
    nb = pb.Cbox.shape[0]
    nA = nz
    for j in range(nb):
        if wk.bact[j] != 0:
            nA += 1
    if nA == 0:
        return True
    nk = kidx.shape[0]
    CT, o = _take2(wk.scr, 0, nA, nv)  # rows: C_k = n_k P
    tv, o = _take(wk.scr, o, nA)
    S, o = _take2(wk.scr, o, nA, nA)
    LS, o = _take2(wk.scr, o, nA, nA)
    XK, o = _take2(wk.scr, o, nv, nk)
    SK, o = _take2(wk.scr, o, nk, nk)
    B, o = _take2(wk.scr, o, nk, nA)
    LK, o = _take2(wk.scr, o, nk, nk)
    col_, o = _take(wk.scr, o, nk)
    _fill(wk.scr[:o], 0.0)
    col = 0
    for e in range(nz + nb):
        if e < nz:
            row = e
            cnt = pb.ce_nnz[e]
            sign = 1.0
            tv[col] = wk.h[e]
        else:
            row = e - nz
            if wk.bact[row] == 0:
                continue
            cnt = pb.cb_nnz[row]
            if wk.bact[row] > 0:
                sign = 1.0
                tv[col] = wk.w[row] - pb.hi[row]
            else:
                sign = -1.0
                tv[col] = pb.lo[row] - wk.w[row]
        for p in range(cnt):
            if e < nz:
                t = pb.ce_idx[row, p]
                cv = sign * pb.Ceq[row, t]
            else:
                t = pb.cb_idx[row, p]
                cv = sign * pb.Cbox[row, t]
            for k in range(nv):
                CT[col, k] += cv * wk.P[t, k]  # (P symmetric)
        col += 1
    _lower_solve_rhs_rows(wk.LH, CT)  # rows of L⁻¹ Cᵀ
    if with_grad:
        # t − C H⁻¹ ∇L = t − (L⁻¹Cᵀ)ᵀ (L⁻¹∇L)
        z = wk.tmp_nv
        _fwd_solve(wk.LH, wk.grad, z)
        for r in range(nA):
            tv[r] -= _dot(CT[r], z)
    _gram_lower(S, CT, nv, S)  # S = C H⁻¹ Cᵀ (lower triangle; S is zero on entry)
    if nk > 0:
        for c in range(nk):
            for k in range(nv):
                XK[k, c] = pb.J[kidx[c], k]
        _lower_solve_rows(wk.LH, XK)
        for t in range(nv):
            for r in range(nk):
                xr = XK[t, r]
                for k in range(nk):
                    SK[r, k] += xr * XK[t, k]
                for k in range(nA):
                    B[r, k] += xr * CT[k, t]
        tr = 0.0
        for r in range(nk):
            tr = max(tr, SK[r, r])
        for r in range(nk):
            SK[r, r] += 1e-12 * tr + 1e-300
        if not cholesky(SK, LK):
            return False
        for k in range(nA):
            for r in range(nk):
                col_[r] = B[r, k]
            chol_solve(LK, col_, col_)
            for r in range(k, nA):
                s_ = 0.0
                for q_ in range(nk):
                    s_ += B[q_, r] * col_[q_]
                S[r, k] -= s_
    if not cholesky(S, LS):
        return False
    chol_solve(LS, tv, tv)
    col = 0
    for e in range(nz):
        lam[e] += tv[col]
        col += 1
    for j in range(nb):
        if wk.bact[j] > 0:
            mu_hi[j] = max(0.0, mu_hi[j] + tv[col])
            col += 1
        elif wk.bact[j] < 0:
            mu_lo[j] = max(0.0, mu_lo[j] + tv[col])
            col += 1
    return True


@njit(cache=True, inline="always", error_model="numpy")
def _feasibility(pb, wk):
    fe = 0.0
    for e in range(pb.Ceq.shape[0]):
        fe = max(fe, abs(wk.h[e]) * pb.sc_e[e])
    fb = 0.0
    for j in range(pb.Cbox.shape[0]):
        if np.isfinite(pb.hi[j]):
            fb = max(fb, max(0.0, wk.w[j] - pb.hi[j]) * pb.sc_b[j])
        if np.isfinite(pb.lo[j]):
            fb = max(fb, max(0.0, pb.lo[j] - wk.w[j]) * pb.sc_b[j])
    return fe, fb


# ---------------------------------------------------------------- the solver


@njit(cache=True, fastmath=FM, error_model="numpy")
def _assemble_cost(M, mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, Q, q, tmp, Mt):
    """Fold the a-only cost terms into ``½aᵀQa + qᵀa + c0``; returns c0.

    mass terms ``(w_k/2)(a − t_k)ᵀM(a − t_k)``, diagonal terms
    ``(w_k/2)Σ_i m_ki (a_i − t_ki)²`` and residual rows ``(w_r/2)(Ka1_r a + e1_r)²``.
    ``tmp``, ``Mt``: ``(nv,)`` scratch.
    """
    nv = M.shape[0]
    c0 = 0.0
    sig = 0.0
    for k in range(nv):
        q[k] = 0.0
        tmp[k] = 0.0
    for t in range(mass_w.shape[0]):
        wt = mass_w[t]
        if wt == 0.0:
            continue
        sig += wt
        for k in range(nv):
            tmp[k] += wt * mass_t[t, k]
        _matvec(M, mass_t[t], Mt)
        c0 += 0.5 * wt * _dot(mass_t[t], Mt)
    _matvec(M, tmp, Mt)
    for r in range(nv):
        q[r] = -Mt[r]
        for k in range(nv):
            Q[r, k] = sig * M[r, k]
    for t in range(diag_w.shape[0]):
        wt = diag_w[t]
        if wt == 0.0:
            continue
        for k in range(nv):
            wm = wt * diag_m[t, k]
            Q[k, k] += wm
            q[k] -= wm * diag_t[t, k]
            c0 += 0.5 * wm * diag_t[t, k] * diag_t[t, k]
    for r in range(Ka1.shape[0]):
        wr = wa[r]
        if wr == 0.0:
            continue
        er = e1[r]
        c0 += 0.5 * wr * er * er
        for i in range(nv):
            ki = wr * Ka1[r, i]
            if ki != 0.0:
                q[i] += ki * er
                for k in range(nv):
                    Q[i, k] += ki * Ka1[r, k]
    return c0


@njit(cache=True, fastmath=FM, error_model="numpy")
def _scales(pb, Bdir, rho, col, rho_e, rho_b, sc_e, sc_b):
    """Penalties ``ρ_k = ρ · n_kᵀ M⁻¹ n_k`` and violation scales ``‖M⁻¹ n_k‖`` (``col (nv,)``:
    scratch)."""
    nv = col.shape[0]
    Ceq = pb.Ceq
    for e in range(Ceq.shape[0] + Bdir.shape[0]):
        src = Ceq[e] if e < Ceq.shape[0] else Bdir[e - Ceq.shape[0]]
        for k in range(nv):
            col[k] = src[k]
        _m_solve(pb, col, col)
        r = rho * max(_dot(src, col), 1e-300)
        s = math.sqrt(_dot(col, col))
        if e < Ceq.shape[0]:
            rho_e[e] = r
            sc_e[e] = s
        else:
            rho_b[e - Ceq.shape[0]] = r
            sc_b[e - Ceq.shape[0]] = s


@njit(cache=True, inline="always", error_model="numpy")
def _same_pattern(wk, fact_state, fact_bact, have_factor):
    """True when the Hessian factor was built for the current constraint and box pattern."""
    if not have_factor:
        return False
    for i in range(wk.state.shape[0]):
        if wk.state[i] != fact_state[i] or wk.state[i] == STATE_CONE:
            return False
    for j in range(wk.bact.shape[0]):
        if wk.bact[j] != fact_bact[j]:
            return False
    return True


@njit(cache=True, inline="always", error_model="numpy")
def _save_pattern(wk, fact_state, fact_bact):
    for i in range(wk.state.shape[0]):
        fact_state[i] = wk.state[i]
    for j in range(wk.bact.shape[0]):
        fact_bact[j] = wk.bact[j]



@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _accel_scale(pb, c, q, a_free, tmp, alo):
    """The safeguard's acceleration scale ``max(1 + ‖M⁻¹(−c)‖ + ‖M⁻¹q‖, alo)``; leaves the free
    acceleration ``M⁻¹(−c)`` in ``a_free`` (``tmp``: scratch)."""
    for k in range(a_free.shape[0]):
        a_free[k] = -c[k]
        tmp[k] = q[k]
    _m_solve(pb, a_free, a_free)
    _m_solve(pb, tmp, tmp)
    return max(1.0 + math.sqrt(_dot(a_free, a_free)) + math.sqrt(_dot(tmp, tmp)), alo)


@njit(cache=True, error_model="numpy")
def _cold_start(a, a_free, lam, mu_lo, mu_hi):
    """Restart from the free acceleration ``a = M⁻¹(−c)`` with zero multipliers (safeguard)."""
    for k in range(a.shape[0]):
        a[k] = a_free[k]
    _fill(lam, 0.0)
    _fill(mu_lo, 0.0)
    _fill(mu_hi, 0.0)


@njit(cache=True, error_model="numpy")
def gdd_solve(M, Mrownnz, Mrowadr, Mcolind, qld, qldinv,
              c, J, aref, D, R, floss, efc_type, efc_id, con_dim, con_mu, con_fric, con_adr,
              actbuf, scales, costbuf, Kf2,
              a, lam, mu_lo, mu_hi, params, iparams,
              out_g, out_f, out_state, out_w, out_ctrl, stats, log, wsf, wsi):
    """Goal-directed dynamics at one state (GDD eq. 8) by an augmented Lagrangian.

    Minimizes over accelerations ``a (nv,)``::

        L(a) = ½ g(a)ᵀ M⁻¹ g(a) + ℓ(a)
               + Σ_e [λ_e h_e + ½ ρ_e h_e²]                      h = Ceq g   (= 0)
               + Σ_j ψ(w_j − hi_j, μ⁺_j) + ψ(lo_j − w_j, μ⁻_j)   w = Cbox g  (lo ≤ w ≤ hi)
        ℓ(a) = ½ aᵀ Q a + qᵀ a + c0 + ½ ‖Ka2 a + Kf2 f(a) + e2‖²   (row-weighted)

    with Gauss-Newton steps (Hessian ``Pᵀ S P + Q + K2ᵀK2``, exact inside each
    piece of the piecewise-quadratic objective, refactored only when the piece
    changes), an exact line search, and multiplier updates (second order, or
    ``λ += ρ h``, ``μ± = max(0, μ± + ρ t±)``) until the violation, in acceleration
    units ``‖M⁻¹ n_k‖·|t_k|``, is below tolerance.  Finally
    ``w = Bpinv g``, ``ctrl = clip((w − bias)/gain, ctrl_lo, ctrl_hi)``.

    Args:
      M (nv, nv), c (nv,): inertia and non-control force.
      Mrownnz, Mrowadr, Mcolind (nv,), (nv,), (nnz,) int, qld (nnz,), qldinv (nv,): the factor
        ``M = Lᵀ D L`` in MuJoCo's layout (``model.M_rownnz/M_rowadr/M_colind``,
        ``data.qLD``, ``data.qLDiagInv``: :func:`ldl_factor`), or empty ``qld``: then ``M``
        is factored here (dense triangle, :func:`ldl_dense`).
      J (nefc, nv), aref, D, R, floss (nefc,), efc_type, efc_id (nefc,): constraint rows.
      con_dim, con_mu, con_fric (ncon, 5), con_adr (ncon,): contact data (elliptic cones only).
      actbuf: the actuation, packed (``ActuationArrays.packed``; sizes ``iparams[IPAR_NZ,
        IPAR_NB, IPAR_NC]``): row-major Ceq (nz, nv), the rows whose product with g must
        vanish; Cbox (nb, nv), bounded actuator forces ``w = Cbox g``; Bdir (nb, nv), the
        generalized-force direction of each box row; Bpinv (nc, nv); then lo, hi (nb,)
        (±inf: no bound) and the control map gain, bias, ctrl_lo, ctrl_hi (nc,).
      scales (4, max(nz, nb)): rows ρ_e, ρ_b, sc_e, sc_b; computed here when
        ``iparams[IPAR_SCALES]`` is 1 or ``iparams[IPAR_SINCE_SCALES]`` reached
        ``iparams[IPAR_SCALE_INTERVAL]`` (both reset then; else the count goes up by one),
        otherwise used as given.
      costbuf: the cost, packed (``CostArrays.buffer``; sizes ``iparams[IPAR_KM, IPAR_KD,
        IPAR_M1, IPAR_M2]``): mass_w (km,), mass_t (km, nv); diag_w (kd,), diag_m, diag_t
        (kd, nv); Ka1 (m1, nv), e1, wa (m1,); Ka2 (m2, nv), e2, wf (m2,).
      Kf2 (m2, nefc): force part of the cost rows.
      a (nv,): initial guess in, solution out.  lam (nz,), mu_lo, mu_hi (nb,): multipliers in/out.
      params (PAR_NPAR,): penalty ρ, gradient tolerance (relative to max(1, ‖c‖, ‖g(a₀)‖)),
        feasibility tolerance (m/s²); iparams (IPAR_NIPAR,).
      out_g (nv,), out_f, out_state (nefc,), out_w, out_ctrl (nc,), stats (ST_NSTAT,),
      log (max_iter, LOG_NCOL): outputs.
      wsf (float64), wsi (int64): workspace, at least :func:`_ws_sizes` long (else nothing is
        done: status ``STATUS_WORKSPACE`` with the lengths in ``stats[ST_WS_*]``).  ``wsi``
        keeps the sparsity of Ceq/Cbox between calls (recomputed when
        ``iparams[IPAR_PATTERN]`` is 1: on a new workspace or new actuation arrays).
    """
    nv = M.shape[0]
    nefc = J.shape[0]
    nz = iparams[IPAR_NZ]
    nb = iparams[IPAR_NB]
    nc = iparams[IPAR_NC]
    o = 0
    Ceq, o = _take2(actbuf, o, nz, nv)
    Cbox, o = _take2(actbuf, o, nb, nv)
    Bdir, o = _take2(actbuf, o, nb, nv)
    Bpinv, o = _take2(actbuf, o, nc, nv)
    lo, o = _take(actbuf, o, nb)
    hi, o = _take(actbuf, o, nb)
    gain, o = _take(actbuf, o, nc)
    bias, o = _take(actbuf, o, nc)
    ctrl_lo, o = _take(actbuf, o, nc)
    ctrl_hi, o = _take(actbuf, o, nc)
    km = iparams[IPAR_KM]
    kd = iparams[IPAR_KD]
    m1 = iparams[IPAR_M1]
    m2 = iparams[IPAR_M2]
    mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, o = _cost_blocks(costbuf, km, kd, m1, nv)
    Ka2, o = _take2(costbuf, o, m2, nv)
    e2, o = _take(costbuf, o, m2)
    wf, o = _take(costbuf, o, m2)
    rho = params[PAR_PENALTY]
    tol_grad0 = params[PAR_TOL_GRAD] * max(1.0, math.sqrt(_dot(c, c)))
    tol_grad = tol_grad0
    tol_feas = params[PAR_TOL_FEAS]
    max_iter = iparams[IPAR_MAX_ITER]
    max_dual = iparams[IPAR_MAX_DUAL]
    exact_ls = iparams[IPAR_EXACT_LS]
    newton_dual = iparams[IPAR_NEWTON_DUAL]
    for k in range(ST_NSTAT):
        stats[k] = 0.0

    # ---- per-state setup: every array is a view of the caller's workspace (no allocation)
    ncone = 0
    for i in range(nefc):
        if efc_type[i] == _CNSTR_CONTACT_ELLIPTIC:
            ncone = nefc
    nf, ni = _ws_sizes(nv, nefc, nz, nb, m2, ncone)
    if wsf.shape[0] < nf or wsi.shape[0] < ni:
        stats[ST_WS_FLOAT] = nf
        stats[ST_WS_INT] = ni
        stats[ST_STATUS] = STATUS_WORKSPACE
        return
    # int part; the Ceq/Cbox sparsity patterns come first (kept between calls)
    oi = 0
    ce_idx, oi = _take2(wsi, oi, nz, nv)
    ce_nnz, oi = _take(wsi, oi, nz)
    cb_idx, oi = _take2(wsi, oi, nb, nv)
    cb_nnz, oi = _take(wsi, oi, nb)
    kind, oi = _take(wsi, oi, nefc)
    cdim, oi = _take(wsi, oi, nefc)
    jnz, oi = _take2(wsi, oi, nefc, nv)
    jnnz, oi = _take(wsi, oi, nefc)
    w_state, oi = _take(wsi, oi, nefc)
    w_kink, oi = _take(wsi, oi, nefc)
    w_release, oi = _take(wsi, oi, nefc)
    w_bact, oi = _take(wsi, oi, nb)
    w_nk, oi = _take(wsi, oi, 1)
    l_rowstate, oi = _take(wsi, oi, nefc)
    l_evrow, oi = _take(wsi, oi, 2 * nefc + 1)
    l_evtype, oi = _take(wsi, oi, 2 * nefc + 1)
    l_bhi, oi = _take(wsi, oi, nb)
    l_blo, oi = _take(wsi, oi, nb)
    fact_state, oi = _take(wsi, oi, nefc)
    fact_bact, oi = _take(wsi, oi, nb)
    l_order, oi = _take(wsi, oi, 2 * nefc + 1)
    w_kidx, oi = _take(wsi, oi, nefc)
    w_scri, oi = _take(wsi, oi, nefc + nb)
    prev_kink, oi = _take(wsi, oi, nefc)
    m_rn, oi = _take(wsi, oi, nv)
    m_ra, oi = _take(wsi, oi, nv)
    m_ci, oi = _take(wsi, oi, nv * (nv + 1) // 2)
    # float part
    of = 0
    cmu, of = _take(wsf, of, nefc)
    cfric, of = _take2(wsf, of, nefc, 5)
    m_q, of = _take(wsf, of, nv * (nv + 1) // 2)
    m_di, of = _take(wsf, of, nv)
    Q, of = _take2(wsf, of, nv, nv)
    q, of = _take(wsf, of, nv)
    Ka2s, of = _take2(wsf, of, m2, nv)
    Kf2s, of = _take2(wsf, of, m2, nefc)
    e2s, of = _take(wsf, of, m2)
    w_jar, of = _take(wsf, of, nefc)
    w_f, of = _take(wsf, of, nefc)
    w_hdiag, of = _take(wsf, of, nefc)
    w_hcone, of = _take2(wsf, of, ncone, 36)
    w_g, of = _take(wsf, of, nv)
    w_y, of = _take(wsf, of, nv)
    w_h, of = _take(wsf, of, nz)
    w_w, of = _take(wsf, of, nb)
    w_nu, of = _take(wsf, of, nb)
    w_r2, of = _take(wsf, of, m2)
    w_gradg, of = _take(wsf, of, nv)
    w_grad, of = _take(wsf, of, nv)
    w_tmpnv, of = _take(wsf, of, nv)
    w_Qa, of = _take(wsf, of, nv)
    w_tmpefc, of = _take(wsf, of, nefc)
    w_tmpefc2, of = _take(wsf, of, nefc)
    w_K2, of = _take2(wsf, of, m2, nv)
    w_P, of = _take2(wsf, of, nv, nv)
    w_Hm, of = _take2(wsf, of, nv, nv)
    w_LH, of = _take2(wsf, of, nv, nv)
    w_Z, of = _take2(wsf, of, nv, nv + nz + nb + m2)
    l_g1, of = _take(wsf, of, nv)
    l_y1, of = _take(wsf, of, nv)
    l_yk, of = _take(wsf, of, nv)
    l_hk, of = _take(wsf, of, nz)
    l_h1, of = _take(wsf, of, nz)
    l_wk, of = _take(wsf, of, nb)
    l_w1, of = _take(wsf, of, nb)
    l_rk, of = _take(wsf, of, m2)
    l_r1, of = _take(wsf, of, m2)
    l_dfd, of = _take(wsf, of, nefc)
    l_tmpnv, of = _take(wsf, of, nv)
    l_evalpha, of = _take(wsf, of, 2 * nefc + 1)
    dvec, of = _take(wsf, of, nv)
    Jd, of = _take(wsf, of, nefc)
    c_tmp, of = _take(wsf, of, nv)
    c_Mt, of = _take(wsf, of, nv)
    w_nuk, of = _take(wsf, of, nefc)
    w_scr, of = _take(wsf, of, _scratch_size(nv, nefc, nz, nb, m2))
    if of != nf or oi != ni:  # pragma: no cover - _ws_sizes out of sync with the carving
        stats[ST_STATUS] = STATUS_NUMERICAL_ERROR
        return
    w_hcone3 = w_hcone.reshape((ncone, 6, 6))
    for i in range(nefc):
        w_state[i] = 0
        w_kink[i] = 0
        w_release[i] = 0
        w_hdiag[i] = 0.0
        fact_state[i] = -1
        prev_kink[i] = 0
    for j in range(nb):
        w_bact[j] = 0
        fact_bact[j] = 0
    w_nk[0] = 0
    for i in range(ncone * 36):
        w_hcone[i // 36, i % 36] = 0.0
    for r in range(m2):
        for k in range(nv):
            w_K2[r, k] = 0.0

    row_kinds(efc_type, efc_id, con_dim, con_mu, con_fric, con_adr, kind, cdim, cmu, cfric)
    if ncone > 0:
        exact_ls = 0
    if qld.shape[0] > 0:  # MuJoCo's factor of M (qLD, after mj_fwdPosition)
        Lrn, Lra, Lci, Lq, Ldi = Mrownnz, Mrowadr, Mcolind, qld, qldinv
    else:
        Lrn, Lra, Lci, Lq, Ldi = m_rn, m_ra, m_ci, m_q, m_di
        if not ldl_dense(M, Lrn, Lra, Lci, Lq, Ldi):
            stats[ST_STATUS] = STATUS_NUMERICAL_ERROR
            return
    rho_e = scales[0, :nz]
    rho_b = scales[1, :nb]
    sc_e = scales[2, :nz]
    sc_b = scales[3, :nb]
    if iparams[IPAR_PATTERN] == 1:
        _sparse_rows(Ceq, ce_idx, ce_nnz)
        _sparse_rows(Cbox, cb_idx, cb_nnz)
        iparams[IPAR_PATTERN] = 0
    # nonzero columns of each row of J (shared by the rows of an elliptic contact)
    i = 0
    while i < nefc:
        if kind[i] != ROW_CONE:  # one row: branch-free compaction
            cnt = 0
            for k in range(nv):
                jnz[i, cnt] = k
                cnt += J[i, k] != 0.0
            jnnz[i] = cnt
            i += 1
            continue
        rows = cdim[i]
        cnt = 0
        for k in range(nv):
            nzk = False
            for r in range(rows):
                if J[i + r, k] != 0.0:
                    nzk = True
            if nzk:
                jnz[i, cnt] = k
                cnt += 1
        for r in range(rows):
            jnnz[i + r] = cnt
            for p in range(cnt):
                jnz[i + r, p] = jnz[i, p]
        i += rows
    # cost
    c0 = _assemble_cost(M, mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, Q, q, c_tmp, c_Mt)
    for r in range(m2):
        sw = math.sqrt(wf[r])
        for k in range(nv):
            Ka2s[r, k] = sw * Ka2[r, k]
        for i in range(nefc):
            Kf2s[r, i] = sw * Kf2[r, i]
        e2s[r] = sw * e2[r]
    pb = Prob(M, Lrn, Lra, Lci, Lq, Ldi, c, J, aref, D, R, floss, kind, cdim, cmu, cfric, jnz, jnnz,
              Ceq, ce_idx, ce_nnz, Cbox, cb_idx, cb_nnz, lo, hi, rho_e, rho_b, sc_e, sc_b,
              Q, q, Ka2s, Kf2s, e2s)
    wk = Work(w_jar, w_f, w_state, w_hdiag, w_hcone3, w_g, w_y, w_h, w_w, w_nu, w_bact, w_r2,
              w_gradg, w_grad, w_tmpnv, w_tmpefc, w_tmpefc2, w_K2, w_P, w_Hm, w_LH,
              w_kink, w_release, w_nk, w_Z, w_kidx, w_nuk, w_scr, w_scri, w_Qa)
    ls = (l_rowstate, l_g1, l_y1, l_yk, l_hk, l_h1, l_wk, l_w1, l_rk, l_r1, l_dfd, l_tmpnv,
          l_evalpha, l_evrow, l_evtype, l_bhi, l_blo, l_order)
    have_factor = False
    if iparams[IPAR_SCALES] == 1 or iparams[IPAR_SINCE_SCALES] >= iparams[IPAR_SCALE_INTERVAL]:
        _scales(pb, Bdir, rho, w_tmpnv, scales[0], scales[1], scales[2], scales[3])
        iparams[IPAR_SCALES] = 0
        iparams[IPAR_SINCE_SCALES] = 0
    else:
        iparams[IPAR_SINCE_SCALES] += 1

    # ---- safeguard (IPAR_SAFEGUARD): a scale of reasonable accelerations, ``ascale`` = the
    # largest of 1 + ‖M⁻¹(−c)‖ + ‖M⁻¹q‖ (the free acceleration and the cost's pull), 1 + |aref_i|
    # (constraint reference accelerations) and 1 + |e2_r| (cost targets).  The last two alone
    # are a lower bound ``alo``: a test that passes with it passes with ``ascale``, so the two
    # solves with M are only made when a test does not pass with the bound (or to start cold).
    a_free = c_Mt
    alo = 1.0
    for i in range(nefc):
        alo = max(alo, 1.0 + abs(aref[i]))
    for r in range(m2):
        alo = max(alo, 1.0 + abs(e2s[r]))
    ascale = -1.0  # not computed yet
    safeguard = iparams[IPAR_SAFEGUARD] == 1
    nsafe = 0
    cold = False  # the current attempt started from the free acceleration
    if safeguard:
        an = math.sqrt(_dot(a, a))
        if not an <= GUESS_LIMIT * alo:
            ascale = _accel_scale(pb, c, q, a_free, c_tmp, alo)
            if not an <= GUESS_LIMIT * ascale:  # non-finite or absurd initial guess: start cold
                nsafe += 1
                cold = True
                _cold_start(a, a_free, lam, mu_lo, mu_hi)
    status = STATUS_CONVERGED
    iters = 0
    duals = 0
    nfact = 0
    events_total = 0
    ls_evals = 0
    gnorm = 0.0
    phi = 0.0
    ell = 0.0
    for attempt in range(2):
        if attempt == 1:
            # the first attempt failed (non-finite or huge step, a numerical failure, or no
            # convergence from a non-neutral guess): restart from the free acceleration with
            # fresh multipliers, no KKT first step
            nsafe += 1
            cold = True
            if ascale < 0.0:
                ascale = _accel_scale(pb, c, q, a_free, c_tmp, alo)
            _cold_start(a, a_free, lam, mu_lo, mu_hi)
            for i in range(nefc):
                w_kink[i] = 0
                w_release[i] = 0
                fact_state[i] = -1
                prev_kink[i] = 0
            have_factor = False
            newton_dual_first = False
        else:
            newton_dual_first = newton_dual == 1
        status = STATUS_CONVERGED
        phi, ell = _evaluate(pb, wk, a, lam, mu_lo, mu_hi)
        if not (math.isfinite(phi) and _all_finite(wk.grad)):
            status = STATUS_NUMERICAL_ERROR
            if safeguard and attempt == 0:
                continue
            break

        status = STATUS_CONVERGED
        iters = 0
        duals = 0
        nfact = 0
        events_total = 0
        ls_evals = 0
        gnorm = math.sqrt(_dot(wk.grad, wk.grad))
        tol_grad = max(tol_grad0, params[PAR_TOL_GRAD] * math.sqrt(_dot(wk.g, wk.g)))
        stall_rounds = 0
        kkt_first = newton_dual_first
        done = False
        while not done:
            # ---- inner Gauss-Newton iterations on the augmented Lagrangian
            stalled = False
            exact = False  # the last step landed on the exact minimizer of its piece / face
            releases = 0
            just_released = False
            kink_gnorm = 0.0
            probed = False
            while True:
                same = _same_pattern(wk, fact_state, fact_bact, have_factor)
                for i in range(nefc):
                    if wk.kink[i] != prev_kink[i]:
                        exact = False
                        break
                factored = 0
                if not same:
                    if not _build_hessian(pb, wk):
                        status = STATUS_NUMERICAL_ERROR
                        done = True
                        break
                    nfact += 1
                    factored = 1
                    have_factor = True
                    _save_pattern(wk, fact_state, fact_bact)
                nk = wk.nk[0]
                if nk == 0:
                    gnorm = math.sqrt(_dot(wk.grad, wk.grad))
                    if gnorm <= tol_grad or (same and exact):
                        break
                    if kkt_first:
                        # first step of the solve: update the multipliers together with it (KKT
                        # step of the current piece) when the constraints are violated
                        kkt_first = False
                        fe, fb = _feasibility(pb, wk)
                        if (fe > tol_feas or fb > tol_feas) and duals < max_dual and \
                                _dual_newton(pb, wk, _pinned(wk), lam, mu_lo, mu_hi, True):
                            duals += 1
                            if factored == 1:  # wk.P was just built at this a
                                phi = _reevaluate_multipliers_piece(pb, wk, a, lam, mu_lo, mu_hi,
                                                                    ell)
                            else:
                                phi = _reevaluate_multipliers(pb, wk, a, lam, mu_lo, mu_hi, ell)
                            continue
                    for k in range(nv):
                        dvec[k] = -wk.grad[k]
                    chol_solve(wk.LH, dvec, dvec)
                    if math.sqrt(_dot(dvec, dvec)) <= 1e-14 * (1.0 + math.sqrt(_dot(a, a))):
                        break  # roundoff floor
                else:
                    kidx = _pinned(wk)
                    nu = wk.nuk[:nk]
                    gnorm = _face_step(pb, wk, kidx, dvec, nu)
                    tiny = math.sqrt(_dot(dvec, dvec)) <= 1e-14 * (1.0 + math.sqrt(_dot(a, a)))
                    if gnorm <= tol_grad or (same and exact) or tiny:
                        if releases > nefc or \
                                not _release(pb, wk, kidx, nu, max(tol_grad, 10.0 * gnorm)):
                            break  # no side of any pinned row descends: a kink local minimum
                        releases += 1
                        kink_gnorm = gnorm
                        just_released = True
                        exact = False
                        phi, ell = _evaluate(pb, wk, a, lam, mu_lo, mu_hi)
                        continue
                if iters >= max_iter:
                    status = STATUS_MAX_ITERATIONS
                    done = True
                    break
                dphi0 = _dot(wk.grad, dvec)
                if not dphi0 < 0.0:
                    stalled = True
                    break
                _matvec(J, dvec, Jd)
                for i in range(nefc):
                    prev_kink[i] = wk.kink[i]
                    if wk.kink[i] != 0:
                        Jd[i] = 0.0
                nev = 0
                if exact_ls == 1:
                    alpha, nev = _linesearch_sweep(pb, wk, a, dvec, Jd, lam, mu_lo, mu_hi, ls)
                    events_total += nev
                    ls_evals += 1
                else:
                    alpha, ne_ = _linesearch_1d(pb, a, dvec, Jd, dphi0, lam, mu_lo, mu_hi, wk.scr,
                                                wk.scri)
                    ls_evals += ne_
                    if alpha * math.sqrt(_dot(dvec, dvec)) <= 1e-12 * (1.0 + math.sqrt(_dot(a, a))) \
                            and not probed:
                        # blocked by a kink (e.g. an elliptic zone boundary): rebuild the Newton
                        # step with the states the direction moves into, once
                        probed = True
                        _probe_states(pb, wk, a, dvec, Jd)
                        continue
                steplen = alpha * math.sqrt(_dot(dvec, dvec))
                if safeguard and not steplen <= STEP_LIMIT * alo:
                    if ascale < 0.0:
                        ascale = _accel_scale(pb, c, q, a_free, c_tmp, alo)
                    if not steplen <= STEP_LIMIT * ascale:
                        status = STATUS_NUMERICAL_ERROR  # a non-finite or absurd step: restart
                        done = True
                        break
                iters += 1
                phi_old = phi
                if alpha > 0.0:
                    for k in range(nv):
                        a[k] += alpha * dvec[k]
                    if exact_ls == 1 and nev == 0 and nk == 0:
                        phi, ell = _evaluate_step(pb, wk, a, alpha, Jd, l_g1, l_y1, l_tmpnv,
                                                  lam, mu_lo, mu_hi)
                    else:
                        phi, ell = _evaluate(pb, wk, a, lam, mu_lo, mu_hi)
                row = iters - 1
                if row < log.shape[0]:
                    nact = 0
                    for i in range(nefc):
                        if wk.state[i] != STATE_SATISFIED:
                            nact += 1
                    log[row, LOG_OBJECTIVE] = phi + c0
                    log[row, LOG_GRAD] = math.sqrt(_dot(wk.grad, wk.grad))
                    log[row, LOG_STEP] = alpha * math.sqrt(_dot(dvec, dvec))
                    log[row, LOG_ALPHA] = alpha
                    log[row, LOG_EVENTS] = nev
                    log[row, LOG_NACTIVE] = nact
                    log[row, LOG_FACTORED] = factored
                    log[row, LOG_OUTER] = duals
                if not alpha > 0.0:
                    if just_released:
                        gnorm = kink_gnorm  # the released side does not descend either: kink minimum
                    else:
                        stalled = True
                    break
                just_released = False
                probed = False
                if not (math.isfinite(phi) and _all_finite(wk.grad)):
                    status = STATUS_NUMERICAL_ERROR
                    done = True
                    break
                exact = exact_ls == 1 and alpha == 1.0 and nev == 0
                if (not exact) and phi >= phi_old and \
                        alpha * math.sqrt(_dot(dvec, dvec)) <= 1e-13 * (1.0 + math.sqrt(_dot(a, a))):
                    stalled = True
                    break
            if done:
                break
            fe, fb = _feasibility(pb, wk)
            if fe <= tol_feas and fb <= tol_feas:
                if stalled and gnorm > tol_grad:
                    status = STATUS_STALLED
                break
            if stalled:
                stall_rounds += 1
                if stall_rounds >= 2:
                    status = STATUS_STALLED  # multiplier updates cannot help a stuck inner solve
                    break
            if duals >= max_dual:
                status = STATUS_MAX_DUAL_UPDATES
                break
            # ---- multiplier update
            updated = False
            if newton_dual == 1:
                if not _same_pattern(wk, fact_state, fact_bact, have_factor):
                    if not _build_hessian(pb, wk):
                        status = STATUS_NUMERICAL_ERROR
                        break
                    nfact += 1
                    have_factor = True
                    _save_pattern(wk, fact_state, fact_bact)
                updated = _dual_newton(pb, wk, _pinned(wk), lam, mu_lo, mu_hi, False)
            if not updated:
                for e in range(nz):
                    lam[e] += rho_e[e] * wk.h[e]
                for j in range(nb):
                    if np.isfinite(hi[j]):
                        mu_hi[j] = max(0.0, mu_hi[j] + rho_b[j] * (wk.w[j] - hi[j]))
                    if np.isfinite(lo[j]):
                        mu_lo[j] = max(0.0, mu_lo[j] + rho_b[j] * (lo[j] - wk.w[j]))
            duals += 1
            phi = _reevaluate_multipliers(pb, wk, a, lam, mu_lo, mu_hi, ell)

        if status != STATUS_NUMERICAL_ERROR:
            an = math.sqrt(_dot(a, a))
            if safeguard and not an <= RESULT_LIMIT * alo:
                if ascale < 0.0:
                    ascale = _accel_scale(pb, c, q, a_free, c_tmp, alo)
                if not an <= RESULT_LIMIT * ascale:
                    status = STATUS_NUMERICAL_ERROR
        if not safeguard or status == STATUS_CONVERGED:
            break
        if status != STATUS_NUMERICAL_ERROR and cold:
            break  # a genuine non-convergence from the neutral start: report it

    fe, fb = _feasibility(pb, wk)
    for k in range(nv):
        out_g[k] = wk.g[k]
    for i in range(nefc):
        out_f[i] = wk.f[i]
        out_state[i] = wk.state[i]
    # controls
    clamped = 0
    _matvec(Bpinv, wk.g, out_w)
    for j in range(out_w.shape[0]):
        u = (out_w[j] - bias[j]) / gain[j]
        uc = min(max(u, ctrl_lo[j]), ctrl_hi[j])
        if abs(uc - u) > 1e-12 * (1.0 + abs(u)):
            clamped += 1
        out_ctrl[j] = uc
    stats[ST_STATUS] = status
    stats[ST_ITER] = iters
    stats[ST_DUAL] = duals
    stats[ST_FACT] = nfact
    stats[ST_GRAD] = gnorm
    stats[ST_FEAS_EQ] = fe
    stats[ST_FEAS_BOX] = fb
    stats[ST_OBJECTIVE] = phi + c0
    stats[ST_COST] = ell + c0
    stats[ST_EVENTS] = events_total
    stats[ST_LS_EVALS] = ls_evals
    stats[ST_CLAMPED] = clamped
    stats[ST_SAFEGUARD] = nsafe


@intrinsic
def _unmanaged(typingctx, arr):
    """The array ``arr`` without its reference-counted owner (meminfo set to NULL).

    numba reference-counts every array view it creates and every array it passes to a
    non-inlined call (atomic increments and decrements: about a fifth of the compiled
    step's ``perf`` samples).  Views of an array without an owner are not
    counted.  Only for arguments of an entry point: the caller keeps them alive for the
    whole call, and nothing made from them may outlive it.
    """
    sig = arr(arr)

    def codegen(context, builder, signature, args):
        src = context.make_array(arr)(context, builder, value=args[0])
        out = context.make_array(arr)(context, builder)
        context.populate_array(out, data=src.data, shape=src.shape, strides=src.strides,
                               itemsize=src.itemsize, meminfo=None)
        return out._getvalue()

    return sig, codegen


# ---------------------------------------------------------------- one compiled step (fast path)
#
# gdd_fast builds the problem (dense M, c) and the built-in cost terms straight from
# MuJoCo's arrays — the Jacobians from cdof / cdof_dot / cvel, as mj_jac, mj_jacDot and
# mj_jacSubtreeCom compute them — and then runs gdd_solve, all in one compiled call.

# header of the static int array ``si`` (model structure and cost plan)
SI_NBODY = 0
SI_NJNT = 1
SI_NTERM = 2
SI_PARENT = 3  # offsets of: body_parentid
SI_ROOT = 4  # body_rootid
SI_DOFADR = 5  # body_dofadr
SI_DOFNUM = 6  # body_dofnum
SI_DOFPARENT = 7  # dof_parentid
SI_MROWNNZ = 8  # M_rownnz
SI_MROWADR = 9  # M_rowadr
SI_MCOLIND = 10  # M_colind
SI_JTYPE = 11  # jnt_type
SI_JQPOS = 12  # jnt_qposadr
SI_JDOF = 13  # jnt_dofadr
SI_TERMS = 14  # the term table (nterm, TERM_NCOL)
SI_XFRC = 15  # 1: check xfrc_applied
SI_NHEAD = 16

# columns of the term table
TC_CODE = 0
TC_SLOT = 1  # index among the mass terms / diagonal terms / residual rows (first row)
TC_BODY = 2
TC_SITE = 3  # site id, or -1 (body frame origin)
TC_LIST = 4  # offset in si of the subtree body list (centre of mass)
TC_COUNT = 5  # its length
TC_PW = 6  # parameter-table index of the term's weight array [w_eff, ...]
TC_PT = 7  # parameter-table index of the target array
TC_PX = 8  # parameter-table index of a third array (masses of the subtree list / kd gains)
TERM_NCOL = 9

# term codes
TERM_FRAME = 1  # end effector: 3 rows at a site / body origin with a spring target
TERM_COM = 2  # centre of mass of a subtree: 3 rows with a spring target
TERM_DAMPING = 3  # mass metric, target −βv  (weight array: [w, β])
TERM_MASS_FIXED = 4  # mass metric, fixed target (nv,)
TERM_MASS_PD = 5  # mass metric, PD target kp⊙(qref ⊖ q) − kd⊙v
TERM_DIAG_FIXED = 6  # diagonal metric (mask), fixed target
TERM_DIAG_PD = 7  # diagonal metric (mask), PD target

# spring target array layout: goal (3), k, b, cap (0: none), axis mask (3), offset a0 (3)
SPRING_LEN = 12

# offsets of MuJoCo's fixed-size arrays in the data span (``doff``)
DO_M = 0
DO_QPOS = 1
DO_QVEL = 2
DO_BIAS = 3
DO_PASSIVE = 4
DO_APPLIED = 5
DO_XFRC = 6
DO_CDOF = 7
DO_CDOFDOT = 8
DO_CVEL = 9
DO_SUBCOM = 10
DO_XIPOS = 11
DO_XPOS = 12
DO_SITEXPOS = 13
DO_QLD = 14  # MuJoCo's factor of M (M_rownnz/M_rowadr/M_colind layout) and 1/D
DO_QLDINV = 15
DO_N = 16

_CHAIN_NONE = -1


@njit(cache=True, fastmath=FM, error_model="numpy")
def _chain_body(si, b):
    """First body from ``b`` toward the root that has dofs (0: welded to the world)."""
    par = si[SI_PARENT]
    num = si[SI_DOFNUM]
    while b > 0 and si[num + b] == 0:
        b = si[par + b]
    return b


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_point_jac(si, span, doff, b, p0, p1, p2, scale, Jr, r0):
    """``Jr[r0:r0+3] += scale · J_p(point, body b)`` (mj_jac's translational part from cdof)."""
    b = _chain_body(si, b)
    if b == 0:
        return
    root = si[si[SI_ROOT] + b]
    oc = doff[DO_SUBCOM] + 3 * root
    x0 = p0 - span[oc]
    x1 = p1 - span[oc + 1]
    x2 = p2 - span[oc + 2]
    i = si[si[SI_DOFADR] + b] + si[si[SI_DOFNUM] + b] - 1
    dp = si[SI_DOFPARENT]
    cd = doff[DO_CDOF]
    while i >= 0:
        o = cd + 6 * i
        w0 = span[o]
        w1 = span[o + 1]
        w2 = span[o + 2]
        Jr[r0, i] += scale * (span[o + 3] + w1 * x2 - w2 * x1)
        Jr[r0 + 1, i] += scale * (span[o + 4] + w2 * x0 - w0 * x2)
        Jr[r0 + 2, i] += scale * (span[o + 5] + w0 * x1 - w1 * x0)
        i = si[dp + i]


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_point_bias(si, span, doff, b, p0, p1, p2, scale, out, o0):
    """``out[o0:o0+3] += scale · J̇_p v`` at a point of body b (acceleration at a = 0), from
    cdof_dot and cvel: ``a_lin + α × r + ω × (v_lin + ω × r)`` with ``r`` from the subtree com."""
    bc = _chain_body(si, b)
    if bc == 0:
        return
    root = si[si[SI_ROOT] + bc]
    oc = doff[DO_SUBCOM] + 3 * root
    r0 = p0 - span[oc]
    r1 = p1 - span[oc + 1]
    r2 = p2 - span[oc + 2]
    acc0 = 0.0
    acc1 = 0.0
    acc2 = 0.0
    acc3 = 0.0
    acc4 = 0.0
    acc5 = 0.0
    i = si[si[SI_DOFADR] + bc] + si[si[SI_DOFNUM] + bc] - 1
    dp = si[SI_DOFPARENT]
    cd = doff[DO_CDOFDOT]
    qv = doff[DO_QVEL]
    while i >= 0:
        vi = span[qv + i]
        o = cd + 6 * i
        acc0 += span[o] * vi
        acc1 += span[o + 1] * vi
        acc2 += span[o + 2] * vi
        acc3 += span[o + 3] * vi
        acc4 += span[o + 4] * vi
        acc5 += span[o + 5] * vi
        i = si[dp + i]
    ov = doff[DO_CVEL] + 6 * b
    w0 = span[ov]
    w1 = span[ov + 1]
    w2 = span[ov + 2]
    v0 = span[ov + 3] + w1 * r2 - w2 * r1
    v1 = span[ov + 4] + w2 * r0 - w0 * r2
    v2 = span[ov + 5] + w0 * r1 - w1 * r0
    out[o0] += scale * (acc3 + acc1 * r2 - acc2 * r1 + w1 * v2 - w2 * v1)
    out[o0 + 1] += scale * (acc4 + acc2 * r0 - acc0 * r2 + w2 * v0 - w0 * v2)
    out[o0 + 2] += scale * (acc5 + acc0 * r1 - acc1 * r0 + w0 * v1 - w1 * v0)


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_com_jac(si, span, doff, comb, lo, dofw, Jr, r0):
    """``Jr[r0:r0+3] += J_c``: the Jacobian of a subtree's centre of mass, one pass over the dofs.

    Dof i moves the part of the subtree below its body rigidly, so (``mj_jacSubtreeCom``)
    ``J_c[:, i] = w_i (cdof_lin,i + cdof_ang,i × (x_i − c_root))`` with ``x_i`` the centre of
    mass of that part and ``w_i`` its share of the subtree's mass.  ``comb[lo + i]``: the body
    whose ``subtree_com`` is ``x_i`` (the dof's own body inside the subtree, the subtree's root
    for the dofs above it, −1 for dofs that do not move it); ``dofw[i] = w_i``.
    """
    nv = Jr.shape[1]
    cd = doff[DO_CDOF]
    osc = doff[DO_SUBCOM]
    rt = si[SI_ROOT]
    for i in range(nv):
        b = comb[lo + i]
        if b < 0:
            continue
        w = dofw[i]
        ox = osc + 3 * b
        oc = osc + 3 * si[rt + b]
        x0 = span[ox] - span[oc]
        x1 = span[ox + 1] - span[oc + 1]
        x2 = span[ox + 2] - span[oc + 2]
        o = cd + 6 * i
        w0 = span[o]
        w1 = span[o + 1]
        w2 = span[o + 2]
        Jr[r0, i] += w * (span[o + 3] + w1 * x2 - w2 * x1)
        Jr[r0 + 1, i] += w * (span[o + 4] + w2 * x0 - w0 * x2)
        Jr[r0 + 2, i] += w * (span[o + 5] + w0 * x1 - w1 * x0)


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_com_bias(si, span, doff, bodies, lo, cnt, frac, out, o0, cacc):
    """``out[o0:o0+3] += J̇_c v = Σ_k frac_k J̇(x_b) v`` over the bodies ``b = bodies[lo + k]``.

    One pass down the tree gives every body's spatial acceleration at ``a = 0`` (com frame,
    ``cacc_b = cacc_parent + Σ_{dofs i of b} cdof_dot_i v_i``, the recursion of
    ``mj_rnePostConstraint`` without ``qacc`` and gravity); body b's centre of mass then has
    the classical acceleration ``a_lin + α × r + ω × (v_lin + ω × r)``, ``r = x_b − c_root``.
    ``cacc (≥ 6 nbody,)``: scratch.  ``frac``: the bodies' shares of the subtree's mass.
    """
    nbody = si[SI_NBODY]
    par = si[SI_PARENT]
    da = si[SI_DOFADR]
    dn = si[SI_DOFNUM]
    cd = doff[DO_CDOFDOT]
    qv = doff[DO_QVEL]
    for c in range(6):
        cacc[c] = 0.0
    for b in range(1, nbody):
        p = si[par + b]
        for c in range(6):
            cacc[6 * b + c] = cacc[6 * p + c]
        adr = si[da + b]
        for i in range(adr, adr + si[dn + b]):
            vi = span[qv + i]
            o = cd + 6 * i
            for c in range(6):
                cacc[6 * b + c] += span[o + c] * vi
    osc = doff[DO_SUBCOM]
    oxi = doff[DO_XIPOS]
    ocv = doff[DO_CVEL]
    rt = si[SI_ROOT]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    for k in range(cnt):
        b = bodies[lo + k]
        oc = osc + 3 * si[rt + b]
        r0 = span[oxi + 3 * b] - span[oc]
        r1 = span[oxi + 3 * b + 1] - span[oc + 1]
        r2 = span[oxi + 3 * b + 2] - span[oc + 2]
        ov = ocv + 6 * b
        w0 = span[ov]
        w1 = span[ov + 1]
        w2 = span[ov + 2]
        v0 = span[ov + 3] + w1 * r2 - w2 * r1
        v1 = span[ov + 4] + w2 * r0 - w0 * r2
        v2 = span[ov + 5] + w0 * r1 - w1 * r0
        a = 6 * b
        f = frac[k]
        s0 += f * (cacc[a + 3] + cacc[a + 1] * r2 - cacc[a + 2] * r1 + w1 * v2 - w2 * v1)
        s1 += f * (cacc[a + 4] + cacc[a + 2] * r0 - cacc[a] * r2 + w2 * v0 - w0 * v2)
        s2 += f * (cacc[a + 5] + cacc[a] * r1 - cacc[a + 1] * r0 + w0 * v1 - w1 * v0)
    out[o0] += s0
    out[o0 + 1] += s1
    out[o0 + 2] += s2


@njit(cache=True, fastmath=FM, error_model="numpy")
def _add_body_ft(si, span, doff, b, f, fo, c):
    """``c −= J_p(xipos_b)ᵀ force + J_r(b)ᵀ torque`` for ``f[fo:fo+6] = (force, torque)`` (mj_applyFT)."""
    bc = _chain_body(si, b)
    if bc == 0:
        return
    root = si[si[SI_ROOT] + bc]
    oc = doff[DO_SUBCOM] + 3 * root
    ox = doff[DO_XIPOS] + 3 * b
    x0 = span[ox] - span[oc]
    x1 = span[ox + 1] - span[oc + 1]
    x2 = span[ox + 2] - span[oc + 2]
    i = si[si[SI_DOFADR] + bc] + si[si[SI_DOFNUM] + bc] - 1
    dp = si[SI_DOFPARENT]
    cd = doff[DO_CDOF]
    while i >= 0:
        o = cd + 6 * i
        w0 = span[o]
        w1 = span[o + 1]
        w2 = span[o + 2]
        jp0 = span[o + 3] + w1 * x2 - w2 * x1
        jp1 = span[o + 4] + w2 * x0 - w0 * x2
        jp2 = span[o + 5] + w0 * x1 - w1 * x0
        c[i] -= (jp0 * f[fo] + jp1 * f[fo + 1] + jp2 * f[fo + 2]
                 + w0 * f[fo + 3] + w1 * f[fo + 4] + w2 * f[fo + 5])
        i = si[dp + i]


@njit(cache=True, fastmath=FM, error_model="numpy")
def sub_quat(qa0, qa1, qa2, qa3, qb0, qb1, qb2, qb3, out, o):
    """``out[o:o+3]``: rotation vector ``res`` with ``qb · quat(res) = qa`` (mju_subQuat)."""
    # qdif = conj(qb) * qa
    w = qb0 * qa0 + qb1 * qa1 + qb2 * qa2 + qb3 * qa3
    x = qb0 * qa1 - qb1 * qa0 - qb2 * qa3 + qb3 * qa2
    y = qb0 * qa2 + qb1 * qa3 - qb2 * qa0 - qb3 * qa1
    z = qb0 * qa3 - qb1 * qa2 + qb2 * qa1 - qb3 * qa0
    s = math.sqrt(x * x + y * y + z * z)
    if s < 1e-15:
        out[o] = 0.0
        out[o + 1] = 0.0
        out[o + 2] = 0.0
        return
    speed = 2.0 * math.atan2(s, w)
    if speed > math.pi:
        speed -= 2.0 * math.pi
    out[o] = x / s * speed
    out[o + 1] = y / s * speed
    out[o + 2] = z / s * speed


@njit(cache=True, fastmath=FM, error_model="numpy")
def differentiate_pos(si, qpos, qo, qref, out):
    """``out (nv,) = qref ⊖ qpos`` (mj_differentiatePos with dt = 1); ``qpos[qo:]`` is read."""
    nj = si[SI_NJNT]
    jt = si[SI_JTYPE]
    jq = si[SI_JQPOS]
    jd = si[SI_JDOF]
    for j in range(nj):
        t = si[jt + j]
        pa = si[jq + j]
        va = si[jd + j]
        if t == 0:  # free
            for k in range(3):
                out[va + k] = qref[pa + k] - qpos[qo + pa + k]
            pa += 3
            va += 3
        if t <= 1:  # free (rotation) or ball
            sub_quat(qref[pa], qref[pa + 1], qref[pa + 2], qref[pa + 3],
                     qpos[qo + pa], qpos[qo + pa + 1], qpos[qo + pa + 2], qpos[qo + pa + 3], out, va)
        else:
            out[va] = qref[pa] - qpos[qo + pa]


@njit(cache=True, fastmath=FM, error_model="numpy")
def _spring_rows(tp, vel0, vel1, vel2, p0, p1, p2, e, r0):
    """``e[r0:r0+3] −= a*`` for a spring target array ``tp`` (layout: SPRING_LEN) at position p."""
    k = tp[3]
    b = tp[4]
    cap = tp[5]
    l0 = k * tp[6] * (tp[0] - p0) - b * vel0
    l1 = k * tp[7] * (tp[1] - p1) - b * vel1
    l2 = k * tp[8] * (tp[2] - p2) - b * vel2
    if cap > 0.0:
        n = math.sqrt(l0 * l0 + l1 * l1 + l2 * l2)
        if n > cap:
            sc = cap / n
            l0 *= sc
            l1 *= sc
            l2 *= sc
    e[r0] -= l0 + tp[9]
    e[r0 + 1] -= l1 + tp[10]
    e[r0 + 2] -= l2 + tp[11]


@njit(cache=True, inline="always", error_model="numpy")
def _param(ptab, k):
    """Term parameter array ``k``: ``ptab (n, 2)`` holds the address and length of each (the
    terms' own float64 arrays, kept alive by the caller)."""
    return raw_f64(ptab[k, 0], ptab[k, 1])


@njit(cache=True, fastmath=FM, error_model="numpy")
def fill_problem(si, span, doff, ptab, M, c, costbuf, dims, dq):
    """Dense inertia ``M``, force ``c`` and the packed cost (``CostArrays.buffer`` layout, sizes
    ``dims = (km, kd, m1, m2)``) of the built-in terms, from MuJoCo's arrays in ``span``.

    ``c = qfrc_bias − qfrc_passive − qfrc_applied − Σ_b J_bᵀ xfrc_b``; the frame terms use
    Jacobians from ``cdof`` (as ``mj_jac``), the bias ``J̇v`` from ``cdof_dot``/``cvel`` and the
    subtree centre of mass Jacobian ``Σ m_b J(xipos_b) / m`` (as ``mj_jacSubtreeCom``, per dof
    from ``subtree_com``: :func:`_add_com_jac`).
    ``dq (nv + 6 nbody,)``: scratch.  Only the entries of ``M`` in MuJoCo's sparsity pattern are written:
    the others must be zero on entry (the solver's buffer is made with zeros and only ever
    written here).
    """
    nv = M.shape[0]
    # inertia (lower-triangular CSR rows of d.M)
    om = doff[DO_M]
    rn = si[SI_MROWNNZ]
    ra = si[SI_MROWADR]
    ci = si[SI_MCOLIND]
    for i in range(nv):
        adr = si[ra + i]
        for p in range(si[rn + i]):
            j = si[ci + adr + p]
            v = span[om + adr + p]
            M[i, j] = v
            M[j, i] = v
    ob = doff[DO_BIAS]
    op = doff[DO_PASSIVE]
    oa = doff[DO_APPLIED]
    for i in range(nv):
        c[i] = span[ob + i] - span[op + i] - span[oa + i]
    if si[SI_XFRC] != 0:
        ox = doff[DO_XFRC]
        for b in range(1, si[SI_NBODY]):
            nz = False
            for k in range(6):
                if span[ox + 6 * b + k] != 0.0:
                    nz = True
            if nz:
                _add_body_ft(si, span, doff, b, span, ox + 6 * b, c)
    km = dims[0]
    kd = dims[1]
    m1 = dims[2]
    mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, _ = _cost_blocks(costbuf, km, kd, m1, nv)
    qv = doff[DO_QVEL]
    to = si[SI_TERMS]
    for t in range(si[SI_NTERM]):
        row = to + TERM_NCOL * t
        code = si[row + TC_CODE]
        slot = si[row + TC_SLOT]
        pw = _param(ptab, si[row + TC_PW])
        w = pw[0]
        if code == TERM_FRAME or code == TERM_COM:
            for r in range(3):
                wa[slot + r] = w
            if w == 0.0:
                continue
            for r in range(3):
                e1[slot + r] = 0.0
                for k in range(nv):
                    Ka1[slot + r, k] = 0.0
            if code == TERM_FRAME:
                b = si[row + TC_BODY]
                s = si[row + TC_SITE]
                if s >= 0:
                    opx = doff[DO_SITEXPOS] + 3 * s
                else:
                    opx = doff[DO_XPOS] + 3 * b
                p0 = span[opx]
                p1 = span[opx + 1]
                p2 = span[opx + 2]
                _add_point_jac(si, span, doff, b, p0, p1, p2, 1.0, Ka1, slot)
                _add_point_bias(si, span, doff, b, p0, p1, p2, 1.0, e1, slot)
            else:
                # TC_LIST: comb (nv) | bodies (count); TC_PX: dof weights (nv) | mass shares
                lo_ = si[row + TC_LIST]
                px = _param(ptab, si[row + TC_PX])
                _add_com_jac(si, span, doff, si, lo_, px, Ka1, slot)
                _add_com_bias(si, span, doff, si, lo_ + nv, si[row + TC_COUNT], px[nv:], e1, slot,
                              dq[nv:])
                osc = doff[DO_SUBCOM] + 3 * si[row + TC_BODY]
                p0 = span[osc]
                p1 = span[osc + 1]
                p2 = span[osc + 2]
            vel0 = 0.0
            vel1 = 0.0
            vel2 = 0.0
            for k in range(nv):
                vk = span[qv + k]
                vel0 += Ka1[slot, k] * vk
                vel1 += Ka1[slot + 1, k] * vk
                vel2 += Ka1[slot + 2, k] * vk
            _spring_rows(_param(ptab, si[row + TC_PT]), vel0, vel1, vel2, p0, p1, p2, e1, slot)
        elif code == TERM_DAMPING:
            mass_w[slot] = w
            beta = pw[1]
            for k in range(nv):
                mass_t[slot, k] = -beta * span[qv + k]
        elif code == TERM_MASS_FIXED or code == TERM_DIAG_FIXED:
            tgt = _param(ptab, si[row + TC_PT])
            if code == TERM_MASS_FIXED:
                mass_w[slot] = w
                for k in range(nv):
                    mass_t[slot, k] = tgt[k]
            else:
                diag_w[slot] = w
                for k in range(nv):
                    diag_t[slot, k] = tgt[k]
                    diag_m[slot, k] = tgt[nv + k]
        else:  # PD targets: parameter PT = [kp (nv), kd (nv), qref (nq)], PX = mask (diag)
            tp = _param(ptab, si[row + TC_PT])
            if w != 0.0:
                differentiate_pos(si, span, doff[DO_QPOS], tp[2 * nv:], dq)
            else:
                for k in range(nv):
                    dq[k] = 0.0
            if code == TERM_MASS_PD:
                mass_w[slot] = w
                for k in range(nv):
                    mass_t[slot, k] = tp[k] * dq[k] - tp[nv + k] * span[qv + k]
            else:
                diag_w[slot] = w
                mask = _param(ptab, si[row + TC_PX])
                for k in range(nv):
                    diag_t[slot, k] = tp[k] * dq[k] - tp[nv + k] * span[qv + k]
                    diag_m[slot, k] = mask[k]


@njit(cache=True, error_model="numpy", _nrt=False)
def gdd_fast(si, span, doff, ptab, J1, aref, D, R, floss, efc_type, M, c, dq,
             actbuf, scales, costbuf, Kf2,
             a, lam, mu_lo, mu_hi, params, iparams, outf, out_state, wsf, wsi):
    """:func:`fill_problem` then :func:`gdd_solve` (pyramidal cones, dense ``efc_J`` ``J1``
    of ``nefc·nv``); the arguments after ``costbuf`` are those of :func:`gdd_solve`, except
    that its float outputs are packed in ``outf``: ``out_g (nv) | out_f (nefc) | out_w (nc) |
    out_ctrl (nc) | stats (ST_NSTAT) | a (nv) | out_state (nefc, as floats) | log (max_iter ·
    LOG_NCOL)`` (``nc = iparams[IPAR_NC]``, ``max_iter = iparams[IPAR_MAX_ITER]``; the layout
    of ``solver.GDDResult``, :func:`step_output_length` long).
    ``M (nv, nv)`` (zero outside MuJoCo's sparsity pattern on entry: see :func:`fill_problem`),
    ``c (nv,)`` and the scratch ``dq (nv + 6 nbody,)`` are filled here (kept for diagnostics).

    Compiled without numba's reference counting (``_nrt=False``: nothing below allocates; the
    temporaries live in the workspace), on owner-less views of the arguments
    (:func:`_unmanaged`); see :func:`gdd_general` for why every caller of :func:`gdd_solve` must
    be compiled so."""
    U = _unmanaged
    si, span, doff, ptab, J1, aref, D, R = U(si), U(span), U(doff), U(ptab), U(J1), U(aref), U(D), U(R)
    floss, efc_type, M, c, dq = U(floss), U(efc_type), U(M), U(c), U(dq)
    actbuf, scales, costbuf, Kf2 = U(actbuf), U(scales), U(costbuf), U(Kf2)
    a, lam, mu_lo, mu_hi, params, iparams = U(a), U(lam), U(mu_lo), U(mu_hi), U(params), U(iparams)
    outf, out_state, wsf, wsi = U(outf), U(out_state), U(wsf), U(wsi)
    nv = M.shape[0]
    nefc = aref.shape[0]
    nc = iparams[IPAR_NC]
    out_g, o = _take(outf, 0, nv)
    out_f, o = _take(outf, o, nefc)
    out_w, o = _take(outf, o, nc)
    out_ctrl, o = _take(outf, o, nc)
    stats, o = _take(outf, o, ST_NSTAT)
    out_a, o = _take(outf, o, nv)
    out_sf, o = _take(outf, o, nefc)
    log, o = _take2(outf, o, iparams[IPAR_MAX_ITER], LOG_NCOL)
    dims = iparams[IPAR_KM:IPAR_KM + 4]  # (km, kd, m1, m2): consecutive
    fill_problem(si, span, doff, ptab, M, c, costbuf, dims, dq)
    J = _as_2d(J1, nefc, nv)
    rn = si[SI_MROWNNZ]
    ra = si[SI_MROWADR]
    ci = si[SI_MCOLIND]
    nnz = si[ra + nv - 1] + si[rn + nv - 1]
    oq = doff[DO_QLD]
    oqi = doff[DO_QLDINV]
    gdd_solve(M, si[rn:rn + nv], si[ra:ra + nv], si[ci:ci + nnz], span[oq:oq + nnz],
              span[oqi:oqi + nv], c, J, aref, D, R, floss, efc_type, efc_type, _EMPTY_I32, _EMPTY_F1, _EMPTY_F5,
              _EMPTY_I32, actbuf, scales, costbuf, Kf2, a, lam, mu_lo, mu_hi, params, iparams,
              out_g, out_f, out_state, out_w, out_ctrl, stats, log, wsf, wsi)
    for k in range(nv):
        out_a[k] = a[k]
    if stats[ST_STATUS] != STATUS_WORKSPACE:
        for i in range(nefc):
            out_sf[i] = out_state[i]


@njit(cache=True, error_model="numpy", _nrt=False)
def gdd_general(M, Mrownnz, Mrowadr, Mcolind, qld, qldinv,
                c, J, aref, D, R, floss, efc_type, efc_id, con_dim, con_mu, con_fric, con_adr,
                actbuf, scales, costbuf, Kf2,
                a, lam, mu_lo, mu_hi, params, iparams,
                out_g, out_f, out_state, out_w, out_ctrl, stats, log, wsf, wsi):
    """:func:`gdd_solve` called from Python (the general path), arguments as there.

    Like :func:`gdd_fast` it is compiled without numba's reference counting (``_nrt=False``) and
    hands :func:`gdd_solve` owner-less views: the kernels below it are compiled once per
    signature, whatever the caller, so they must only ever run in that mode (a view returned by
    a helper compiled without reference counting must not be released by a caller that counts).
    """
    U = _unmanaged
    gdd_solve(U(M), U(Mrownnz), U(Mrowadr), U(Mcolind), U(qld), U(qldinv),
              U(c), U(J), U(aref), U(D), U(R), U(floss), U(efc_type), U(efc_id), U(con_dim),
              U(con_mu), U(con_fric), U(con_adr), U(actbuf), U(scales), U(costbuf), U(Kf2),
              U(a), U(lam), U(mu_lo), U(mu_hi), U(params), U(iparams),
              U(out_g), U(out_f), U(out_state), U(out_w), U(out_ctrl), U(stats), U(log), U(wsf),
              U(wsi))


# byte offsets in the ``mjData`` struct that gdd_step reads (``solver._efc_layout``): the
# ``nefc`` int and the pointer fields of the constraint rows
DL_NEFC = 0
DL_J = 1
DL_AREF = 2
DL_D = 3
DL_R = 4
DL_FLOSS = 5  # the aref field again when the model has no friction loss (not read then)
DL_TYPE = 6
DL_N = 7


@njit(cache=True, inline="always", error_model="numpy")
def _field(d, off):
    """The address an ``mjData`` pointer field (byte offset ``off``) holds."""
    return raw_u64(d + off, 1)[0]


# the step context of gdd_step (int64): the mjModel and mjData addresses, whether to run the
# stages, how to skip mj_island in them (CX_FLAGS: the address of the model's opt.disableflags
# and enableflags, or 0; the mjDSBL_ISLAND and mjENBL_SLEEP bits), the mjData offsets (DL_*),
# then one (address, rows, columns) triple per array (AS_*)
CX_MODEL = 0
CX_DATA = 1
CX_STAGES = 2
CX_FLAGS = 3
CX_ISLAND = 4
CX_SLEEP = 5
CX_DL = 6
CX_ARRAYS = CX_DL + DL_N
AS_SI = 0  # int64 (static structure)
AS_SPAN = 1  # float64 view of mjData's buffer
AS_DOFF = 2  # int64 offsets in it
AS_PTAB = 3  # int64 (n, 2) term parameter table
AS_M = 4  # float64 (nv, nv)
AS_C = 5
AS_DQ = 6
AS_ACT = 7
AS_SCALES = 8  # float64 (4, w)
AS_COST = 9
AS_KF2 = 10  # float64 (m2, ·)
AS_A = 11  # the acceleration: warm start in, solution out
AS_LAM = 12
AS_MULO = 13
AS_MUHI = 14
AS_PARAMS = 15
AS_IPARAMS = 16  # int64
AS_OUTF = 17
AS_OUTS = 18  # int64
AS_WSF = 19
AS_WSI = 20  # int64
AS_N = 21
CX_N = CX_ARRAYS + 3 * AS_N


@njit(cache=True, inline="always", error_model="numpy")
def _cx_f(ctx, slot):
    o = CX_ARRAYS + 3 * slot
    return raw_f64(ctx[o], ctx[o + 1])


@njit(cache=True, inline="always", error_model="numpy")
def _cx_f2(ctx, slot):
    o = CX_ARRAYS + 3 * slot
    return raw_f64_2d(ctx[o], ctx[o + 1], ctx[o + 2])


@njit(cache=True, inline="always", error_model="numpy")
def _cx_i(ctx, slot):
    o = CX_ARRAYS + 3 * slot
    return raw_i64(ctx[o], ctx[o + 1])


@njit(cache=True, inline="always", error_model="numpy")
def _cx_i2(ctx, slot):
    o = CX_ARRAYS + 3 * slot
    return raw_i64_2d(ctx[o], ctx[o + 1], ctx[o + 2])


def step_output_length(nv, nefc, nc, max_iter):
    """Length of the float output of :func:`gdd_fast` and :func:`gdd_step` for a state with
    ``nefc`` rows (``nc`` controls, at most ``max_iter`` iterations logged)."""
    return 2 * (nv + nefc + nc) + ST_NSTAT + max_iter * LOG_NCOL


@njit(cache=True, inline="always", error_model="numpy")
def _stages(m, d, flags, island_bit, sleep_bit):
    """``mj_fwdPosition`` + ``mj_fwdVelocity`` on the ``mjModel``/``mjData`` at ``m``/``d``.

    ``mj_fwdPosition`` ends with ``mj_island``, the forward solver's partition of the
    constraints, which goal-directed dynamics does not use (~0.5 µs of the humanoid's step).
    With ``flags`` (the address of the model's ``opt.disableflags``, ``enableflags`` after
    it) it runs with ``mjDSBL_ISLAND`` set and the flags are restored right after — within
    this compiled call, so Python never sees the change — unless islands are already disabled
    or sleeping (which uses them) is enabled.  ``d.nisland`` is then 0; MuJoCo's forward
    solver gives the same acceleration without islands (a later ``mj_forward`` or ``mj_step``
    recomputes them).
    """
    if flags != 0:
        fl = raw_i32(flags, 2)
        old = fl[0]
        if (old & island_bit) == 0 and (fl[1] & sleep_bit) == 0:
            fl[0] = old | island_bit
            mj_fwdposition(m, d)
            fl[0] = old
        else:
            mj_fwdposition(m, d)
    else:
        mj_fwdposition(m, d)
    mj_fwdvelocity(m, d)


@njit(cache=True, error_model="numpy", _nrt=False)
def gdd_step(ctx):
    """:func:`gdd_fast` on the arrays and ``mjModel``/``mjData`` pointers of the step context
    ``ctx`` (``CX_*``, ``AS_*``): one integer array instead of ~25 arguments, which the
    caller builds once per solver, cost and ``mjData`` (every array it points to is kept alive
    and not reallocated while it is used).

    With ``ctx[CX_STAGES]`` it first runs ``mj_fwdPosition`` + ``mj_fwdVelocity`` (the C
    functions of the bindings' ``libmujoco``; without ``mj_island``: :func:`_stages`), then
    reads the constraint rows through the ``mjData`` fields at the byte offsets ``ctx[CX_DL:]``
    (``DL_*``) — no Python-level MuJoCo call or array view per step.

    The float output (slot ``AS_OUTF``) gets the layout of :func:`gdd_fast`, ``need`` =
    :func:`step_output_length` long.  Returns ``16 · need + status`` (``STATUS_*``), or
    ``−need`` when the outputs are too short or the workspace too small (status
    ``STATUS_WORKSPACE``): the stages are computed, ``a`` and the multipliers are untouched;
    grow what is short and call again without stages.  Writes ``iparams[IPAR_NEFC]`` and
    ``iparams[IPAR_OUT_NEED]``."""
    m = ctx[CX_MODEL]
    d = ctx[CX_DATA]
    if ctx[CX_STAGES] != 0:
        _stages(m, d, ctx[CX_FLAGS], ctx[CX_ISLAND], ctx[CX_SLEEP])
    nefc = np.int64(raw_i32(d + ctx[CX_DL + DL_NEFC], 1)[0])
    M = _cx_f2(ctx, AS_M)
    nv = M.shape[0]
    iparams = _cx_i(ctx, AS_IPARAMS)
    outf = _cx_f(ctx, AS_OUTF)
    out_state = _cx_i(ctx, AS_OUTS)
    nc = iparams[IPAR_NC]
    need = 2 * (nv + nefc + nc) + ST_NSTAT + iparams[IPAR_MAX_ITER] * LOG_NCOL
    iparams[IPAR_NEFC] = nefc
    iparams[IPAR_OUT_NEED] = need
    if outf.shape[0] < need or out_state.shape[0] < nefc:
        return -need
    J1 = raw_f64(_field(d, ctx[CX_DL + DL_J]), nefc * nv)
    aref = raw_f64(_field(d, ctx[CX_DL + DL_AREF]), nefc)
    D = raw_f64(_field(d, ctx[CX_DL + DL_D]), nefc)
    R = raw_f64(_field(d, ctx[CX_DL + DL_R]), nefc)
    floss = raw_f64(_field(d, ctx[CX_DL + DL_FLOSS]), nefc)
    efc_type = raw_i32(_field(d, ctx[CX_DL + DL_TYPE]), nefc)
    a = _cx_f(ctx, AS_A)
    ptab = _cx_i2(ctx, AS_PTAB)
    gdd_fast(_cx_i(ctx, AS_SI), _cx_f(ctx, AS_SPAN), _cx_i(ctx, AS_DOFF), ptab, J1, aref, D, R,
             floss, efc_type, M, _cx_f(ctx, AS_C), _cx_f(ctx, AS_DQ), _cx_f(ctx, AS_ACT),
             _cx_f2(ctx, AS_SCALES), _cx_f(ctx, AS_COST), _cx_f2(ctx, AS_KF2), a,
             _cx_f(ctx, AS_LAM), _cx_f(ctx, AS_MULO), _cx_f(ctx, AS_MUHI), _cx_f(ctx, AS_PARAMS),
             iparams, outf, out_state, _cx_f(ctx, AS_WSF), _cx_i(ctx, AS_WSI))
    status = np.int64(outf[nv + nefc + 2 * nc + ST_STATUS])
    if status == STATUS_WORKSPACE:
        return -need
    return 16 * need + status


_EMPTY_I32 = np.zeros(0, dtype=np.int32)
_EMPTY_F1 = np.zeros(0)
_EMPTY_F5 = np.zeros((0, 5))
