"""Point and frame residuals: site/body positions and the centre of mass (and its velocity)."""

from __future__ import annotations

import mujoco
import numpy as np

from ..errors import ParameterError, as_array, check_positive
from .residuals import Residual, _axes, _object_id

__all__ = [
    "BodyPosition",
    "CenterOfMass",
    "CenterOfMassVelocity",
    "SitePosition",
]


# =========================================================================== point residuals


def _frame_object(model, objtype, kind, ref, name, prefix=None):
    """``(id, label)`` of the site or body ``ref`` of a residual (``kind``: ``"site"`` or
    ``"body"``): ``name``, else ``kind[<the object's name, or its index>]``; with a ``prefix``
    (the centre-of-mass residuals) ``prefix[...]``, and ``prefix`` alone for the world body."""
    oid = _object_id(model, objtype, kind, ref, kind)
    if name:
        return oid, name
    if prefix is not None and oid == 0:
        return oid, prefix
    return oid, f"{prefix or kind}[{mujoco.mj_id2name(model, objtype, oid) or oid}]"


class _PointResidual(Residual):
    """Shared machinery of world-frame point residuals ``p(q)[axes] − target[axes]`` (the target
    may move: :meth:`~contactopt.costs.Residual.with_reference`)."""

    supports_reference = True

    def __init__(self, model, size, name, axes, target, object_id):
        super().__init__(model, size, name)
        self._object_id = object_id  # the site or body of the batch requests
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

    def _request_id(self) -> int:
        return self._object_id

    def evaluate(self, data, x, u, jacobian):
        r = self._point(data)[self.axes] - self.current_target()[self.axes]
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
        r = kin[(point, i)][:, self.axes] - self.current_target()[..., self.axes]
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
        sid, label = _frame_object(model, mujoco.mjtObj.mjOBJ_SITE, "site", site, name)
        super().__init__(model, 3, label, axes, target, sid)
        self.site_id = sid

    _request_kinds = ("site_xpos", "jac_site")

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
        bid, label = _frame_object(model, mujoco.mjtObj.mjOBJ_BODY, "body", body, name)
        if point not in ("origin", "com"):
            raise ParameterError(f"point must be 'origin' or 'com', got {point!r}")
        super().__init__(model, 3, label, axes, target, bid)
        self.body_id = bid
        self.point = point

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
        bid, label = _frame_object(model, mujoco.mjtObj.mjOBJ_BODY, "body", body, name, "com")
        super().__init__(model, 3, label, axes, target, bid)
        self.body_id = bid

    _request_kinds = ("subtree_com", "jac_subtreecom")

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
        bid, label = _frame_object(model, mujoco.mjtObj.mjOBJ_BODY, "body", body, name, "com_vel")
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
