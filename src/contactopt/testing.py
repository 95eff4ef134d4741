"""Derivative checks for tests: analytic Jacobians against central finite differences.

``check_derivatives(fn, x, J)`` perturbs ``x`` along each tangent direction ``e_j`` by ``±ε``
and compares column ``j`` of ``J`` with ``(f(x ⊕ εe_j) − f(x ⊖ εe_j)) / 2ε``.  Variables on a
manifold (configurations with quaternions) pass ``retract(x, dx)``, e.g. one built on
``mujoco.mj_integratePos``; the default is ``x + dx``.
"""

import numpy as np

__all__ = ["check_derivatives", "finite_difference_jacobian"]


def finite_difference_jacobian(fn, x, *, eps=1e-6, retract=None, dim=None):
    """Central-difference Jacobian of ``fn`` at ``x``.

    Column ``j`` is ``(fn(retract(x, ε e_j)) − fn(retract(x, −ε e_j))) / 2ε``.

    Args:
        fn: ``x -> f(x)``, an array of any shape ``s`` (a vector ``(m,)`` or a scalar).
        x: the point; a flat array unless ``retract`` says otherwise.
        eps: the step ``ε``.
        retract: ``(x, dx) -> x'`` with a tangent vector ``dx`` of shape ``(dim,)``;
            default ``x + dx``.
        dim: tangent dimension ``n``; default ``x.size``.

    Returns:
        ``s + (n,)``: ``(m, n)`` for a vector-valued ``fn``, ``(n,)`` for a scalar one.
    """
    x = np.asarray(x, dtype=float)
    n = x.size if dim is None else int(dim)
    if retract is None:
        if n != x.size:
            raise ValueError(f"tangent dimension {n} differs from x.size {x.size}: pass a retract")

        def retract(x0, dx):
            return x0 + dx.reshape(x0.shape)
    cols = []
    for j in range(n):
        e = np.zeros(n)
        e[j] = eps
        fp = np.array(fn(retract(x.copy(), e)), dtype=float)  # a copy: fn may reuse its buffer
        fm = np.array(fn(retract(x.copy(), -e)), dtype=float)
        cols.append((fp - fm) / (2 * eps))
    return np.stack(cols, axis=-1)


def check_derivatives(fn, x, jacobian, *, eps=1e-6, rtol=1e-5, atol=1e-7, retract=None, name=""):
    """Assert that an analytic Jacobian of ``fn: R^n -> R^m`` at ``x`` matches central differences.

    Entries agree when ``|J − J_fd| <= atol + rtol |J_fd|`` (``np.testing.assert_allclose(J, J_fd)``
    semantics), with ``J_fd[:, j] = (f(x ⊕ εe_j) − f(x ⊖ εe_j)) / 2ε``.

    Args:
        fn: ``x -> f(x)``, shape ``(m,)`` (or any shape ``s``; a scalar gives a gradient).
        x: the point.
        jacobian: ``(m, n)`` (``s + (n,)``), or a callable ``x -> (m, n)``; ``n`` is its last axis.
        eps: the finite-difference step ``ε``.
        rtol, atol: tolerances as above.
        retract: ``(x, dx) -> x'`` for tangent perturbations ``dx`` of shape ``(n,)``
            (e.g. via ``mujoco.mj_integratePos``); default ``x + dx``.
        name: named in the failure message.

    Returns:
        The finite-difference Jacobian ``J_fd``, same shape as ``jacobian``.

    Raises:
        AssertionError: on a shape mismatch or when some entry disagrees; the message names
            ``name``, the worst entry (row, col), both values and the relative error.
    """
    J = np.asarray(jacobian(x) if callable(jacobian) else jacobian, dtype=float)
    n = J.shape[-1] if J.ndim else 1
    fd = finite_difference_jacobian(fn, x, eps=eps, retract=retract, dim=n)
    label = f"{name}: " if name else ""
    if J.shape != fd.shape:
        raise AssertionError(f"{label}Jacobian has shape {J.shape}, finite differences {fd.shape}")
    err = np.abs(J - fd)
    tol = atol + rtol * np.abs(fd)
    bad = ~(err <= tol)  # NaN counts as a mismatch
    if np.any(bad):
        excess = np.where(bad, np.nan_to_num(err / tol, nan=np.inf, posinf=np.inf), 0.0)
        idx = np.unravel_index(np.argmax(excess), J.shape)
        where = ", ".join(str(int(i)) for i in idx)
        rel = err[idx] / abs(fd[idx]) if fd[idx] != 0 else np.inf
        raise AssertionError(
            f"{label}Jacobian mismatch in {int(bad.sum())} of {J.size} entries; worst at "
            f"({where}): analytic {J[idx]:.9g}, finite difference {fd[idx]:.9g}, "
            f"|diff| {err[idx]:.3g}, relative error {rel:.3g} (rtol={rtol:g}, atol={atol:g}, eps={eps:g})")
    return fd
