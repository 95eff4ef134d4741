"""The GIL-free banded triangular solve against SciPy's LAPACK wrapper (the reference)."""

import numpy as np
import pytest
import scipy.linalg

from contactopt.native.lapack import banded_transposed_solve


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
