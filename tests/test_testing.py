"""contactopt.testing: the finite-difference derivative check itself."""

import mujoco
import numpy as np
import pytest

from contactopt.costs import Qpos
from contactopt.testing import check_derivatives, finite_difference_jacobian

FREE_HINGE_XML = """
<mujoco>
  <worldbody>
    <body><freejoint/><geom size=".1"/>
      <body pos=".3 0 0"><joint type="hinge" axis="0 1 0"/><geom size=".05"/></body>
    </body>
  </worldbody>
</mujoco>"""


def _sin_ax(A):
    """f(x) = sin(x) ⊙ (A x) and its Jacobian diag(cos x ⊙ A x) + diag(sin x) A."""
    def f(x):
        return np.sin(x) * (A @ x)

    def jac(x):
        return np.diag(np.cos(x) * (A @ x)) + np.sin(x)[:, None] * A

    return f, jac


def test_correct_jacobian_passes_and_returns_the_finite_differences(rng):
    A = rng.normal(size=(4, 4))
    x = rng.normal(size=4)
    f, jac = _sin_ax(A)
    fd = check_derivatives(f, x, jac(x), name="sin(x) A x")
    assert fd.shape == (4, 4)
    np.testing.assert_allclose(fd, jac(x), rtol=1e-6, atol=1e-8)
    check_derivatives(f, x, jac)  # a callable Jacobian is evaluated at x
    np.testing.assert_array_equal(finite_difference_jacobian(f, x), fd)
    # a scalar function: a gradient of shape (n,)
    g = check_derivatives(lambda y: 0.5 * y @ A @ y, x, 0.5 * (A + A.T) @ x)
    assert g.shape == (4,)


def test_wrong_jacobian_fails_naming_the_worst_entry(rng):
    A = rng.normal(size=(3, 5))
    x = rng.normal(size=5)

    def f(y):
        return A @ y ** 2

    J = 2 * A * x
    check_derivatives(f, x, J)
    J_bad = J.copy()
    J_bad[2, 3] += 0.1
    J_bad[0, 1] += 1e-3
    with pytest.raises(AssertionError, match=r"my residual: .*2 of 15 entries.*worst at \(2, 3\)") as err:
        check_derivatives(f, x, J_bad, name="my residual")
    msg = str(err.value)
    assert f"{J_bad[2, 3]:.9g}" in msg and f"{J[2, 3]:.9g}" in msg and "relative error" in msg
    with pytest.raises(AssertionError, match="shape"):
        check_derivatives(f, x, J[:2])
    J_nan = J.copy()
    J_nan[1, 1] = np.nan  # NaN is a mismatch, and the worst one
    with pytest.raises(AssertionError, match=r"1 of 15 entries; worst at \(1, 1\): analytic nan"):
        check_derivatives(f, x, J_nan)
    # tolerances: a small error passes with a loose atol, fails with a tight one
    check_derivatives(f, x, J + 1e-5, atol=1e-4)
    with pytest.raises(AssertionError):
        check_derivatives(f, x, J + 1e-5, atol=1e-6, rtol=0.0)


def test_quaternion_retract_on_a_free_joint(rng):
    """Qpos residual of a free joint + hinge: the Jacobian is w.r.t. tangent perturbations
    q ⊕ dq (mj_integratePos), nv = 7 columns for nq = 8 coordinates."""
    model = mujoco.MjModel.from_xml_string(FREE_HINGE_XML)
    nq, nv = model.nq, model.nv
    assert (nq, nv) == (8, 7)
    target = model.qpos0.copy()
    res = Qpos(model, target)
    q = target.copy()
    q[:3] = rng.normal(size=3)
    axis = rng.normal(size=3)
    q[3:7] = np.concatenate([[np.cos(0.6)], np.sin(0.6) * axis / np.linalg.norm(axis)])
    q[7] = 0.4
    x = np.concatenate([q, np.zeros(nv)])
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    _, jx, _ = res.evaluate(data, x, None, True)
    J = jx[:, :nv]  # the position block

    def retract(qq, dq):
        mujoco.mj_integratePos(model, qq, dq, 1.0)
        return qq

    def residual(qq):
        return res(np.concatenate([qq, np.zeros(nv)]))

    fd = check_derivatives(residual, q, J, retract=retract, rtol=1e-6, atol=1e-7, name="Qpos")
    assert fd.shape == (nv, nv)
    assert np.abs(J[3:6, 3:6] - np.eye(3)).max() > 1e-2  # a real rotation: not the identity
    # the retract was applied to a copy: q itself is unchanged
    np.testing.assert_array_equal(q[7], 0.4)
    # without a retract the tangent dimension does not match the coordinates
    with pytest.raises(ValueError, match="retract"):
        check_derivatives(residual, q, J)
    # a wrong rotation block is caught
    J_bad = J.copy()
    J_bad[3:6, 3:6] = np.eye(3)
    with pytest.raises(AssertionError, match="Qpos"):
        check_derivatives(residual, q, J_bad, retract=retract, name="Qpos")
