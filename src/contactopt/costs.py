"""Costs shared by every solver: residual terms × norms, with analytic derivatives.

A cost is a weighted sum of *terms*; a term is a *residual* ``r(x, u) ∈ R^m``
passed through a *norm* ``n(r) ≥ 0``::

    ℓ(x, u) = Σ_k  w_k · n_k(r_k(x, u))

Derivatives are taken in the state's **tangent space** (the convention of
``mjd_transitionFD`` and :func:`contactopt.model.state_integrate`):
``dx = [dq (nv), dv (nv), dact (na)]`` of size ``ndx = 2 nv + na``, so
``∂ℓ/∂x`` means ``∂ℓ(x ⊕ dx)/∂dx`` at ``dx = 0``.  With the residual Jacobians
``J_x = ∂r/∂dx (m, ndx)`` and ``J_u = ∂r/∂u (m, nu)`` and the norm's gradient
``g = ∂n/∂r`` and Hessian ``H = ∂²n/∂r²``::

    ℓ_x  = Σ w J_xᵀ g          ℓ_u  = Σ w J_uᵀ g
    ℓ_xx = Σ w J_xᵀ H J_x      ℓ_uu = Σ w J_uᵀ H J_u      ℓ_ux = Σ w J_uᵀ H J_x

The second-order terms ``gᵀ ∂²r`` are dropped (the Gauss-Newton Hessian), so
``ℓ_xx`` and ``ℓ_uu`` are positive semi-definite whenever every norm is convex.

Norms (vectorized over any number of leading axes, ``r`` of shape ``(..., m)``):

* :class:`Quadratic`  ``½ ‖r‖²``
* :class:`SmoothAbs`  ``Σ_j √(r_j² + α²) − α``  (linear far away, quadratic near 0)
* :class:`Cosh`       ``Σ_j α² (cosh(r_j/α) − 1)``  (control-limiting; curvature 1 at 0)
* :class:`L2`         ``√(rᵀr + p²) − p``  (smooth Euclidean distance)

Residuals (``target`` is subtracted; positions in metres, world frame):

* :class:`SitePosition`, :class:`BodyPosition` — ``xpos − target`` (``mj_jacSite``/``mj_jacBody``)
* :class:`CenterOfMass` — subtree centre of mass of a body (default: whole model)
  (``mj_jacSubtreeCom``)
* :class:`CenterOfMassVelocity` — its linear velocity ``J_com(q) v``
* :class:`Qpos` — ``q ⊖ q_target`` on the configuration manifold (``mj_differentiatePos``),
  exact Jacobian for quaternion joints
* :class:`Qvel` — ``v − v_target``
* :class:`Control` — ``u − u_target``
* :class:`MechanicalEnergy` — ``½vᵀMv − m gᵀc − E_target``
* :class:`Combination` — ``Σ c_k r_k − offset`` (e.g. centre of mass minus the mean of the feet)
* :class:`UserResidual` — any callable, Jacobian by central finite differences

Time-step convention
--------------------
:class:`TrajectoryCost` evaluates the discrete total cost ::

    J(X, U) = Σ_{i=0}^{T-1} h · ℓ(x_i, u_i)  +  ℓ_f(x_T)

with ``h`` the planner's time step in seconds: the running cost is a *rate*
(cost per second) and is multiplied by ``h`` so that the total does not depend
on how finely the horizon is sampled; the terminal cost is a plain cost and is
*not* multiplied.  When no terminal cost is given, ``ℓ_f(x) = h · ℓ_state(x)``,
the state terms of the running cost counted as one more step (the seed paper's
"final cost equal to the running cost").  :class:`LinearQuadraticCost` (for
Euclidean test systems) has no time step; its weights already include it.

MuJoCo work per stage: ``mj_kinematics`` + ``mj_comPos`` (positions, frames,
subtree centres of mass) — nothing else.  The built-in residuals except :class:`Qpos`
(and :class:`CenterOfMassVelocity` with its finite-difference position block) are
evaluated for all stages of a trajectory at once from per-stage copies of the
positions and Jacobians they need (:meth:`Residual.batch_requests`); the others stage
by stage.  A :class:`UserResidual` that needs
more (contacts, sensors) may call further MuJoCo stages on the ``data`` it is
given.  Cost objects own a scratch ``MjData`` and are not thread-safe; use one
per thread.
"""

from __future__ import annotations

import abc
import math
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import mujoco
import numpy as np

from .errors import (
    NonFiniteError,
    ParameterError,
    ShapeError,
    as_array,
    check_nonnegative,
    check_positive,
)

__all__ = [
    # norms
    "Norm",
    "Quadratic",
    "SmoothAbs",
    "Cosh",
    "L2",
    "OneSidedQuadratic",
    # residuals
    "Residual",
    "SitePosition",
    "BodyPosition",
    "CenterOfMass",
    "CenterOfMassVelocity",
    "Qpos",
    "Qvel",
    "Control",
    "MechanicalEnergy",
    "Combination",
    "UserResidual",
    # costs
    "CostTerm",
    "StageCost",
    "StageDerivatives",
    "CostDerivatives",
    "TrajectoryCostLike",
    "TrajectoryCost",
    "LinearQuadraticCost",
]


# =========================================================================== norms


class Norm(abc.ABC):
    """A scalar function ``n(r) ≥ 0`` of a residual vector with ``n(0) = 0``.

    All methods accept ``r`` of shape ``(..., m)`` and act on the last axis.
    """

    #: True when the Hessian is diagonal (then :meth:`hessian_diagonal` is exact).
    diagonal_hessian: bool = True

    @abc.abstractmethod
    def value(self, r: np.ndarray) -> np.ndarray:
        """``n(r)``, shape ``(...)``."""

    @abc.abstractmethod
    def gradient(self, r: np.ndarray) -> np.ndarray:
        """``∂n/∂r``, shape ``(..., m)``."""

    def hessian_diagonal(self, r: np.ndarray) -> np.ndarray:
        """Diagonal of ``∂²n/∂r²``, shape ``(..., m)`` (only exact if :attr:`diagonal_hessian`)."""
        return np.diagonal(self.hessian(r), axis1=-2, axis2=-1).copy()

    def hessian(self, r: np.ndarray) -> np.ndarray:
        """``∂²n/∂r²``, shape ``(..., m, m)``."""
        d = self.hessian_diagonal(r)
        out = np.zeros(d.shape + (d.shape[-1],))
        idx = np.arange(d.shape[-1])
        out[..., idx, idx] = d
        return out

    def least_squares(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The norm as a sum of squares, for Gauss-Newton solvers that minimize ``½‖ρ‖²``.

        Returns ``(ρ (..., m), ∂ρ/∂r (..., m, m))`` with ``½ ρᵀρ = n(r)`` and
        ``(∂ρ/∂r)ᵀ ρ = ∂n/∂r`` exactly; ``(∂ρ/∂r)ᵀ(∂ρ/∂r)`` is the Gauss-Newton curvature
        (equal to ``∂²n/∂r²`` for :class:`Quadratic`, and at ``r = 0`` for every built-in norm).
        A norm that has no such form raises :class:`~contactopt.errors.ParameterError`.
        """
        raise ParameterError(f"norm {type(self).__name__} has no least-squares form; implement "
                             "least_squares(r) -> (rho, drho_dr) to use it with a least-squares planner")

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


def _diagonal_jacobian(d: np.ndarray) -> np.ndarray:
    """``(..., m) → (..., m, m)`` diagonal matrices."""
    out = np.zeros(d.shape + (d.shape[-1],))
    idx = np.arange(d.shape[-1])
    out[..., idx, idx] = d
    return out


class Quadratic(Norm):
    """``n(r) = ½ rᵀr``; gradient ``r``; Hessian ``I``; least-squares form ``ρ = r``."""

    def least_squares(self, r):
        r = np.asarray(r, dtype=float)
        return r.copy(), _diagonal_jacobian(np.ones_like(r))

    def value(self, r):
        r = np.asarray(r, dtype=float)
        return 0.5 * np.einsum("...i,...i->...", r, r)

    def gradient(self, r):
        return np.array(r, dtype=float, copy=True)

    def hessian_diagonal(self, r):
        return np.ones(np.shape(r))


class SmoothAbs(Norm):
    """Smooth absolute value, summed over components: ``n(r) = Σ_j √(r_j² + α²) − α``.

    Quadratic (curvature ``1/α``) within ``|r_j| ≲ α`` and linear with slope 1
    beyond, so a weight keeps the units of the residual (seed paper, Sec. IV-A).
    Gradient ``r_j / s_j``, Hessian ``diag(α² / s_j³)`` with ``s_j = √(r_j² + α²)``.

    Args:
      alpha: smoothing length ``α > 0`` in the residual's units.
    """

    def __init__(self, alpha: float = 0.1):
        self.alpha = check_positive("alpha", alpha)

    def value(self, r):
        r = np.asarray(r, dtype=float)
        a = self.alpha
        return np.sum(np.sqrt(r * r + a * a) - a, axis=-1)

    def gradient(self, r):
        r = np.asarray(r, dtype=float)
        return r / np.sqrt(r * r + self.alpha ** 2)

    def hessian_diagonal(self, r):
        r = np.asarray(r, dtype=float)
        a2 = self.alpha ** 2
        s = np.sqrt(r * r + a2)
        return a2 / (s * s * s)

    def least_squares(self, r):
        """``ρ_j = r_j √(2/(s_j + α))`` (so ``½ρ_j² = s_j − α``), ``∂ρ_j/∂r_j = √((s_j + α)/2)/s_j``."""
        r = np.asarray(r, dtype=float)
        a = self.alpha
        s = np.sqrt(r * r + a * a)
        return r * np.sqrt(2.0 / (s + a)), _diagonal_jacobian(np.sqrt(0.5 * (s + a)) / s)


class Cosh(Norm):
    """Control-limiting cost, summed over components: ``n(r) = Σ_j α² (cosh(r_j/α) − 1)``.

    Curvature 1 at the origin (like ``½ r²``) and exponential growth beyond
    ``|r_j| ≈ α`` (seed paper, Sec. IV-A, Fig. 3).  Gradient ``α sinh(r_j/α)``,
    Hessian ``diag(cosh(r_j/α))``.  Overflows to ``inf`` for ``|r/α| ≳ 710``.

    Args:
      alpha: soft limit ``α > 0`` in the residual's units.
    """

    def __init__(self, alpha: float = 1.0):
        self.alpha = check_positive("alpha", alpha)

    def value(self, r):
        r = np.asarray(r, dtype=float)
        a = self.alpha
        with np.errstate(over="ignore"):
            return np.sum(a * a * (np.cosh(r / a) - 1.0), axis=-1)

    def gradient(self, r):
        r = np.asarray(r, dtype=float)
        a = self.alpha
        with np.errstate(over="ignore"):
            return a * np.sinh(r / a)

    def hessian_diagonal(self, r):
        r = np.asarray(r, dtype=float)
        with np.errstate(over="ignore"):
            return np.cosh(r / self.alpha)

    def least_squares(self, r):
        """``ρ_j = 2α sinh(r_j/2α)`` (so ``½ρ_j² = α²(cosh(r_j/α) − 1)``), ``∂ρ_j/∂r_j = cosh(r_j/2α)``."""
        r = np.asarray(r, dtype=float)
        a = self.alpha
        with np.errstate(over="ignore"):
            return 2.0 * a * np.sinh(r / (2.0 * a)), _diagonal_jacobian(np.cosh(r / (2.0 * a)))


class L2(Norm):
    """Smooth Euclidean norm: ``n(r) = √(rᵀr + p²) − p``.

    Quadratic (curvature ``1/p``) within ``‖r‖ ≲ p``, linear in the distance
    beyond.  With ``s = √(rᵀr + p²)``: gradient ``r/s``, Hessian
    ``I/s − r rᵀ/s³`` (positive definite: eigenvalues ``1/s`` and ``p²/s³``).

    Args:
      p: smoothing length ``p > 0`` in the residual's units.
    """

    diagonal_hessian = False

    def __init__(self, p: float = 0.1):
        self.p = check_positive("p", p)

    def _s(self, r):
        return np.sqrt(np.einsum("...i,...i->...", r, r) + self.p ** 2)

    def value(self, r):
        r = np.asarray(r, dtype=float)
        return self._s(r) - self.p

    def gradient(self, r):
        r = np.asarray(r, dtype=float)
        return r / self._s(r)[..., None]

    def hessian(self, r):
        r = np.asarray(r, dtype=float)
        s = self._s(r)[..., None, None]
        eye = np.eye(r.shape[-1])
        return eye / s - r[..., :, None] * r[..., None, :] / s ** 3

    def hessian_diagonal(self, r):
        r = np.asarray(r, dtype=float)
        s = self._s(r)[..., None]
        return 1.0 / s - r * r / s ** 3

    def least_squares(self, r):
        """``ρ = c r`` with ``c = √(2/(s + p))`` (so ``½‖ρ‖² = s − p``) and
        ``∂ρ/∂r = c I − c r rᵀ / (2 s (s + p))``."""
        r = np.asarray(r, dtype=float)
        p = self.p
        s = self._s(r)[..., None]
        c = np.sqrt(2.0 / (s + p))
        eye = np.eye(r.shape[-1])
        J = c[..., None] * eye - (c / (2.0 * s * (s + p)))[..., None] * r[..., :, None] * r[..., None, :]
        return c * r, J


# =========================================================================== residuals


def _object_id(model: mujoco.MjModel, objtype: mujoco.mjtObj, kind: str, ref, argname: str) -> int:
    """Resolve a name or index of a site/body/joint/actuator, with a clear error."""
    count = {
        mujoco.mjtObj.mjOBJ_SITE: model.nsite,
        mujoco.mjtObj.mjOBJ_BODY: model.nbody,
        mujoco.mjtObj.mjOBJ_JOINT: model.njnt,
        mujoco.mjtObj.mjOBJ_ACTUATOR: model.nu,
    }[objtype]
    if isinstance(ref, (int, np.integer)) and not isinstance(ref, bool):
        if not 0 <= int(ref) < count:
            raise ParameterError(f"{argname}: {kind} index {ref} out of range (model has {count})")
        return int(ref)
    if not isinstance(ref, str):
        raise ParameterError(f"{argname}: expected a {kind} name or index, got {ref!r}")
    idx = mujoco.mj_name2id(model, objtype, ref)
    if idx < 0:
        names = [mujoco.mj_id2name(model, objtype, i) for i in range(count)]
        names = [n for n in names if n]
        shown = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")
        raise ParameterError(f"{argname}: model has no {kind} named {ref!r} ({kind}s: {shown or 'none'})")
    return idx


def _axes(axes, argname: str = "axes") -> np.ndarray:
    """Parse ``"xyz"``-style or index-list axes into an index array."""
    if isinstance(axes, str):
        lookup = {"x": 0, "y": 1, "z": 2}
        if not axes or any(c not in lookup for c in axes) or len(set(axes)) != len(axes):
            raise ParameterError(f"{argname}: expected distinct letters from 'xyz', got {axes!r}")
        return np.array([lookup[c] for c in axes], dtype=int)
    idx = np.asarray(axes, dtype=int).reshape(-1)
    if idx.size == 0 or np.any(idx < 0) or np.any(idx > 2) or len(set(idx.tolist())) != idx.size:
        raise ParameterError(f"{argname}: expected distinct indices in 0..2, got {axes!r}")
    return idx


def _joint_dofs(model: mujoco.MjModel, joints, argname: str) -> np.ndarray:
    """DoF (velocity-space) indices of a list of joints (names or indices)."""
    dofs: list[int] = []
    for j in joints:
        jid = _object_id(model, mujoco.mjtObj.mjOBJ_JOINT, "joint", j, argname)
        adr = int(model.jnt_dofadr[jid])
        jt = int(model.jnt_type[jid])
        n = {int(mujoco.mjtJoint.mjJNT_FREE): 6, int(mujoco.mjtJoint.mjJNT_BALL): 3}.get(jt, 1)
        dofs.extend(range(adr, adr + n))
    return np.array(dofs, dtype=int)


class OneSidedQuadratic(Norm):
    """Soft bound, summed over components: ``n(r) = ½ Σ_j min(r_j, 0)²`` (``upper=False``:
    penalizes ``r < 0``) or ``n(r) = ½ Σ_j max(r_j, 0)²`` (``upper=True``: penalizes ``r > 0``).

    Zero on the allowed side and quadratic beyond, so with a large weight it keeps a
    residual ``r = z − z_min`` (``upper=False``) or ``r = z − z_max`` (``upper=True``) on its
    side without pulling it anywhere inside.  Gradient ``min(r_j, 0)`` (``max(r_j, 0)``),
    Gauss-Newton Hessian ``diag(1 where the bound is violated, else 0)``.  Not a norm in
    the strict sense (zero on a half-space); convex and once continuously differentiable.

    Args:
      upper: which side is penalized: False (default) ``r < 0``, True ``r > 0``.
    """

    def __init__(self, upper: bool = False):
        if not isinstance(upper, (bool, np.bool_)):
            raise ParameterError(f"upper must be True or False, got {upper!r}")
        self.upper = bool(upper)

    def _violation(self, r):
        r = np.asarray(r, dtype=float)
        return np.maximum(r, 0.0) if self.upper else np.minimum(r, 0.0)

    def value(self, r):
        v = self._violation(r)
        return 0.5 * np.einsum("...i,...i->...", v, v)

    def gradient(self, r):
        return self._violation(r)

    def hessian_diagonal(self, r):
        r = np.asarray(r, dtype=float)
        return ((r > 0.0) if self.upper else (r < 0.0)).astype(float)

    def least_squares(self, r):
        """``ρ = min(r, 0)`` (``max(r, 0)`` with ``upper``), ``∂ρ/∂r = diag(1 where violated)``."""
        return self._violation(r), _diagonal_jacobian(self.hessian_diagonal(r))


class Residual(abc.ABC):
    """A vector function ``r(x, u) ∈ R^m`` of a MuJoCo state and control.

    Subclasses implement :meth:`evaluate`; ``data`` passed to it holds the state
    ``x`` with ``mj_kinematics`` and ``mj_comPos`` already run.

    Attributes:
      model: the ``MjModel`` the residual was built for.
      size: ``m``, the residual length.
      name: label used in error messages and logs.
      uses_control: whether ``r`` depends on ``u`` (such residuals cannot appear in
        a terminal cost).
    """

    def __init__(self, model: mujoco.MjModel, size: int, name: str, *, uses_control: bool = False):
        if not isinstance(model, mujoco.MjModel):
            raise ParameterError(f"{name}: model must be a mujoco.MjModel, got {type(model).__name__}")
        self.model = model
        self.size = int(size)
        self.name = name
        self.uses_control = bool(uses_control)
        self.nv = model.nv
        self.nu = model.nu
        self.ndx = 2 * model.nv + model.na

    @abc.abstractmethod
    def evaluate(self, data: mujoco.MjData, x: np.ndarray, u: np.ndarray | None, jacobian: bool):
        """Residual and (optionally) its Jacobians at ``(x, u)``.

        Args:
          data: ``MjData`` holding ``x`` with ``mj_kinematics`` + ``mj_comPos`` done
            (may be used as scratch).
          x: ``(nq + nv + na,)`` packed state.
          u: ``(nu,)`` control, or None in a terminal cost.
          jacobian: whether to return Jacobians.

        Returns:
          ``(r (m,), J_x (m, ndx) | None, J_u (m, nu) | None)``; a None Jacobian is zero
          (always None when ``jacobian`` is false).
        """

    def batch_requests(self, jacobian: bool):
        """Per-stage MuJoCo quantities this residual needs to be evaluated over all stages at once.

        Returns a tuple of request keys (gathered by ``_evaluate_stages``: ``("site_xpos", id)``,
        ``("xpos", id)``, ``("xipos", id)``, ``("subtree_com", id)`` → ``(N, 3)`` arrays;
        ``("jac_site", id)``, ``("jac_body", id)``, ``("jac_bodycom", id)``,
        ``("jac_subtreecom", id)`` → ``(N, 3, nv)`` translational Jacobians), or None when
        the residual can only be evaluated stage by stage with :meth:`evaluate` (the default).
        A subclass that overrides :meth:`evaluate` but not :meth:`batch_evaluate` is
        evaluated stage by stage (its own :meth:`evaluate` wins).
        """
        return None

    def batch_evaluate(self, kin: dict, X: np.ndarray, U: np.ndarray | None, jacobian: bool):
        """:meth:`evaluate` over ``N`` stages at once (only if :meth:`batch_requests` is not None).

        Args:
          kin: the gathered requests, ``key → (N, 3)`` or ``(N, 3, nv)`` arrays.
          X: ``(N, nx)`` states; U: ``(N, nu)`` controls or None.
          jacobian: whether to return Jacobians.

        Returns:
          ``(R (N, m), J_x (N, m, ndx) | None, J_u (N, m, nu) | None)`` with the same
          values as :meth:`evaluate` stage by stage (to roundoff).
        """
        raise NotImplementedError(f"{type(self).__name__} has no batched evaluation")

    def __call__(self, x, u=None) -> np.ndarray:
        """Evaluate ``r(x, u)`` on a fresh ``MjData`` (convenience; slow in loops)."""
        data = mujoco.MjData(self.model)
        x = _load_state(self.model, data, x, "x")
        if u is not None:
            u = as_array("u", u, (self.nu,))
        if self.uses_control and u is None:
            raise ParameterError(f"{self.name}: this residual needs a control u")
        mujoco.mj_kinematics(self.model, data)
        mujoco.mj_comPos(self.model, data)
        return self.evaluate(data, x, u, False)[0].copy()

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"{type(self).__name__}(name={self.name!r}, size={self.size})"


def _defining_class(cls, name):
    for c in cls.__mro__:
        if name in c.__dict__:
            return c
    return object


_BATCHABLE_CLASSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # class -> batchable


def _batch_requests(residual: Residual, jacobian: bool):
    """``residual.batch_requests(jacobian)``, or None where a subclass overrode ``evaluate``
    below the class that implements ``batch_evaluate`` (the batch would bypass it)."""
    cls = type(residual)
    ok = _BATCHABLE_CLASSES.get(cls)
    if ok is None:
        ok = _BATCHABLE_CLASSES[cls] = issubclass(_defining_class(cls, "batch_evaluate"),
                                                  _defining_class(cls, "evaluate"))
    if not ok:
        return None
    return residual.batch_requests(jacobian)


def _load_state(model, data, x, argname):
    x = as_array(argname, x, (model.nq + model.nv + model.na,))
    nq, nv = model.nq, model.nv
    data.qpos[:] = x[:nq]
    data.qvel[:] = x[nq:nq + nv]
    if model.na:
        data.act[:] = x[nq + nv:]
    return x


class _PointResidual(Residual):
    """Shared machinery of world-frame point residuals ``p(q)[axes] − target[axes]``."""

    def __init__(self, model, size, name, axes, target):
        super().__init__(model, size, name)
        self.axes = _axes(axes, f"{name} axes")
        self.size = self.axes.size
        self.target = (np.zeros(3) if target is None
                       else as_array(f"{name} target", target, (3,))).copy()
        self._jac = np.zeros((3, model.nv))

    def _point(self, data) -> np.ndarray:  # pragma: no cover - abstract helper
        raise NotImplementedError

    def _jacobian(self, data) -> None:  # pragma: no cover - abstract helper
        raise NotImplementedError

    #: (point request, Jacobian request) kinds of :meth:`batch_requests`, set by subclasses
    _request_kinds: tuple[str, str] | None = None

    def _request_id(self) -> int:  # pragma: no cover - abstract helper
        raise NotImplementedError

    def evaluate(self, data, x, u, jacobian):
        r = self._point(data)[self.axes] - self.target[self.axes]
        if not jacobian:
            return r, None, None
        self._jacobian(data)
        jx = np.zeros((self.size, self.ndx))
        jx[:, :self.nv] = self._jac[self.axes]
        return r, jx, None

    def batch_requests(self, jacobian):
        if self._request_kinds is None:
            return None
        point, jac = self._request_kinds
        i = self._request_id()
        return ((point, i), (jac, i)) if jacobian else ((point, i),)

    def batch_evaluate(self, kin, X, U, jacobian):
        point, jac = self._request_kinds
        i = self._request_id()
        r = kin[(point, i)][:, self.axes] - self.target[self.axes]
        if not jacobian:
            return r, None, None
        jx = np.zeros((X.shape[0], self.size, self.ndx))
        jx[:, :, :self.nv] = kin[(jac, i)][:, self.axes]
        return r, jx, None


class SitePosition(_PointResidual):
    """World position of a site minus a target: ``r = site_xpos[axes] − target[axes]`` (m).

    Jacobian w.r.t. ``dq``: the translational site Jacobian ``mj_jacSite`` (3×nv);
    zero w.r.t. velocities and controls.

    Args:
      model: the model.
      site: site name or index.
      target: ``(3,)`` world position in metres (default origin); only ``axes`` are used.
      axes: components to keep: a string from ``"xyz"`` or indices (default all three).
    """

    def __init__(self, model, site, target=None, *, axes="xyz", name: str | None = None):
        sid = _object_id(model, mujoco.mjtObj.mjOBJ_SITE, "site", site, "site")
        label = name or f"site[{mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SITE, sid) or sid}]"
        super().__init__(model, 3, label, axes, target)
        self.site_id = sid

    _request_kinds = ("site_xpos", "jac_site")

    def _request_id(self):
        return self.site_id

    def _point(self, data):
        return data.site_xpos[self.site_id]

    def _jacobian(self, data):
        mujoco.mj_jacSite(self.model, data, self._jac, None, self.site_id)


class BodyPosition(_PointResidual):
    """World position of a body's frame origin minus a target: ``r = xpos[axes] − target[axes]`` (m).

    Set ``point="com"`` to use the body's own centre of mass ``xipos`` instead of its
    frame origin.  Jacobian from ``mj_jacBody`` (or ``mj_jacBodyCom``).

    Args:
      model: the model.
      body: body name or index.
      target: ``(3,)`` world position in metres (default origin).
      axes: components to keep (default ``"xyz"``).
      point: ``"origin"`` or ``"com"``.
    """

    def __init__(self, model, body, target=None, *, axes="xyz", point: str = "origin",
                 name: str | None = None):
        bid = _object_id(model, mujoco.mjtObj.mjOBJ_BODY, "body", body, "body")
        if point not in ("origin", "com"):
            raise ParameterError(f"point must be 'origin' or 'com', got {point!r}")
        label = name or f"body[{mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, bid) or bid}]"
        super().__init__(model, 3, label, axes, target)
        self.body_id = bid
        self.point = point

    def _request_id(self):
        return self.body_id

    @property
    def _request_kinds(self):
        return ("xpos", "jac_body") if self.point == "origin" else ("xipos", "jac_bodycom")

    def _point(self, data):
        return data.xpos[self.body_id] if self.point == "origin" else data.xipos[self.body_id]

    def _jacobian(self, data):
        if self.point == "origin":
            mujoco.mj_jacBody(self.model, data, self._jac, None, self.body_id)
        else:
            mujoco.mj_jacBodyCom(self.model, data, self._jac, None, self.body_id)


class CenterOfMass(_PointResidual):
    """Centre of mass of a body's subtree minus a target: ``r = subtree_com[axes] − target[axes]`` (m).

    ``body=0`` (the world body, the default) gives the whole model's centre of mass.
    Jacobian from ``mj_jacSubtreeCom``.
    """

    def __init__(self, model, body=0, target=None, *, axes="xyz", name: str | None = None):
        bid = _object_id(model, mujoco.mjtObj.mjOBJ_BODY, "body", body, "body")
        label = name or ("com" if bid == 0 else
                         f"com[{mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, bid) or bid}]")
        super().__init__(model, 3, label, axes, target)
        self.body_id = bid

    _request_kinds = ("subtree_com", "jac_subtreecom")

    def _request_id(self):
        return self.body_id

    def _point(self, data):
        return data.subtree_com[self.body_id]

    def _jacobian(self, data):
        mujoco.mj_jacSubtreeCom(self.model, data, self._jac, self.body_id)


class CenterOfMassVelocity(Residual):
    """Linear velocity of a subtree's centre of mass minus a target (m/s).

    ``r = (J_com(q) v)[axes] − target[axes]``.  ``∂r/∂dv = J_com[axes]`` exactly;
    ``∂r/∂dq = ∂(J_com(q) v)/∂q`` has no MuJoCo routine and is computed by forward
    finite differences on the manifold (``nv`` kinematics calls per stage) unless
    ``position_jacobian=False``, which drops it (a common Gauss-Newton shortcut that
    is exact at rest, ``v = 0``).

    Args:
      model: the model.
      body: subtree root (name or index); 0 = whole model.
      target: ``(3,)`` velocity in m/s (default zero).
      axes: components to keep (default ``"xyz"``).
      position_jacobian: include the finite-difference ``∂r/∂dq`` block.
      eps: finite-difference step for that block (rad or m).
    """

    def __init__(self, model, body=0, target=None, *, axes="xyz", position_jacobian: bool = True,
                 eps: float = 1e-7, name: str | None = None):
        bid = _object_id(model, mujoco.mjtObj.mjOBJ_BODY, "body", body, "body")
        label = name or ("com_vel" if bid == 0 else
                         f"com_vel[{mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, bid) or bid}]")
        super().__init__(model, 3, label)
        self.body_id = bid
        self.axes = _axes(axes, f"{label} axes")
        self.size = self.axes.size
        self.target = (np.zeros(3) if target is None
                       else as_array(f"{label} target", target, (3,))).copy()
        self.position_jacobian = bool(position_jacobian)
        self.eps = check_positive("eps", eps)
        self._jac = np.zeros((3, model.nv))
        self._scratch: mujoco.MjData | None = None

    def _velocity(self, data, v):
        mujoco.mj_jacSubtreeCom(self.model, data, self._jac, self.body_id)
        return self._jac @ v

    def evaluate(self, data, x, u, jacobian):
        nq, nv = self.model.nq, self.nv
        v = x[nq:nq + nv]
        vel = self._velocity(data, v)
        r = vel[self.axes] - self.target[self.axes]
        if not jacobian:
            return r, None, None
        jx = np.zeros((self.size, self.ndx))
        jx[:, nv:2 * nv] = self._jac[self.axes]
        if self.position_jacobian:
            # forward differences on the manifold: (r(q ⊕ ε e_j) − r(q)) / ε
            if self._scratch is None:
                self._scratch = mujoco.MjData(self.model)
            s = self._scratch
            m = self.model
            q0 = x[:nq]
            vel0 = vel[self.axes]
            dq = np.zeros(nv)
            eps = self.eps
            for j in range(nv):
                s.qpos[:] = q0
                dq[j] = eps
                mujoco.mj_integratePos(m, s.qpos, dq, 1.0)
                dq[j] = 0.0
                mujoco.mj_kinematics(m, s)
                mujoco.mj_comPos(m, s)
                mujoco.mj_jacSubtreeCom(m, s, self._jac, self.body_id)
                jx[:, j] = ((self._jac @ v)[self.axes] - vel0) / eps
        return r, jx, None

    def batch_requests(self, jacobian):
        if jacobian and self.position_jacobian:
            return None  # the finite-difference ∂r/∂dq block runs stage by stage
        return (("jac_subtreecom", self.body_id),)

    def batch_evaluate(self, kin, X, U, jacobian):
        nq, nv = self.model.nq, self.nv
        jac = kin[("jac_subtreecom", self.body_id)]                       # (N, 3, nv)
        vel = np.matmul(jac, X[:, nq:nq + nv, None])[:, :, 0]             # (N, 3)
        r = vel[:, self.axes] - self.target[self.axes]
        if not jacobian:
            return r, None, None
        jx = np.zeros((X.shape[0], self.size, self.ndx))
        jx[:, :, nv:2 * nv] = jac[:, self.axes]
        return r, jx, None


class Qpos(Residual):
    """Configuration error on the manifold: ``r = (q ⊖ q_target)[dofs]`` (rad or m), size ``len(dofs)``
    (the angle of an unlimited hinge wrapped into ``(−π, π]``, see ``wrap``).

    ``q ⊖ q_target`` is ``mj_differentiatePos(q_target → q)``: hinge/slide differences,
    free-joint translations in the world frame, and for quaternions (ball, free) the
    rotation vector ``φ = log(q_targetˉ¹ ⊗ q)`` (angle wrapped to (−π, π]).  The Jacobian
    w.r.t. ``dq`` is the identity except for rotation blocks, where perturbing
    ``q ← q ⊗ exp(δ)`` gives the inverse right Jacobian of SO(3)::

        ∂φ/∂δ = J_r⁻¹(φ) = I + ½[φ]× + (1/θ² − (1 + cos θ)/(2 θ sin θ)) [φ]×²,  θ = ‖φ‖

    Args:
      model: the model.
      target: ``(nq,)`` target configuration (default ``model.qpos0``).
      joints: joints (names or indices) whose DoFs to keep; default all.  Mutually
        exclusive with ``dofs``.
      dofs: velocity-space indices to keep.
      wrap: ``"auto"`` (default) wraps the error of every hinge without a range limit into
        ``(−π, π]`` — such a hinge's configuration space is the circle, where ``θ`` and
        ``θ + 2π`` are one configuration (as quaternion errors already are); ``True`` wraps
        every selected hinge, ``False`` none (the plain difference, e.g. to count turns).
    """

    def __init__(self, model, target=None, *, joints=None, dofs=None, name: str = "qpos", wrap="auto"):
        super().__init__(model, 0, name)
        if wrap not in ("auto", True, False):
            raise ParameterError(f"{name}: wrap must be 'auto', True or False, got {wrap!r}")
        self.target = (model.qpos0.copy() if target is None
                       else as_array(f"{name} target", target, (model.nq,)).copy())
        mujoco.mj_normalizeQuat(model, self.target)
        self.dofs = _select_dofs(model, joints, dofs, name)
        self.size = self.dofs.size
        # rotation blocks: (dof address of the 3 rotational dofs) for ball and free joints
        self._rot = []
        for j in range(model.njnt):
            jt = int(model.jnt_type[j])
            adr = int(model.jnt_dofadr[j])
            if jt == int(mujoco.mjtJoint.mjJNT_FREE):
                self._rot.append(adr + 3)
            elif jt == int(mujoco.mjtJoint.mjJNT_BALL):
                self._rot.append(adr)
        self._diff = np.zeros(model.nv)
        # batched over stages when every selected DoF is a plain coordinate (hinge, slide or a
        # free joint's translation): there ``(q ⊖ q_target)_dof = q[qadr] − q_target[qadr]`` and
        # the Jacobian row is the unit vector of the DoF
        hinge = model.jnt_type[model.dof_jntid[self.dofs]] == int(mujoco.mjtJoint.mjJNT_HINGE)
        if wrap == "auto":
            hinge &= ~model.jnt_limited[model.dof_jntid[self.dofs]].astype(bool)
        #: positions in the residual whose error is wrapped into (−π, π]
        self.wrapped = np.flatnonzero(hinge) if wrap is not False else np.zeros(0, dtype=np.intp)
        self._qidx = _linear_qpos_index(model, self.dofs)
        if self._qidx is not None:
            self._jx = np.zeros((self.size, self.ndx))
            self._jx[np.arange(self.size), self.dofs] = 1.0

    def evaluate(self, data, x, u, jacobian):
        nq, nv = self.model.nq, self.nv
        mujoco.mj_differentiatePos(self.model, self._diff, 1.0, self.target, x[:nq])
        r = self._diff[self.dofs].copy()
        if self.wrapped.size:
            r[self.wrapped] = _wrap_angle(r[self.wrapped])
        if not jacobian:
            return r, None, None
        jq = np.eye(nv)
        for adr in self._rot:
            jq[adr:adr + 3, adr:adr + 3] = _so3_right_jacobian_inverse(self._diff[adr:adr + 3])
        jx = np.zeros((self.size, self.ndx))
        jx[:, :nv] = jq[self.dofs]
        return r, jx, None

    def batch_requests(self, jacobian):
        return None if self._qidx is None else ()

    def batch_evaluate(self, kin, X, U, jacobian):
        r = X[:, self._qidx] - self.target[self._qidx]
        if self.wrapped.size:
            r[:, self.wrapped] = _wrap_angle(r[:, self.wrapped])
        if not jacobian:
            return r, None, None
        return r, np.broadcast_to(self._jx, (X.shape[0],) + self._jx.shape).copy(), None


def _wrap_angle(a: np.ndarray) -> np.ndarray:
    """Angles ``a`` [rad] wrapped into ``(−π, π]``."""
    return np.pi - np.mod(np.pi - a, 2.0 * np.pi)


def _linear_qpos_index(model, dofs):
    """``(len(dofs),)`` qpos index of each DoF when all are plain coordinates (hinge, slide, free
    translation), else None (a ball or free rotation DoF: quaternion difference)."""
    out = np.empty(dofs.size, dtype=int)
    for k, dof in enumerate(dofs):
        j = int(model.dof_jntid[dof])
        jt = int(model.jnt_type[j])
        off = int(dof) - int(model.jnt_dofadr[j])
        if jt in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
            out[k] = model.jnt_qposadr[j]
        elif jt == int(mujoco.mjtJoint.mjJNT_FREE) and off < 3:
            out[k] = model.jnt_qposadr[j] + off
        else:
            return None
    return out


def _so3_right_jacobian_inverse(phi: np.ndarray) -> np.ndarray:
    """``J_r⁻¹(φ)`` of SO(3) for a rotation vector ``φ`` (3,), exact up to θ = π."""
    theta = math.sqrt(float(phi @ phi))
    S = np.array([[0.0, -phi[2], phi[1]], [phi[2], 0.0, -phi[0]], [-phi[1], phi[0], 0.0]])
    if theta < 1e-6:
        coef = 1.0 / 12.0 + theta * theta / 720.0
    else:
        coef = 1.0 / theta ** 2 - (1.0 + math.cos(theta)) / (2.0 * theta * math.sin(theta))
    return np.eye(3) + 0.5 * S + coef * (S @ S)


def _select_dofs(model, joints, dofs, name):
    if joints is not None and dofs is not None:
        raise ParameterError(f"{name}: give joints or dofs, not both")
    if joints is not None:
        if isinstance(joints, (str, int, np.integer)):
            joints = [joints]
        out = _joint_dofs(model, list(joints), f"{name} joints")
    elif dofs is not None:
        out = np.asarray(dofs, dtype=int).reshape(-1)
        if np.any(out < 0) or np.any(out >= model.nv):
            raise ParameterError(f"{name}: dof indices must lie in 0..{model.nv - 1}, got {dofs!r}")
    else:
        out = np.arange(model.nv)
    if out.size == 0:
        raise ParameterError(f"{name}: selects no degrees of freedom")
    return out


class Qvel(Residual):
    """Generalized-velocity error ``r = v[dofs] − target`` (rad/s or m/s).

    Args:
      model: the model.
      target: ``(len(dofs),)`` target velocities (default zero).
      joints / dofs: which DoFs (default all), as in :class:`Qpos`.
    """

    def __init__(self, model, target=None, *, joints=None, dofs=None, name: str = "qvel"):
        super().__init__(model, 0, name)
        self.dofs = _select_dofs(model, joints, dofs, name)
        self.size = self.dofs.size
        self.target = (np.zeros(self.size) if target is None
                       else as_array(f"{name} target", target, (self.size,)).copy())
        self._jx = np.zeros((self.size, self.ndx))
        self._jx[np.arange(self.size), model.nv + self.dofs] = 1.0

    def evaluate(self, data, x, u, jacobian):
        nq = self.model.nq
        r = x[nq + self.dofs] - self.target
        return (r, self._jx.copy(), None) if jacobian else (r, None, None)

    def batch_requests(self, jacobian):
        return ()

    def batch_evaluate(self, kin, X, U, jacobian):
        r = X[:, self.model.nq + self.dofs] - self.target
        if not jacobian:
            return r, None, None
        return r, np.broadcast_to(self._jx, (X.shape[0],) + self._jx.shape).copy(), None


class Control(Residual):
    """Control error ``r = u[actuators] − target`` (actuator units, e.g. N·m or normalized).

    Args:
      model: the model.
      target: ``(len(actuators),)`` target controls (default zero).
      actuators: actuator names or indices (default all).
    """

    def __init__(self, model, target=None, *, actuators=None, name: str = "ctrl"):
        super().__init__(model, 0, name, uses_control=True)
        if model.nu == 0:
            raise ParameterError(f"{name}: the model has no actuators")
        if actuators is None:
            idx = np.arange(model.nu)
        else:
            if isinstance(actuators, (str, int, np.integer)):
                actuators = [actuators]
            idx = np.array([_object_id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, "actuator", a,
                                       f"{name} actuators") for a in actuators], dtype=int)
        self.actuators = idx
        self.size = idx.size
        self.target = (np.zeros(self.size) if target is None
                       else as_array(f"{name} target", target, (self.size,)).copy())
        self._ju = np.zeros((self.size, model.nu))
        self._ju[np.arange(self.size), idx] = 1.0

    def evaluate(self, data, x, u, jacobian):
        r = u[self.actuators] - self.target
        return (r, None, self._ju.copy()) if jacobian else (r, None, None)

    def batch_requests(self, jacobian):
        return ()

    def batch_evaluate(self, kin, X, U, jacobian):
        r = U[:, self.actuators] - self.target
        if not jacobian:
            return r, None, None
        return r, None, np.broadcast_to(self._ju, (U.shape[0],) + self._ju.shape).copy()


class MechanicalEnergy(Residual):
    """Mechanical energy minus a target: ``r = E(q, v) − E_target`` (J), size 1.

    ``E = ½ vᵀM(q)v − m gᵀ c(q)`` with ``m`` the total mass, ``g`` the model's gravity and ``c``
    the centre of mass (MuJoCo's ``data.energy`` convention: potential zero at the origin).
    Jacobian: ``∂E/∂v = M v``; ``∂E/∂q = −m gᵀ J_c`` plus ``∂(½ vᵀMv)/∂q`` by forward
    differences of ``M(q)`` (``mj_crb`` on a scratch ``MjData``).  Used to pump energy into
    swing-up tasks, where a position cost alone stalls at the hanging stationary point.
    """

    def __init__(self, model, target: float = 0.0, *, name: str = "energy"):
        super().__init__(model, 1, name)
        self.target = float(target)
        self.mass = float(np.sum(model.body_mass))
        self.gravity = np.array(model.opt.gravity, dtype=float)
        self._jac = np.zeros((3, model.nv))
        self._mv = np.zeros(model.nv)
        self._mv2 = np.zeros(model.nv)
        self._scratch = mujoco.MjData(model)

    def energy(self, data) -> float:
        """E of ``data`` (``mj_kinematics`` + ``mj_comPos`` done); runs ``mj_crb`` on it."""
        m = self.model
        mujoco.mj_crb(m, data)
        mujoco.mj_mulM(m, data, self._mv, data.qvel)
        potential = -self.mass * float(self.gravity @ data.subtree_com[0])
        return 0.5 * float(data.qvel @ self._mv) + potential

    def evaluate(self, data, x, u, jacobian):
        m = self.model
        r = np.array([self.energy(data) - self.target])
        if not jacobian:
            return r, None, None
        nv = m.nv
        jx = np.zeros((1, self.ndx))
        mujoco.mj_jacSubtreeCom(m, data, self._jac, 0)
        jx[0, :nv] = -self.mass * (self.gravity @ self._jac)
        jx[0, nv:2 * nv] = self._mv
        ke = 0.5 * float(data.qvel @ self._mv)
        s, eps = self._scratch, 1e-6
        s.qvel[:] = data.qvel
        for j in range(nv):
            s.qpos[:] = data.qpos
            dq = np.zeros(nv)
            dq[j] = eps
            mujoco.mj_integratePos(m, s.qpos, dq, 1.0)
            mujoco.mj_kinematics(m, s)
            mujoco.mj_comPos(m, s)
            mujoco.mj_crb(m, s)
            mujoco.mj_mulM(m, s, self._mv2, s.qvel)
            jx[0, j] += (0.5 * float(s.qvel @ self._mv2) - ke) / eps
        return r, jx, None


class Combination(Residual):
    """Linear combination of residuals of equal size: ``r = Σ_k c_k r_k − offset``.

    Jacobians combine the same way, so analytic Jacobians stay analytic.  Example —
    horizontal distance of the centre of mass from the mean of the feet::

        Combination([(1.0, CenterOfMass(m, axes="xy")),
                     (-0.5, SitePosition(m, "left_foot", axes="xy")),
                     (-0.5, SitePosition(m, "right_foot", axes="xy"))])

    (the parts' own targets are subtracted inside each part).

    Args:
      parts: sequence of ``(coefficient, Residual)``; all residuals of the same size
        and model.
      offset: ``(m,)`` constant subtracted at the end (default zero).
    """

    def __init__(self, parts: Sequence[tuple[float, Residual]], offset=None, *,
                 name: str = "combination"):
        parts = list(parts)
        if not parts:
            raise ParameterError(f"{name}: needs at least one (coefficient, residual) part")
        for p in parts:
            if not (isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], Residual)):
                raise ParameterError(f"{name}: each part must be (coefficient, Residual), got {p!r}")
        model = parts[0][1].model
        size = parts[0][1].size
        for c, res in parts:
            if res.model is not model:
                raise ParameterError(f"{name}: all parts must be built for the same model")
            if res.size != size:
                raise ShapeError(f"{name}: part {res.name} has size {res.size}, expected {size}")
            if not math.isfinite(float(c)):
                raise NonFiniteError(f"{name}: coefficient of {res.name} is not finite")
        super().__init__(model, size, name, uses_control=any(r.uses_control for _, r in parts))
        self.parts = [(float(c), r) for c, r in parts]
        self.offset = (np.zeros(size) if offset is None
                       else as_array(f"{name} offset", offset, (size,)).copy())

    def _combine(self, results, lead: tuple, jacobian: bool):
        """``r = Σ_k c_k r_k − offset`` and the summed Jacobians from the parts' ``(r, J_x, J_u)``
        (``lead``: ``()`` for one stage, ``(N,)`` for a batch)."""
        r = np.empty(lead + (self.size,))
        r[...] = -self.offset
        jx = np.zeros(lead + (self.size, self.ndx)) if jacobian else None
        ju = None
        for (c, _), (ri, jxi, jui) in zip(self.parts, results):
            r += c * ri
            if jacobian:
                if jxi is not None:
                    jx += c * jxi
                if jui is not None:
                    if ju is None:
                        ju = np.zeros(lead + (self.size, self.nu))
                    ju += c * jui
        return r, jx, ju

    def evaluate(self, data, x, u, jacobian):
        return self._combine([res.evaluate(data, x, u, jacobian) for _, res in self.parts], (), jacobian)

    def batch_requests(self, jacobian):
        keys = []
        for _, res in self.parts:
            req = _batch_requests(res, jacobian)
            if req is None:
                return None
            keys.extend(k for k in req if k not in keys)
        return tuple(keys)

    def batch_evaluate(self, kin, X, U, jacobian):
        return self._combine([res.batch_evaluate(kin, X, U, jacobian) for _, res in self.parts],
                             (X.shape[0],), jacobian)


class UserResidual(Residual):
    """A residual given by a Python callable, with central finite-difference Jacobians.

    ``fn(model, data, x, u) -> r (size,)`` is called with ``data`` holding ``x`` after
    ``mj_kinematics`` + ``mj_comPos`` (it may run further MuJoCo stages on ``data``);
    ``u`` is None in a terminal cost.  Jacobians perturb the state on the manifold,
    ``x ⊕ (±ε e_j)`` for every tangent direction ``j < ndx`` (``mj_integratePos`` for
    ``dq``), and the control ``u ± ε e_j`` when ``uses_control``: ``2 (ndx + nu)``
    extra calls per stage.

    Args:
      model: the model.
      fn: the residual function.
      size: its output length ``m``.
      uses_control: whether ``fn`` reads ``u``.
      eps: finite-difference step (> 0).
    """

    def __init__(self, model, fn: Callable, size: int, *, uses_control: bool = False,
                 eps: float = 1e-6, name: str = "user"):
        if not callable(fn):
            raise ParameterError(f"{name}: fn must be callable, got {fn!r}")
        if int(size) < 1:
            raise ParameterError(f"{name}: size must be at least 1, got {size!r}")
        super().__init__(model, int(size), name, uses_control=uses_control)
        self.fn = fn
        self.eps = check_positive("eps", eps)
        self._scratch: mujoco.MjData | None = None

    def _call(self, data, x, u):
        r = as_array(f"residual {self.name} output", self.fn(self.model, data, x, u), (self.size,))
        return r.copy()

    def _call_at(self, x, u):
        s = self._scratch
        _load_state(self.model, s, x, "x")
        mujoco.mj_kinematics(self.model, s)
        mujoco.mj_comPos(self.model, s)
        return self._call(s, x, u)

    def evaluate(self, data, x, u, jacobian):
        r = self._call(data, x, u)
        if not jacobian:
            return r, None, None
        if self._scratch is None:
            self._scratch = mujoco.MjData(self.model)
        m = self.model
        nq, nv = m.nq, m.nv
        eps = self.eps
        jx = np.zeros((self.size, self.ndx))
        for j in range(self.ndx):
            cols = []
            for sign in (1.0, -1.0):
                xp = x.copy()
                if j < nv:
                    dq = np.zeros(nv)
                    dq[j] = sign * eps
                    q = xp[:nq].copy()
                    mujoco.mj_integratePos(m, q, dq, 1.0)
                    xp[:nq] = q
                else:
                    xp[nq + (j - nv)] += sign * eps
                cols.append(self._call_at(xp, u))
            jx[:, j] = (cols[0] - cols[1]) / (2 * eps)
        ju = None
        if self.uses_control and u is not None:
            ju = np.zeros((self.size, self.nu))
            for j in range(self.nu):
                up, um = u.copy(), u.copy()
                up[j] += eps
                um[j] -= eps
                ju[:, j] = (self._call_at(x, up) - self._call_at(x, um)) / (2 * eps)
        return r, jx, ju


# =========================================================================== stage costs


@dataclass(frozen=True)
class CostTerm:
    """One weighted term ``w · norm(residual(x, u))`` of a stage cost.

    Attributes:
      residual: the :class:`Residual`.
      norm: the :class:`Norm` (default :class:`Quadratic`).
      weight: ``w ≥ 0`` (finite).
    """

    residual: Residual
    norm: Norm = Quadratic()
    weight: float = 1.0

    def __post_init__(self):
        if not isinstance(self.residual, Residual):
            raise ParameterError(f"CostTerm residual must be a Residual, got {type(self.residual).__name__}")
        if not isinstance(self.norm, Norm):
            raise ParameterError(f"CostTerm norm must be a Norm, got {type(self.norm).__name__}")
        object.__setattr__(self, "weight",
                           check_nonnegative(f"weight of {self.residual.name}", self.weight))

    @property
    def name(self) -> str:
        """The residual's name (used in logs and error messages)."""
        return self.residual.name


@dataclass(frozen=True)
class StageDerivatives:
    """Value and derivatives of a stage cost at one ``(x, u)`` (tangent space).

    Attributes: ``l`` (scalar), ``lx (ndx,)``, ``lu (nu,)``, ``lxx (ndx, ndx)``,
    ``luu (nu, nu)``, ``lux (nu, ndx)``.
    """

    l: float
    lx: np.ndarray
    lu: np.ndarray
    lxx: np.ndarray
    luu: np.ndarray
    lux: np.ndarray


@dataclass(frozen=True)
class CostDerivatives:
    """Values and derivatives of a trajectory cost at every stage (tangent space).

    Running stages ``i < T`` already include their time-step factor; stage ``T`` is
    the terminal cost.  ``l.sum()`` is the total cost ``J``.

    Attributes:
      l: ``(T+1,)`` stage costs.
      lx: ``(T+1, ndx)``.
      lu: ``(T, nu)``.
      lxx: ``(T+1, ndx, ndx)`` (Gauss-Newton, symmetric PSD for convex norms).
      luu: ``(T, nu, nu)``.
      lux: ``(T, nu, ndx)``.
    """

    l: np.ndarray
    lx: np.ndarray
    lu: np.ndarray
    lxx: np.ndarray
    luu: np.ndarray
    lux: np.ndarray

    @property
    def total(self) -> float:
        """Total cost ``J = Σ l``."""
        return float(self.l.sum())


class StageCost:
    """A weighted sum of residual terms, ``ℓ(x, u) = Σ_k w_k n_k(r_k(x, u))``.

    Args:
      model: the model every residual was built for.
      terms: :class:`CostTerm` objects (an empty list is the zero cost).

    Raises:
      ParameterError: a term built for another model, or not a CostTerm.
    """

    def __init__(self, model: mujoco.MjModel, terms: Iterable[CostTerm] = ()):
        if not isinstance(model, mujoco.MjModel):
            raise ParameterError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        self.model = model
        self.terms: tuple[CostTerm, ...] = tuple(terms)
        for t in self.terms:
            if not isinstance(t, CostTerm):
                raise ParameterError(f"StageCost terms must be CostTerm objects, got {type(t).__name__}")
            if t.residual.model is not model:
                raise ParameterError(f"cost term {t.name} was built for a different model")
        self.nx = model.nq + model.nv + model.na
        self.ndx = 2 * model.nv + model.na
        self.nu = model.nu
        self._data = mujoco.MjData(model)

    @property
    def uses_control(self) -> bool:
        """Whether any term depends on the control."""
        return any(t.residual.uses_control for t in self.terms)

    def state_terms(self) -> "StageCost":
        """The same cost without control-dependent terms (usable as a terminal cost)."""
        return StageCost(self.model, [t for t in self.terms if not t.residual.uses_control])

    def value(self, x, u=None) -> float:
        """``ℓ(x, u)``; ``u`` may be None only if no term uses the control."""
        X = as_array("x", x, (self.nx,))[None]
        U = None if u is None else as_array("u", u, (self.nu,))[None]
        return float(_evaluate_stages(self, self._data, X, U, derivatives=False)[0][0])

    def evaluate(self, x, u=None) -> StageDerivatives:
        """Value, gradient and Gauss-Newton Hessian at ``(x (nx,), u (nu,))`` in the tangent space."""
        X = as_array("x", x, (self.nx,))[None]
        U = None if u is None else as_array("u", u, (self.nu,))[None]
        l, lx, lu, lxx, luu, lux = _evaluate_stages(self, self._data, X, U, derivatives=True)
        return StageDerivatives(float(l[0]), lx[0], lu[0], lxx[0], luu[0], lux[0])

    @property
    def num_rows(self) -> int:
        """Rows of :meth:`least_squares`: the residual sizes summed over the terms."""
        return sum(t.residual.size for t in self.terms)

    def least_squares(self, X, U=None, *, derivatives: bool = True, row_offset: int = 0):
        """The cost at ``N`` stages as stacked least-squares rows, ``ℓ(x_i, u_i) = ½‖ρ_i‖²``.

        Term ``k`` contributes the rows ``ρ_k = √w_k ρ̂_k(r_k)``, with ``ρ̂`` its norm's
        :meth:`Norm.least_squares` form, and the Jacobians ``√w_k (∂ρ̂/∂r) J_x`` and
        ``√w_k (∂ρ̂/∂r) J_u``: the form a Gauss-Newton planner (IDTO) consumes.  Its gradient
        ``Jᵀρ`` is exactly that of :meth:`evaluate`; its Gauss-Newton Hessian ``JᵀJ`` equals
        :meth:`evaluate`'s for quadratic norms.

        Args:
          X: ``(N, nx)`` states; U: ``(N, nu)`` controls or None (no control terms then).
          derivatives: whether to return the Jacobians.
          row_offset: added to stage indices in error messages.

        Returns:
          ``(rho (N, M), Jx (N, M, ndx) | None, Ju (N, M, nu) | None)``, ``M =``
          :attr:`num_rows` (Jacobians None without ``derivatives``; ``Ju`` None without ``U``).

        Raises:
          NonFiniteError: a residual is not finite (names the term and the stage).
          ParameterError: a norm without a least-squares form, or a control term without ``U``.
        """
        X = as_array("X", X, (None, self.nx))
        N = X.shape[0]
        if U is not None:
            U = as_array("U", U, (N, self.nu))
        R, JX, JU = _stage_residuals(self, self._data, X, U, derivatives, row_offset)
        M = self.num_rows
        rho = np.zeros((N, M))
        Jx = np.zeros((N, M, self.ndx)) if derivatives else None
        Ju = np.zeros((N, M, self.nu)) if derivatives and U is not None else None
        row = 0
        for k, t in enumerate(self.terms):
            m = t.residual.size
            rows = slice(row, row + m)
            row += m
            if t.weight == 0.0:
                continue
            sw = math.sqrt(t.weight)
            rk, Dk = t.norm.least_squares(R[k])
            rho[:, rows] = sw * rk
            if not derivatives:
                continue
            if JX[k] is not None:
                Jx[:, rows] = sw * (Dk @ JX[k])
            if Ju is not None and JU[k] is not None:
                Ju[:, rows] = sw * (Dk @ JU[k])
        return rho, Jx, Ju

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        inner = ", ".join(f"{t.weight:g}·{type(t.norm).__name__}({t.name})" for t in self.terms)
        return f"StageCost({inner})"


_POINT_KINDS = ("site_xpos", "xpos", "xipos", "subtree_com")


def _jac_site(m, d, out, i):
    mujoco.mj_jacSite(m, d, out, None, i)


def _jac_body(m, d, out, i):
    mujoco.mj_jacBody(m, d, out, None, i)


def _jac_bodycom(m, d, out, i):
    mujoco.mj_jacBodyCom(m, d, out, None, i)


def _jac_subtreecom(m, d, out, i):
    mujoco.mj_jacSubtreeCom(m, d, out, i)


_JAC_KINDS = {"jac_site": _jac_site, "jac_body": _jac_body, "jac_bodycom": _jac_bodycom,
              "jac_subtreecom": _jac_subtreecom}


#: run the per-stage MuJoCo work of a batched evaluation as one compiled loop where available
#: (False: the Python loop; the same numbers)
NATIVE_KINEMATICS = True


def _native_kinematics():
    """:func:`contactopt.native.native_kinematics` (compiled per-stage MuJoCo loop), or
    None when :data:`NATIVE_KINEMATICS` is off or the loop is not available on this installation.
    (Imported on first use: loading the compiled loops binds MuJoCo's library.)"""
    if not NATIVE_KINEMATICS:
        return None
    from . import native

    return native.native_kinematics if native.NATIVE else None


def _stage_residuals(cost: StageCost, data: mujoco.MjData, X: np.ndarray, U: np.ndarray | None,
                     derivatives: bool, row_offset: int = 0, batched: bool = True):
    """Every term's residual (and Jacobians) at ``N`` states ``X (N, nx)`` and controls ``U (N, nu)``.

    The MuJoCo and residual half of :func:`_evaluate_stages` (its docstring says how the work
    is batched).  Returns three lists over the terms: ``R[k] (N, m_k)``, ``JX[k] (N, m_k, ndx)``
    and ``JU[k] (N, m_k, nu)`` (Jacobians None when ``derivatives`` is false or where they are
    identically zero).

    Raises:
      NonFiniteError: a residual is not finite (names the term and the stage).
      ParameterError: a control-dependent term without a control.
    """
    model = cost.model
    N = X.shape[0]
    ndx, nu = cost.ndx, cost.nu
    terms = cost.terms
    if U is None:
        for t in terms:
            if t.residual.uses_control:
                raise ParameterError(
                    f"cost term {t.name} depends on the control and cannot be used without one "
                    "(e.g. in a terminal cost)")
    # which terms are batched, and what they need from MuJoCo per stage
    in_batch, per_stage, requests = [], [], []
    for k, t in enumerate(terms):
        req = _batch_requests(t.residual, derivatives) if batched else None
        if req is None:
            per_stage.append(k)
        else:
            in_batch.append(k)
            requests.extend(r for r in req if r not in requests)
    point_kinds = [kind for kind in _POINT_KINDS if any(r[0] == kind for r in requests)]
    jac_reqs = [r for r in requests if r[0] in _JAC_KINDS]
    native = _native_kinematics() if (not per_stage and (point_kinds or jac_reqs)) else None
    if native is None:
        full = {kind: np.empty((N,) + getattr(data, kind).shape) for kind in point_kinds}
        jacs = {r: np.empty((N, 3, model.nv)) for r in jac_reqs}
        jac_calls = [(_JAC_KINDS[r[0]], r[1], out) for r, out in jacs.items()]
    R = [None] * len(terms)
    JX = [None] * len(terms)
    JU = [None] * len(terms)
    for k in per_stage:
        t = terms[k]
        R[k] = np.empty((N, t.residual.size))
        if derivatives:
            JX[k] = np.zeros((N, t.residual.size, ndx))
            JU[k] = np.zeros((N, t.residual.size, nu)) if t.residual.uses_control else None
    nq, nv = model.nq, model.nv
    if native is not None:
        # the same per-stage MuJoCo calls in one compiled loop, gathering only the requested rows
        point_reqs = [r for r in requests if r[0] in _POINT_KINDS]
        P, J = native(model, data, X, point_reqs, jac_reqs)
        kin = {r: P[k] for k, r in enumerate(point_reqs)}
        kin.update({r: J[k] for k, r in enumerate(jac_reqs)})
    elif terms and (per_stage or point_kinds or jac_calls):
        for i in range(N):
            x = X[i]
            data.qpos[:] = x[:nq]
            data.qvel[:] = x[nq:nq + nv]
            if model.na:
                data.act[:] = x[nq + nv:]
            mujoco.mj_kinematics(model, data)
            mujoco.mj_comPos(model, data)
            for kind in point_kinds:
                full[kind][i] = getattr(data, kind)
            for fn, oid, out in jac_calls:
                fn(model, data, out[i], oid)
            u = None if U is None else U[i]
            for k in per_stage:
                r, jx, ju = terms[k].residual.evaluate(data, x, u, derivatives)
                R[k][i] = r
                if derivatives:
                    if jx is not None:
                        JX[k][i] = jx
                    if ju is not None and JU[k] is not None:
                        JU[k][i] = ju
    if in_batch:
        if native is None:
            kin = {r: full[r[0]][:, r[1]] for r in requests if r[0] in full}
            kin.update(jacs)
        for k in in_batch:
            res = terms[k].residual
            r, jx, ju = res.batch_evaluate(kin, X, U, derivatives)
            R[k] = np.asarray(r, dtype=float).reshape(N, res.size)
            if derivatives:
                JX[k] = jx                     # None: identically zero (skipped below)
                JU[k] = ju if res.uses_control else None
    # one test of all residuals; the first bad term is looked for only when it fails
    all_finite = (np.isfinite(np.concatenate(R, axis=1)).all() if len(R) > 1
                  else all(np.isfinite(r).all() for r in R))
    for k, t in enumerate(terms):
        if not all_finite and not np.all(np.isfinite(R[k])):
            i = int(np.argwhere(~np.isfinite(R[k]))[0][0])
            raise NonFiniteError(
                f"cost term {t.name}: residual is not finite at stage {i + row_offset} "
                f"(value {R[k][i]})")
    return R, JX, JU


def _evaluate_stages(cost: StageCost, data: mujoco.MjData, X: np.ndarray, U: np.ndarray | None,
                     derivatives: bool, row_offset: int = 0, batched: bool = True):
    """Evaluate a stage cost at ``N`` states ``X (N, nx)`` and controls ``U (N, nu)`` (or None).

    Per stage only the MuJoCo work is done (``mj_kinematics``, ``mj_comPos``, copies of
    the positions and the translational Jacobians the residuals request, see
    :meth:`Residual.batch_requests`); residuals that support it are then evaluated for
    all stages at once (:meth:`Residual.batch_evaluate`), the others stage by stage.
    Norms and the Gauss-Newton products are batched over stages.  ``batched=False``
    evaluates every residual stage by stage (the reference the tests compare with).
    Without stage-by-stage residuals the per-stage MuJoCo work runs as one compiled loop
    (:func:`contactopt.native.native_kinematics`, the same numbers).

    Returns ``(l (N,), lx (N, ndx), lu (N, nu), lxx (N, ndx, ndx), luu (N, nu, nu),
    lux (N, nu, ndx))`` (derivative arrays None unless ``derivatives``).
    """
    N = X.shape[0]
    ndx, nu = cost.ndx, cost.nu
    terms = cost.terms
    R, JX, JU = _stage_residuals(cost, data, X, U, derivatives, row_offset, batched)
    l = np.zeros(N)
    if not derivatives:
        for k, t in enumerate(terms):
            if t.weight:
                l += t.weight * t.norm.value(R[k])
        return l, None, None, None, None, None
    lx = np.zeros((N, ndx))
    lu = np.zeros((N, nu))
    lxx = np.zeros((N, ndx, ndx))
    luu = np.zeros((N, nu, nu))
    lux = np.zeros((N, nu, ndx))
    for k, t in enumerate(terms):
        w = t.weight
        if w == 0.0:
            continue
        r = R[k]
        l += w * t.norm.value(r)
        g = w * t.norm.gradient(r)                      # (N, m)
        jx, ju = JX[k], JU[k]                           # None = zero Jacobian
        if t.norm.diagonal_hessian:
            h = w * t.norm.hessian_diagonal(r)          # (N, m)
            hjx = None if jx is None else h[:, :, None] * jx    # (N, m, ndx)
            hju = None if ju is None else h[:, :, None] * ju
        else:
            H = w * t.norm.hessian(r)                   # (N, m, m)
            hjx = None if jx is None else H @ jx
            hju = None if ju is None else H @ ju
        if r.shape[1] == 1:
            # one residual component: the sums over it have a single product each, which the
            # elementwise forms below compute exactly as einsum / matmul do (up to the sign of a
            # zero product, which adding to these accumulators — +0 from np.zeros, never -0 —
            # cannot show); numpy's stacked matmul is slow for this shape
            if jx is not None:
                lx += jx[:, 0, :] * g
                lxx += jx[:, 0, :, None] * hjx[:, 0, None, :]
            if ju is not None:
                lu += ju[:, 0, :] * g
                luu += ju[:, 0, :, None] * hju[:, 0, None, :]
                if jx is not None:
                    lux += ju[:, 0, :, None] * hjx[:, 0, None, :]
            continue
        if jx is not None:
            lx += np.einsum("nmi,nm->ni", jx, g)
            lxx += np.swapaxes(jx, 1, 2) @ hjx
        if ju is not None:
            lu += np.einsum("nmi,nm->ni", ju, g)
            luu += np.swapaxes(ju, 1, 2) @ hju
            if jx is not None:
                lux += np.swapaxes(ju, 1, 2) @ hjx
    return l, lx, lu, lxx, luu, lux


# =========================================================================== trajectory costs


class TrajectoryCostLike(Protocol):
    """What a trajectory optimizer needs from a cost (see :class:`TrajectoryCost`)."""

    def total(self, X: np.ndarray, U: np.ndarray) -> float:
        """``J(X (T+1, nx), U (T, nu))``."""

    def evaluate(self, X: np.ndarray, U: np.ndarray) -> CostDerivatives:
        """Per-stage values and tangent-space derivatives."""


def _same_methods(obj, cls, names) -> bool:
    """Whether ``obj``'s class uses ``cls``'s own implementation of every method in ``names``."""
    return all(getattr(type(obj), n) is getattr(cls, n) for n in names)


class TrajectoryCost:
    """Total cost of a trajectory: ``J = Σ_{i<T} h ℓ(x_i, u_i) + ℓ_f(x_T)``.

    Args:
      running: the running :class:`StageCost` ``ℓ`` (a rate, cost per second).
      terminal: the terminal :class:`StageCost` ``ℓ_f`` (not scaled; must not use
        the control).  None: ``ℓ_f = h · (state terms of ℓ)``.
      timestep: ``h`` in seconds; default the model's ``opt.timestep``.  Use the
        *planner's* step when planning on a coarser grid than the model file's.

    Raises:
      ParameterError: non-positive time step, a terminal cost with control terms, or
        costs built for different models.
    """

    @property
    def total_is_evaluate_sum(self) -> bool:
        """Whether ``total(X, U)`` is exactly ``evaluate(X, U).l.sum()`` (bit for bit), so that a
        solver needing both on the same trajectory may take the total from the derivatives
        (true unless a subclass overrides how either is computed)."""
        return _same_methods(self, TrajectoryCost, ("total", "stage_values", "evaluate"))

    def __init__(self, running: StageCost, terminal: StageCost | None = None, *,
                 timestep: float | None = None):
        if not isinstance(running, StageCost):
            raise ParameterError(f"running must be a StageCost, got {type(running).__name__}")
        self.model = running.model
        self.timestep = check_positive(
            "timestep", self.model.opt.timestep if timestep is None else timestep)
        self.running = running
        if terminal is None:
            self.terminal = running.state_terms()
            self.terminal_scale = self.timestep
        else:
            if not isinstance(terminal, StageCost):
                raise ParameterError(f"terminal must be a StageCost or None, got {type(terminal).__name__}")
            if terminal.model is not running.model:
                raise ParameterError("terminal cost was built for a different model than the running cost")
            if terminal.uses_control:
                names = [t.name for t in terminal.terms if t.residual.uses_control]
                raise ParameterError(f"terminal cost must not depend on the control (terms {names})")
            self.terminal = terminal
            self.terminal_scale = 1.0
        self.nx, self.ndx, self.nu = running.nx, running.ndx, running.nu
        self._data = mujoco.MjData(self.model)

    def _check(self, X, U):
        U = as_array("U", U, (None, self.nu))
        if U.shape[0] < 1:
            raise ParameterError("horizon must be at least one step (U has 0 rows)")
        X = as_array("X", X, (U.shape[0] + 1, self.nx))
        return X, U

    def stage_values(self, X, U) -> np.ndarray:
        """Per-stage costs ``(T+1,)`` (running stages multiplied by ``h``)."""
        X, U = self._check(X, U)
        T = U.shape[0]
        l = np.empty(T + 1)
        l[:T] = self.timestep * _evaluate_stages(self.running, self._data, X[:T], U, False)[0]
        l[T] = self.terminal_scale * _evaluate_stages(self.terminal, self._data, X[T:], None, False,
                                                      row_offset=T)[0][0]
        return l

    def total(self, X, U) -> float:
        """Total cost ``J`` of ``X (T+1, nx)``, ``U (T, nu)``."""
        return float(self.stage_values(X, U).sum())

    def evaluate(self, X, U) -> CostDerivatives:
        """Values and tangent-space derivatives of every stage (see :class:`CostDerivatives`)."""
        X, U = self._check(X, U)
        T = U.shape[0]
        h = self.timestep
        l, lx, lu, lxx, luu, lux = _evaluate_stages(self.running, self._data, X[:T], U, True)
        lf, lfx, _, lfxx, _, _ = _evaluate_stages(self.terminal, self._data, X[T:], None, True,
                                                  row_offset=T)
        s = self.terminal_scale
        return CostDerivatives(
            l=np.concatenate([h * l, s * lf]),
            lx=np.concatenate([h * lx, s * lfx]),
            lu=h * lu,
            lxx=np.concatenate([h * lxx, s * lfxx]),
            luu=h * luu,
            lux=h * lux,
        )


class LinearQuadraticCost:
    """Quadratic cost for Euclidean states (tests, linear systems):

    ``J = Σ_{i<T} [½ (x_i − x̄)ᵀQ(x_i − x̄) + ½ (u_i − ū)ᵀR(u_i − ū)] + ½ (x_T − x̄)ᵀQ_f(x_T − x̄)``.

    No time-step factor: the weights are per step.  Here ``ndx = nx``.

    Args:
      Q: ``(nx, nx)`` symmetric PSD state weight.
      R: ``(nu, nu)`` symmetric PSD control weight.
      Qf: ``(nx, nx)`` terminal weight (default ``Q``).
      x_ref: ``(nx,)`` target state (default 0).
      u_ref: ``(nu,)`` target control (default 0).
    """

    @property
    def total_is_evaluate_sum(self) -> bool:
        """Whether ``total(X, U)`` is exactly ``evaluate(X, U).l.sum()`` (see :class:`TrajectoryCost`)."""
        return _same_methods(self, LinearQuadraticCost, ("total", "stage_values", "evaluate"))

    def __init__(self, Q, R, Qf=None, *, x_ref=None, u_ref=None):
        Q = as_array("Q", Q, (None, None))
        nx = Q.shape[0]
        Q = as_array("Q", Q, (nx, nx))
        R = as_array("R", R, (None, None))
        nu = R.shape[0]
        R = as_array("R", R, (nu, nu))
        Qf = Q if Qf is None else as_array("Qf", Qf, (nx, nx))
        for name, M in (("Q", Q), ("R", R), ("Qf", Qf)):
            if not np.allclose(M, M.T, atol=1e-12 * max(1.0, np.abs(M).max(initial=0.0))):
                raise ParameterError(f"{name} must be symmetric")
            if M.size and np.linalg.eigvalsh(M).min() < -1e-10 * max(1.0, np.abs(M).max()):
                raise ParameterError(f"{name} must be positive semi-definite")
        self.Q, self.R, self.Qf = Q, R, Qf
        self.nx = self.ndx = nx
        self.nu = nu
        self.x_ref = np.zeros(nx) if x_ref is None else as_array("x_ref", x_ref, (nx,))
        self.u_ref = np.zeros(nu) if u_ref is None else as_array("u_ref", u_ref, (nu,))

    def _check(self, X, U):
        U = as_array("U", U, (None, self.nu))
        if U.shape[0] < 1:
            raise ParameterError("horizon must be at least one step (U has 0 rows)")
        X = as_array("X", X, (U.shape[0] + 1, self.nx))
        return X, U

    def stage_values(self, X, U) -> np.ndarray:
        """Per-stage costs ``(T+1,)``."""
        X, U = self._check(X, U)
        dx = X - self.x_ref
        du = U - self.u_ref
        l = np.empty(X.shape[0])
        l[:-1] = 0.5 * np.einsum("ni,ij,nj->n", dx[:-1], self.Q, dx[:-1]) \
            + 0.5 * np.einsum("ni,ij,nj->n", du, self.R, du)
        l[-1] = 0.5 * dx[-1] @ self.Qf @ dx[-1]
        return l

    def total(self, X, U) -> float:
        """Total cost ``J``."""
        return float(self.stage_values(X, U).sum())

    def evaluate(self, X, U) -> CostDerivatives:
        """Values and (exact) derivatives of every stage."""
        X, U = self._check(X, U)
        T = U.shape[0]
        dx = X - self.x_ref
        du = U - self.u_ref
        lx = np.empty((T + 1, self.nx))
        lx[:T] = dx[:T] @ self.Q
        lx[T] = self.Qf @ dx[T]
        lxx = np.empty((T + 1, self.nx, self.nx))
        lxx[:T] = self.Q
        lxx[T] = self.Qf
        return CostDerivatives(
            l=self.stage_values(X, U), lx=lx, lu=du @ self.R,
            lxx=lxx, luu=np.broadcast_to(self.R, (T, self.nu, self.nu)).copy(),
            lux=np.zeros((T, self.nu, self.nx)))
