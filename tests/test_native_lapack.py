"""The GIL-free banded triangular solve against SciPy's LAPACK wrapper (the reference)."""

import numpy as np
import pytest
import scipy.linalg

from contactopt.native.lapack import banded_lu_solve, banded_transposed_solve


def _banded_cholesky(rng, n, kd):
    H = np.zeros((n, n))
    for i in range(n):
        for j in range(max(0, i - kd), i + 1):
            H[i, j] = H[j, i] = 0.1 * rng.normal()
    H += 5.0 * np.eye(n)
    ab = np.zeros((kd + 1, n))
    for j in range(n):
        for i in range(max(0, j - kd), j + 1):
            ab[kd + i - j, j] = H[i, j]
    return scipy.linalg.cholesky_banded(ab)


@pytest.mark.parametrize("n, kd, m", [(1, 0, 1), (7, 2, 3), (60, 9, 25), (200, 20, 1)])
def test_matches_scipys_dtbtrs(rng, n, kd, m):
    cb = _banded_cholesky(rng, n, kd)
    B = rng.normal(size=(n, m))
    ref, info = scipy.linalg.lapack.dtbtrs(cb, B, uplo="U", trans="T")
    assert info == 0
    X = banded_transposed_solve(cb, B)
    np.testing.assert_allclose(X, ref, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(banded_transposed_solve(cb, B[:, 0]), ref[:, 0], rtol=1e-13, atol=1e-13)
    # Uᵀ X = B by construction, and the inputs are left alone
    U = np.zeros((n, n))
    for j in range(n):
        for i in range(max(0, j - kd), j + 1):
            U[i, j] = cb[kd + i - j, j]
    np.testing.assert_allclose(U.T @ X, B, atol=1e-12)


def test_a_zero_pivot_and_bad_shapes_are_errors(rng):
    cb = _banded_cholesky(rng, 6, 2)
    cb[2, 3] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="zero diagonal entry 4"):
        banded_transposed_solve(cb, np.ones((6, 2)))
    with pytest.raises(ValueError, match="do not match"):
        banded_transposed_solve(cb, np.ones((5, 2)))


@pytest.mark.parametrize("n, bw, m", [(1, 0, 1), (9, 2, 1), (80, 7, 3), (300, 20, 1)])
def test_banded_lu_matches_scipys_solve_banded(rng, n, bw, m):
    """The GIL-free ``dgbsv`` solves an indefinite banded system (a KKT-like zero diagonal block
    needs the pivoting) as ``scipy.linalg.solve_banded`` does."""
    K = np.zeros((n, n))
    for i in range(n):
        for j in range(max(0, i - bw), min(n, i + bw + 1)):
            K[i, j] = rng.normal()
    K[: n // 2, : n // 2] += np.diag(np.where(np.arange(n // 2) % 3 == 0, 0.0, 4.0))
    if bw:
        np.fill_diagonal(K[n // 2:, n // 2:], 0.0)  # a zero diagonal block, as in a KKT system
    ab = np.zeros((bw + bw + 1, n))
    storage = np.zeros((3 * bw + 1, n))
    for j in range(n):
        for i in range(max(0, j - bw), min(n, j + bw + 1)):
            ab[bw + i - j, j] = K[i, j]
            storage[2 * bw + i - j, j] = K[i, j]
    B = rng.normal(size=(n, m))
    assert np.linalg.matrix_rank(K) == n  # (the seeded draws are regular)
    ref = scipy.linalg.solve_banded((bw, bw), ab, B)
    X = banded_lu_solve(storage.copy(), bw, B)
    np.testing.assert_allclose(X, ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
    np.testing.assert_allclose(K @ X, B, atol=1e-8 * max(1.0, np.abs(X).max()))
    np.testing.assert_allclose(banded_lu_solve(storage.copy(), bw, B[:, 0]), ref[:, 0], rtol=1e-9,
                               atol=1e-9 * np.abs(ref).max())


def test_banded_lu_singular_and_bad_shapes_are_errors():
    with pytest.raises(np.linalg.LinAlgError, match="zero pivot"):
        banded_lu_solve(np.zeros((4, 3)), 1, np.ones(3))
    with pytest.raises(ValueError, match="do not match"):
        banded_lu_solve(np.zeros((3, 3)), 1, np.ones(3))
    with pytest.raises(ValueError, match="do not match"):
        banded_lu_solve(np.zeros((4, 3)), 1, np.ones(4))
