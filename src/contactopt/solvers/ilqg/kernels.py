"""Compiled (numba) kernels of the iLQG backward pass.

Two kernels, both exact transcriptions of the Python reference in
:mod:`contactopt.solvers.ilqg.solver` (same algorithm, same decisions, same arithmetic):

* :func:`box_qp_kernel` — the projected-Newton box QP of
  :func:`~contactopt.solvers.ilqg.solve_box_qp`
  (``min ½ xᵀHx + gᵀx  s.t. lower ≤ x ≤ upper``);
* :func:`backward_pass_kernel` — the whole Riccati sweep of ``_backward_pass``
  (state or control regularization, improved or standard value update, the box QP
  for saturated controls, gains on the free controls only).

The matrices are tiny (``n + m`` ≈ 60 for a humanoid), so the win is removing the
Python overhead per time step, not flops.  No ``fastmath``: the kernels evaluate the
reference's expressions in the same order with the same BLAS (``np.dot``) and LAPACK
(``dpotrf``/``dpotrs`` from ``scipy.linalg.cython_lapack``) routines, so in practice
they reproduce it bit for bit — the MPC closed loop amplifies even roundoff
differences, and runs should not depend on which implementation computed them.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from llvmlite import binding as _llvm
from numba import njit, types
from numba.core.errors import NumbaPerformanceWarning
from numba.extending import get_cython_function_address

from ...native import mv  # ``M @ v`` exactly as numpy computes it

# mv's single-row branch takes a strided row on purpose (numpy's arithmetic); not a problem
warnings.filterwarnings("ignore", message=r"np\.dot\(\) is faster on contiguous arrays",
                        category=NumbaPerformanceWarning)

# status codes of box_qp_kernel (same order as ilqg.BoxQPStatus)
QP_SMALL_GRADIENT = 0
QP_SMALL_IMPROVEMENT = 1
QP_ALL_CLAMPED = 2
QP_MAX_ITERATIONS = 3
QP_NO_DESCENT = 4
QP_NOT_POSITIVE_DEFINITE = 5


# LAPACK's Cholesky routines, the very ones scipy.linalg.lapack.dpotrf/dpotrs call in the
# Python reference, so that the kernels reproduce it bit for bit.  They are bound as named
# external symbols (not ctypes pointers) so that numba can cache the compiled kernels.
_SYMBOLS = {"contactopt_ilqg_dpotrf": "dpotrf", "contactopt_ilqg_dpotrs": "dpotrs"}
for _name, _routine in _SYMBOLS.items():
    _llvm.add_symbol(_name, get_cython_function_address("scipy.linalg.cython_lapack", _routine))
_vp = types.voidptr
_dpotrf = types.ExternalFunction("contactopt_ilqg_dpotrf", types.void(_vp, _vp, _vp, _vp, _vp))
_dpotrs = types.ExternalFunction("contactopt_ilqg_dpotrs", types.void(_vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp))


@njit(cache=True)
def cholesky_lower(A):
    """LAPACK ``dpotrf`` of the symmetric ``A (p, p)``.

    Returns ``(ok, Lt)``: ``Lt (p, p)`` is LAPACK's column-major output seen row-major,
    so ``L = tril(Lt.T)`` (the other triangle still holds entries of ``A``); ``ok`` is
    False if ``A`` is not PD.
    """
    p = A.shape[0]
    Lt = A.copy()  # symmetric: row-major A is its own column-major copy
    uplo = np.array([ord("L")], dtype=np.int8)
    n = np.array([p], dtype=np.int32)
    info = np.zeros(1, dtype=np.int32)
    if p > 0:
        _dpotrf(uplo.ctypes, n.ctypes, Lt.ctypes, n.ctypes, info.ctypes)
    return info[0] == 0, Lt


@njit(cache=True)
def cholesky_solve(Lt, B):
    """``(L Lᵀ)⁻¹ B`` for ``B (p, r)`` with the factor of :func:`cholesky_lower` (LAPACK ``dpotrs``)."""
    p, r = B.shape
    Bt = np.ascontiguousarray(B.T)  # column-major B
    n = np.array([p], dtype=np.int32)
    nrhs = np.array([r], dtype=np.int32)
    info = np.zeros(1, dtype=np.int32)
    uplo = np.array([ord("L")], dtype=np.int8)
    if p > 0 and r > 0:
        _dpotrs(uplo.ctypes, n.ctypes, nrhs.ctypes, Lt.ctypes, n.ctypes, Bt.ctypes, n.ctypes,
                info.ctypes)
    return np.ascontiguousarray(Bt.T)




@njit(cache=True)
def _vm(v, M):
    """``v @ M`` exactly as numpy computes it (a single-column ``M`` is a dot product there)."""
    if M.shape[1] == 1:
        out = np.empty(1)
        out[0] = np.dot(v, np.ascontiguousarray(M[:, 0]))
        return out
    return np.dot(v, M)


@njit(cache=True)
def _quad_value(H, g, x):
    # float(x @ g + 0.5 * x @ H @ x), evaluated like numpy does
    return np.dot(x, g) + np.dot(_vm(0.5 * x, H), x)


@njit(cache=True)
def _clip(x, lower, upper):
    return np.minimum(np.maximum(x, lower), upper)


@njit(cache=True)
def _free_set(H, g, x, lower, upper):
    grad = g + mv(H, x)
    clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))
    return grad, ~clamped


@njit(cache=True)
def _factor_free(H, free):
    idx = np.nonzero(free)[0]
    p = idx.shape[0]
    Hff = np.empty((p, p))
    for a in range(p):
        for b in range(p):
            Hff[a, b] = H[idx[a], idx[b]]
    ok, Lt = cholesky_lower(Hff)
    return ok, Lt


@njit(cache=True)
def box_qp_kernel(H, g, lower, upper, x0, max_iterations, min_gradient, min_relative_improvement,
                  step_decrease, min_step, armijo):
    """Projected-Newton box QP (the algorithm of ``solve_box_qp``, the same arithmetic).

    Args:
      H: ``(n, n)`` symmetric; g, lower, upper, x0: ``(n,)``; the remaining arguments are
        the reference's stopping and line-search parameters.

    Returns:
      ``(x (n,), free (n,) bool, L (nfree, nfree), nfree, status, iterations, value)``:
      ``L`` is the lower Cholesky factor of ``H`` restricted to the free variables (in
      index order; empty without free variables) and ``status`` one of the ``QP_*`` codes.
    """
    n = g.shape[0]
    x = _clip(x0.copy(), lower, upper)
    value = _quad_value(H, g, x)
    status = QP_MAX_ITERATIONS
    factored = np.zeros(n, np.bool_)
    have_factor = False
    Lt = np.zeros((0, 0))
    free = np.ones(n, np.bool_)
    it = 0
    vc = value
    for it in range(1, max_iterations + 1):
        grad, free = _free_set(H, g, x, lower, upper)
        if not free.any():
            status = QP_ALL_CLAMPED
            break
        if not have_factor or np.any(free != factored):
            ok, Lt = _factor_free(H, free)
            if not ok:
                return x, free, np.zeros((0, 0)), 0, QP_NOT_POSITIVE_DEFINITE, it, value
            factored = free.copy()
            have_factor = True
        fi = np.nonzero(free)[0]
        ci = np.nonzero(~free)[0]
        gf = grad[fi]
        if math.sqrt(np.dot(gf, gf)) < min_gradient:
            status = QP_SMALL_GRADIENT
            break
        # Newton step on the free variables with the clamped ones held fixed
        grad_held = g[fi].copy()
        if ci.shape[0] > 0:
            Hfc = np.empty((fi.shape[0], ci.shape[0]))
            for a in range(fi.shape[0]):
                for b in range(ci.shape[0]):
                    Hfc[a, b] = H[fi[a], ci[b]]
            grad_held = grad_held + mv(Hfc, x[ci])
        sol = cholesky_solve(Lt, grad_held.reshape(-1, 1))[:, 0]
        search = np.zeros(n)
        search[fi] = -sol - x[fi]
        sdotg = np.dot(search, grad)
        if not sdotg < 0:
            status = QP_SMALL_GRADIENT if abs(sdotg) < min_gradient ** 2 else QP_NO_DESCENT
            break
        step = 1.0
        failed = False
        xc = x
        while True:
            xc = _clip(x + step * search, lower, upper)
            vc = _quad_value(H, g, xc)
            if (vc - value) / (step * sdotg) >= armijo:
                break
            step *= step_decrease
            if step < min_step:
                failed = True
                break
        if failed:
            status = QP_NO_DESCENT
            break
        improvement = value - vc
        x, value = xc, vc
        if improvement < min_relative_improvement * abs(value):
            status = QP_SMALL_IMPROVEMENT
            break
    # free set and factor at the final point (used for the feedback gains)
    grad, free = _free_set(H, g, x, lower, upper)
    nfree = int(free.sum())
    if nfree == 0:
        return x, free, np.zeros((0, 0)), 0, status, it, value
    ok, Lt = _factor_free(H, free)
    if not ok:
        return x, free, np.zeros((0, 0)), 0, QP_NOT_POSITIVE_DEFINITE, it, value
    return x, free, np.tril(Lt.T), nfree, status, it, value


@njit(cache=True)
def _value_update(Qx, Qu, Qxx, Qux, Quu, Ki, ki, improved):
    """``(V_x, V_xx, kᵀQ_uu k)`` of eq. 11 (improved) or eq. 7, in the reference's operation order."""
    if improved:
        QuuK = np.dot(Quu, Ki)
        W = np.dot(Ki.T, Qux)
        Vx = Qx + mv(Ki.T, mv(Quu, ki) + Qu) + mv(Qux.T, ki)
        Vxx = Qxx + np.dot(Ki.T, QuuK) + W + W.T
    else:
        Vx = Qx + mv(Qux.T, ki)
        Vxx = Qxx + np.dot(Qux.T, Ki)
    Vxx = np.ascontiguousarray(0.5 * (Vxx + Vxx.T))
    return Vx, Vxx, np.dot(ki, mv(Quu, ki))


@njit(cache=True)
def backward_pass_kernel(F, lz, lzz, FtF, Vx_T, Vxx_T, mu, state_reg, improved,
                         du_lower, du_upper, bounded, k_warm, box_qp_max_iterations):
    """The iLQG Riccati sweep (the algorithm of ``ilqg._backward_pass``, the same arithmetic).

    Args:
      F: ``(T, n, n+m)`` stacked ``[A_i B_i]``.
      lz: ``(T, n+m)`` cost gradients ``(ℓ_x, ℓ_u)``; lzz: ``(T, n+m, n+m)`` Hessians.
      FtF: ``(T, n+m, n+m)`` ``F_iᵀF_i`` (used with ``state_reg`` and ``mu > 0``; any
        array of that shape otherwise).
      Vx_T: ``(n,)``, Vxx_T: ``(n, n)`` terminal value derivatives.
      mu: regularization μ ≥ 0; state_reg: eq. 10 (else eq. 9); improved: eq. 11 (else 7).
      du_lower, du_upper, k_warm: ``(T, m)`` step bounds and box-QP warm starts.
      bounded: any finite bound; box_qp_max_iterations: projected-Newton iterations.

    Returns:
      ``(ok, failed_at, k (T, m), K (T, m, n), dV1, dV2)``; ``failed_at`` is the step with
      a non-PD ``Q̃_uu`` (−1 when ``ok``; 0 when the result is not finite).
    """
    T, n, nm = F.shape
    m = nm - n
    k = np.zeros((T, m))
    K = np.zeros((T, m, n))
    Vx = Vx_T.copy()
    Vxx = Vxx_T.copy()
    dV1 = 0.0
    dV2 = 0.0
    Quu_r = np.empty((m, m))
    rhs = np.empty((m, n + 1))
    for i in range(T - 1, -1, -1):
        Fi = F[i]
        Fti = np.ascontiguousarray(Fi.T)
        Qz = lz[i] + mv(Fti, Vx)
        Qzz = lzz[i] + np.dot(Fti, np.dot(Vxx, Fi))
        Qx = Qz[:n].copy()
        Qu = Qz[n:].copy()
        Qxx = np.ascontiguousarray(Qzz[:n, :n])
        Qux = np.ascontiguousarray(Qzz[n:, :n])
        Quu = np.ascontiguousarray(Qzz[n:, n:])
        if mu == 0.0:
            Qux_r = Qux
            for a in range(m):
                for b in range(m):
                    Quu_r[a, b] = 0.5 * (Quu[a, b] + Quu[b, a])
        elif state_reg:
            Qux_r = Qux + mu * FtF[i, n:, :n]
            for a in range(m):
                for b in range(m):
                    Quu_r[a, b] = 0.5 * ((Quu[a, b] + mu * FtF[i, n + a, n + b])
                                         + (Quu[b, a] + mu * FtF[i, n + b, n + a]))
        else:
            Qux_r = Qux
            for a in range(m):
                for b in range(m):
                    qab = Quu[a, b] + (mu if a == b else 0.0)
                    qba = Quu[b, a] + (mu if a == b else 0.0)
                    Quu_r[a, b] = 0.5 * (qab + qba)
        ok, Lt = cholesky_lower(Quu_r)
        if not ok:
            return False, i, k, K, 0.0, 0.0
        rhs[:, 0] = Qu
        rhs[:, 1:] = Qux_r
        sol = cholesky_solve(Lt, rhs)
        ki = -sol[:, 0]
        # the reference's gains are column-major here (LAPACK's output), which selects
        # different BLAS paths in the products below: keep the same layout
        KiT = np.empty((n, m))
        for a in range(m):
            for b in range(n):
                KiT[b, a] = -sol[a, b + 1]
        if bounded and (np.any(ki < du_lower[i]) or np.any(ki > du_upper[i])):
            x, free, Lf, nfree, status, _it, _v = box_qp_kernel(
                Quu_r, Qu, du_lower[i], du_upper[i], k_warm[i], box_qp_max_iterations,
                1e-8, 1e-8, 0.6, 1e-22, 0.1)
            if status == QP_NOT_POSITIVE_DEFINITE:
                return False, i, k, K, 0.0, 0.0
            ki = x
            Ki = np.zeros((m, n))  # row-major, as in the reference
            if nfree > 0:
                fi = np.nonzero(free)[0]
                rhs_f = np.empty((nfree, n))
                for a in range(nfree):
                    rhs_f[a, :] = Qux_r[fi[a], :]
                sol_f = cholesky_solve(np.ascontiguousarray(Lf.T), rhs_f)
                for a in range(nfree):
                    Ki[fi[a], :] = -sol_f[a, :]
            Vx, Vxx, s2 = _value_update(Qx, Qu, Qxx, Qux, Quu, Ki, ki, improved)
            K[i] = Ki
        else:
            Vx, Vxx, s2 = _value_update(Qx, Qu, Qxx, Qux, Quu, KiT.T, ki, improved)
            K[i] = KiT.T
        dV1 += np.dot(ki, Qu)
        dV2 += s2
        k[i] = ki
    if not (math.isfinite(dV1) and math.isfinite(dV2) and np.all(np.isfinite(Vxx))):
        return False, 0, k, K, 0.0, 0.0
    return True, -1, k, K, dV1, dV2
