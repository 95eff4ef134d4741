"""Dense and sparse linear algebra: dot helpers, Cholesky, MuJoCo's sparse LDL of ``M``,
triangular solves and the Gram product.
"""

from __future__ import annotations

import math

from numba import njit

from .constants import FM

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


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _rows_minus_dots(X, v, n, B, col, r0, r1, inv):
    """``X[r, col] = (B[r, col] − X[r, :n] · v[:n]) · inv`` for the rows ``r0 ≤ r < r1``, four
    rows at a time (:func:`_four_row_dots`), then one by one; ``col`` is not among the first
    ``n`` columns (``B`` may be ``X``)."""
    r = r0
    while r + 4 <= r1:
        s0, s1, s2, s3 = _four_row_dots(X, r, v, n)
        X[r, col] = (B[r, col] - s0) * inv
        X[r + 1, col] = (B[r + 1, col] - s1) * inv
        X[r + 2, col] = (B[r + 2, col] - s2) * inv
        X[r + 3, col] = (B[r + 3, col] - s3) * inv
        r += 4
    while r < r1:
        s = B[r, col]
        for k in range(n):
            s -= X[r, k] * v[k]
        X[r, col] = s * inv
        r += 1


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
        _rows_minus_dots(L, L[j], j, A, j, j + 1, n, 1.0 / d)
    for i in range(n - 1):
        for j in range(i + 1, n):
            L[i, j] = 0.0
    return True


@njit(cache=True, fastmath=FM, error_model="numpy")
def chol_solve(L, b, x):
    """Solve ``L Lᵀ x = b`` (``x`` may alias ``b``)."""
    _fwd_solve(L, b, x)
    _bwd_solve(L, x)


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
    for i in range(L.shape[0]):
        _rows_minus_dots(XT, L[i], i, XT, i, 0, XT.shape[0], 1.0 / L[i, i])


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
