"""The goal-directed cost terms over accelerations (see :mod:`contactopt.solvers.gdd.costs`).

:class:`EndEffectorAcceleration`, :class:`Damping`, :class:`AccelerationTarget`,
:class:`CenterOfMassAcceleration`, :class:`CenterOfPressure` and :class:`ContactForce`, all
:class:`~contactopt.solvers.gdd.cost_base.AccelerationTerm` subclasses.
"""

from __future__ import annotations

import mujoco
import numpy as np

from ...errors import ContactoptError, ParameterError, as_array, check_nonnegative, check_positive
from . import kernels as K
from .cost_base import AccelerationTerm, _bump_structure, _fast
from .problem import GDDProblem
from .targets import FrameState, PostureTarget, SpringDamper, _FixedTarget, _TargetAttr

__all__ = [
    "AccelerationTarget",
    "CenterOfMassAcceleration",
    "CenterOfPressure",
    "ContactForce",
    "Damping",
    "EndEffectorAcceleration",
]


# --------------------------------------------------------------------------- helpers


def _object_id(model, objtype, name, what):
    if not isinstance(name, str):
        raise ParameterError(f"{what} must be a name (str), got {name!r}")
    i = mujoco.mj_name2id(model, objtype, name)
    if i < 0:
        n = {mujoco.mjtObj.mjOBJ_SITE: model.nsite, mujoco.mjtObj.mjOBJ_BODY: model.nbody}[objtype]
        names = [mujoco.mj_id2name(model, objtype, k) for k in range(n)]
        names = [x for x in names if x]
        shown = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")
        raise ParameterError(f"model has no {what} named {name!r} ({what}s: {shown or 'none'})")
    return i


def _quat_of_mat(xmat):
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, np.ascontiguousarray(xmat).reshape(9))
    return quat


def _contact_rows(model, data):
    """Per contact with constraint rows: ``(contact id, efc address, rows, pyramidal)``."""
    con = data.contact
    pyramidal = model.opt.cone == int(mujoco.mjtCone.mjCONE_PYRAMIDAL)
    out = []
    adr_all = con.efc_address
    dim_all = con.dim
    for c in range(data.ncon):
        adr = int(adr_all[c])
        if adr < 0:
            continue
        dim = int(dim_all[c])
        rows = 1 if dim == 1 else (2 * (dim - 1) if pyramidal else dim)
        out.append((c, adr, rows, pyramidal and dim > 1))
    return out


# --------------------------------------------------------------------------- terms


class EndEffectorAcceleration(AccelerationTerm):
    """End-effector acceleration toward a desired acceleration (GDD eq. 11).

    ``ℓ(a) = (w/2) ‖J_e a + J̇_e v − a*_e‖²`` where ``J_e`` is the ``(3, nv)``
    translational Jacobian of the site (or body-frame origin), stacked with the
    ``(3, nv)`` rotational Jacobian for 6-row (pose) targets, and ``J̇_e v`` the
    velocity-product acceleration (``mj_jacDot``).  ``a*_e`` comes from ``target``
    evaluated at the frame's current position and velocity.

    Args:
      model: the MuJoCo model (names are resolved here).
      site / body: exactly one, the frame's name.
      target: :class:`SpringDamper`, :class:`MinimumJerk`, a ``(3,)``/``(6,)``
        array (m/s², rad/s²), or a callable ``FrameState -> (dim,)`` with a ``dim`` attribute.
      weight: w ≥ 0 (kg: the residual is an acceleration and the objective a force²/mass).

    Raises:
      ParameterError: unknown name, both or neither of site and body, bad target.
    """

    kind = "rows"
    target = _TargetAttr()

    def __init__(self, model: mujoco.MjModel, *, site: str | None = None, body: str | None = None,
                 target, weight: float = 1.0, name: str | None = None):
        if (site is None) == (body is None):
            raise ParameterError("EndEffectorAcceleration needs exactly one of site= or body=")
        if site is not None:
            self.site_id = _object_id(model, mujoco.mjtObj.mjOBJ_SITE, site, "site")
            self.body_id = int(model.site_bodyid[self.site_id])
            label = site
        else:
            self.site_id = -1
            self.body_id = _object_id(model, mujoco.mjtObj.mjOBJ_BODY, body, "body")
            label = body
        self.target = target
        self.rows = self.target.dim
        super().__init__(weight, name=name or f"EndEffectorAcceleration({label})")
        self.model = model
        self._jac = np.zeros((6, model.nv))
        self._jacdot = np.zeros((6, model.nv))
        self._jd = self._jacdot[: self.rows]
        self._jdp = self._jacdot[:3]
        self._jdr = self._jacdot[3:6] if self.rows == 6 else None

    #: ``fn(t, t0, x0) -> (3,)`` goal position [m] of the :class:`SpringDamper` at time ``t``
    #: (:meth:`with_reference`), or None for a goal that stays where it is put
    reference = None

    def with_reference(self, fn) -> "EndEffectorAcceleration":
        """Let the spring's goal follow ``fn(t, t0, x0) -> (3,)`` [m, world]: a scripted drag, a
        clock.  The planner writes the goal of the time it plans at (:meth:`schedule`; for the
        zero-horizon ``gdd`` planner, the measured time).  Returns ``self``.

        Raises:
          ParameterError: ``fn`` is not callable, or the target is not a :class:`SpringDamper`.
        """
        if not callable(fn):
            raise ParameterError(f"reference of {self.name} must be callable fn(t, t0, x0) -> (3,) goal, "
                                 f"got {type(fn).__name__}")
        if type(self._target) is not SpringDamper:
            raise ParameterError(f"{self.name}: a reference moves a SpringDamper's goal; this term's target is "
                                 f"a {type(self._target).__name__}")
        self.reference = fn
        return self

    def schedule(self, times, t0: float, x0) -> None:
        """Move the spring's goal to ``reference(times[0], t0, x0)`` (a zero-horizon plan has one
        stage; ``times`` as :meth:`contactopt.costs.Residual.schedule` takes them).

        Raises:
          ParameterError: the reference raised or returned a bad shape; NonFiniteError: not finite.
        """
        if self.reference is None:
            return
        try:
            goal = self.reference(float(times[0]), float(t0), x0)
        except ContactoptError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code
            raise ParameterError(f"reference of {self.name} raised {type(exc).__name__}: {exc}") from exc
        self._target.position[:] = as_array(f"goal of {self.name}", goal, (3,))

    def _fast_spec(self):
        t = self._target
        if self.rows != 3 or t.dim != 3 or type(t) not in (SpringDamper, _FixedTarget):
            return None
        return {"code": K.TERM_FRAME, "kind": "rows", "rows": 3, "body": self.body_id,
                "site": self.site_id, "w": self._kw, "t": t._kbuf}

    def _jacobians(self, problem, jac):
        m, d = problem.model, problem.data
        rot = jac[3:6] if self.rows == 6 else None
        if self.site_id >= 0:
            point = d.site_xpos[self.site_id]
            mujoco.mj_jacSite(m, d, jac[:3], rot, self.site_id)
        else:
            point = d.xpos[self.body_id]
            mujoco.mj_jac(m, d, jac[:3], rot, point, self.body_id)
        mujoco.mj_jacDot(m, d, self._jdp, self._jdr, point, self.body_id)
        return point

    def frame(self, problem: GDDProblem) -> FrameState:
        """The frame's current :class:`FrameState` (world position, velocity, orientation)."""
        point = self._jacobians(problem, self._jac)
        return self._frame(problem, point, self._jac)

    def _frame(self, problem, point, jac):
        d = problem.data
        v = problem.qvel
        if self.rows == 6:
            if self.site_id >= 0:
                quat = _quat_of_mat(d.site_xmat[self.site_id])
            else:
                quat = d.xquat[self.body_id].copy()
            return FrameState(point.copy(), jac[:3] @ v, quat, jac[3:6] @ v, d.time)
        return FrameState(point.copy(), jac @ v, None, None, d.time)

    def bias_acceleration(self, problem: GDDProblem) -> np.ndarray:
        """``J̇_e v`` ``(rows,)``: the frame's acceleration at ``a = 0`` (m/s², rad/s²)."""
        self._jacobians(problem, self._jac[: self.rows])
        return self._jacdot[: self.rows] @ problem.qvel

    def fill(self, problem, out):
        Ka = out.Ka
        t = self.target
        if self.rows == 3 and type(t) is SpringDamper and t._all_axes:
            # fast path: position goal with a spring-damper, residual computed in one kernel call
            m, d = problem.model, problem.data
            if self.site_id >= 0:
                point = d.site_xpos[self.site_id]
                mujoco.mj_jacSite(m, d, Ka, None, self.site_id)
            else:
                point = d.xpos[self.body_id]
                mujoco.mj_jac(m, d, Ka, None, point, self.body_id)
            mujoco.mj_jacDot(m, d, self._jdp, None, point, self.body_id)
            k, b, cap = t._kernel_gains()
            _fast("ee_spring", K.spring_residual, Ka, self._jdp, problem.qvel, point, t.position,
                  k, b, cap, 1.0, out.e)
            return
        point = self._jacobians(problem, Ka)
        desired = t(self._frame(problem, point, Ka))
        np.subtract(self._jd @ problem.qvel, desired, out=out.e)


class Damping(AccelerationTerm):
    """Mass-weighted damping of the acceleration (GDD eq. 26): ``(α/2)(a + βv)ᵀM(a + βv)``.

    Tells the dynamics to stop moving; β is a virtual damping rate in 1/s.

    Args:
      alpha: α ≥ 0 (dimensionless; this is the term's ``weight``).
      beta: β ≥ 0 in 1/s.
    """

    kind = "mass"

    def __init__(self, alpha: float = 1.0, beta: float = 10.0, *, name: str | None = None):
        super().__init__(alpha, name=name)
        self.beta = beta

    @property
    def beta(self) -> float:
        """β ≥ 0, 1/s."""
        return float(self._kw[1])

    @beta.setter
    def beta(self, value: float) -> None:
        self._kw[1] = check_nonnegative("beta", value)

    def _fast_spec(self):
        return {"code": K.TERM_DAMPING, "kind": "mass", "w": self._kw}

    def fill(self, problem, out):
        np.multiply(problem.qvel, -self.beta, out=out.target)


class AccelerationTarget(AccelerationTerm):
    """An acceleration target from an external policy: ``(w/2)(a − a*)ᵀW(a − a*)``.

    Args:
      model: the MuJoCo model.
      target: ``(nv,)`` a* (m/s², rad/s²); default zeros; change it every step with
        :meth:`set_target` or pass a callable ``problem -> (nv,)`` (e.g. a PD law
        ``kp (q_ref − q) − kd v`` evaluated at the current state).
      metric: ``"mass"`` (W = M, consistent in units with the rest of the
        objective; w dimensionless) or ``"identity"`` (W = diag of a 0/1 dof mask).
      dofs: dof indices the identity metric applies to (default all).
    """

    def __init__(self, model: mujoco.MjModel, target=None, *, weight: float = 1.0,
                 metric: str = "mass", dofs=None, name: str | None = None):
        self.nv = model.nv
        if metric not in ("mass", "identity"):
            raise ParameterError(f"metric must be 'mass' or 'identity', got {metric!r}")
        self.metric = metric
        self.kind = "mass" if metric == "mass" else "diag"
        mask = np.ones(self.nv)
        if dofs is not None:
            if metric == "mass":
                raise ParameterError("dofs= needs metric='identity'")
            idx = np.asarray(dofs, dtype=int).reshape(-1)
            if idx.size and (idx.min() < 0 or idx.max() >= self.nv):
                raise ParameterError(f"dofs must be in [0, {self.nv}), got {idx.tolist()}")
            mask = np.zeros(self.nv)
            mask[idx] = 1.0
        # [target (nv), mask (nv)]: read by the compiled solver; target and mask are views
        self._kt = np.zeros(2 * self.nv)
        self._kt[self.nv:] = mask
        self._policy = None
        if callable(target):
            self._policy = target
        elif target is not None:
            self.set_target(target)
        _bump_structure()
        super().__init__(weight, name=name or "AccelerationTarget")
        self.model = model

    @property
    def target(self) -> np.ndarray:
        """``(nv,)`` the fixed target a* (a view; see :meth:`set_target`)."""
        return self._kt[:self.nv]

    @target.setter
    def target(self, value) -> None:
        self.set_target(value)

    @property
    def mask(self) -> np.ndarray:
        """``(nv,)`` 0/1 dof mask of the identity metric (a view)."""
        return self._kt[self.nv:]

    @property
    def policy(self):
        """The callable target, or None for a fixed target."""
        return self._policy

    def set_target(self, target) -> None:
        """Set a* ``(nv,)`` (validated: shape and finite)."""
        self._kt[:self.nv] = as_array("target", target, (self.nv,))
        if self._policy is not None:
            self._policy = None
            _bump_structure()

    def _fast_spec(self):
        mass = self.kind == "mass"
        if self._policy is None:
            return {"code": K.TERM_MASS_FIXED if mass else K.TERM_DIAG_FIXED, "kind": self.kind,
                    "w": self._kw, "t": self._kt}
        if type(self._policy) is PostureTarget and self._policy.nv == self.nv:
            return {"code": K.TERM_MASS_PD if mass else K.TERM_DIAG_PD, "kind": self.kind,
                    "w": self._kw, "t": self._policy._kbuf, "x": self.mask, "model": self._policy.model}
        return None

    def fill(self, problem, out):
        t = self.target if self._policy is None else self._policy(problem)
        out.target[:] = t
        if out.mask is not None:
            out.mask[:] = self.mask


class CenterOfMassAcceleration(AccelerationTerm):
    """Centre-of-mass acceleration toward a desired one: ``(w/2)‖J_c a + J̇_c v − a*_c‖²``.

    ``J_c`` is the ``(3, nv)`` Jacobian of the centre of mass of ``body``'s subtree
    (default: the whole model, ``mj_jacSubtreeCom``) and
    ``J̇_c v = Σ_b m_b J̇_b(x_b) v / Σ_b m_b`` over the subtree's bodies.

    Args:
      model: the MuJoCo model.
      target: :class:`SpringDamper` (a position goal for the CoM), :class:`MinimumJerk`,
        or a ``(3,)`` acceleration.
      body: name of the subtree root (None: world, i.e. every body).
    """

    kind = "rows"
    rows = 3
    target = _TargetAttr()

    def __init__(self, model: mujoco.MjModel, *, target, weight: float = 1.0,
                 body: str | None = None, name: str | None = None):
        self.body_id = 0 if body is None else _object_id(model, mujoco.mjtObj.mjOBJ_BODY, body, "body")
        self.target = target
        if self.target.dim != 3:
            raise ParameterError("CenterOfMassAcceleration takes a 3-D (position) target")
        super().__init__(weight, name=name or "CenterOfMassAcceleration")
        self.model = model
        ids = []
        for b in range(1, model.nbody):
            p = b
            while p != self.body_id and p != 0:
                p = int(model.body_parentid[p])
            if p == self.body_id and model.body_mass[b] > 0:
                ids.append(b)
        self._bodies = np.array(ids, dtype=np.int64)
        self._mass = model.body_mass[self._bodies].copy()
        self._total = float(self._mass.sum())
        self._mass_frac = self._mass / self._total if self._total > 0 else self._mass.copy()
        if not self._total > 0:
            raise ParameterError("the chosen subtree has no mass")
        self._roots = model.body_rootid[self._bodies].astype(np.int64)
        # _ancestors[k, j] = 1 when dof j moves body _bodies[k] (belongs to it or an ancestor)
        anc = np.zeros((len(ids), model.nv))
        for k, b in enumerate(ids):
            p = b
            while p > 0:
                anc[k, model.dof_bodyid == p] = 1.0
                p = int(model.body_parentid[p])
        self._ancestors = anc
        # per dof (the compiled step's Jacobian, kernels._add_com_jac): the body whose
        # subtree_com is the centre of mass of the part of the subtree the dof moves, and that
        # part's share of the subtree's mass (−1, 0: the dof does not move the subtree)
        com_body = np.full(model.nv, -1, dtype=np.int64)
        share = np.zeros(model.nv)
        for i in range(model.nv):
            b = int(model.dof_bodyid[i])
            p = b
            while p != self.body_id and p != 0:
                p = int(model.body_parentid[p])
            if p == self.body_id:  # the dof's body is in the subtree
                com_body[i] = b
                share[i] = float(model.body_subtreemass[b]) / self._total
            else:  # above the subtree's root or beside it
                q = self.body_id
                while q != 0 and q != b:
                    q = int(model.body_parentid[q])
                if q == b:
                    com_body[i] = self.body_id
                    share[i] = 1.0
        self._dof_list = np.concatenate([com_body, self._bodies])
        self._dof_param = np.concatenate([share, self._mass_frac])
        self._views = None

    def _fast_spec(self):
        t = self._target
        if t.dim != 3 or type(t) not in (SpringDamper, _FixedTarget):
            return None
        return {"code": K.TERM_COM, "kind": "rows", "rows": 3, "body": self.body_id,
                "list": self._dof_list, "count": self._bodies.size, "x": self._dof_param,
                "w": self._kw, "t": t._kbuf}

    def bias_acceleration(self, problem: GDDProblem) -> np.ndarray:
        """``J̇_c v`` ``(3,)``: the centre-of-mass acceleration at ``a = 0``.

        With MuJoCo's com-based quantities: the spatial acceleration of body b at
        ``a = 0`` is ``Σ_{dofs j of b and its ancestors} cdof_dot_j v_j`` (the
        recursion of ``mj_rnePostConstraint`` without ``qacc`` and gravity), and the
        classical acceleration of its centre of mass ``x_b`` is
        ``α × (x_b − c_root) + a_lin + ω × ẋ_b``.
        """
        out = np.empty(3)
        self._bias_into(problem, out)
        return out

    def _bias_into(self, problem, out):
        d = problem.data
        v = self._views
        if v is None or v[0] is not d:
            v = self._views = (d, d.cdof_dot, d.cvel, d.xipos, d.subtree_com)
        _fast("com_bias", K.com_bias, v[1], problem.qvel, self._ancestors, self._bodies, self._roots,
              self._mass, v[2], v[3], v[4], out)
        return v

    def fill(self, problem, out):
        m, d = problem.model, problem.data
        mujoco.mj_jacSubtreeCom(m, d, out.Ka, self.body_id)
        t = self.target
        if type(t) is SpringDamper and t._all_axes:
            v = self._views
            if v is None or v[0] is not d:
                v = self._views = (d, d.cdof_dot, d.cvel, d.xipos, d.subtree_com)
            k, b, cap = t._kernel_gains()
            _fast("com_spring", K.com_spring_residual, v[1], problem.qvel, self._ancestors,
                  self._bodies, self._roots, self._mass, v[2], v[3], v[4], self.body_id, out.Ka,
                  t.position, k, b, cap, out.e)
            return
        bias = self.bias_acceleration(problem)
        frame = FrameState(d.subtree_com[self.body_id].copy(), out.Ka @ problem.qvel, None, None,
                           d.time)
        np.subtract(bias, self.target(frame), out=out.e)


class CenterOfPressure(AccelerationTerm):
    """Centre of pressure of the ground contacts toward a target point (seed section V).

    With normal forces ``f_n,c`` and positions ``p_c`` of the contacts between the
    robot and the ground (geoms of ``ground_body``, default the world body), the
    centre of pressure is ``Σ f_n,c p_c / Σ f_n,c``.  The term penalizes the
    horizontal moment about the target, which vanishes exactly when the CoP is at
    the target and is linear in the constraint forces::

        ℓ = (w/2) ‖Σ_c f_n,c (p_c − p*)_xy / F‖²

    ``F`` (N) scales the residual to metres (default total mass · |gravity|).
    Without ground contacts the term is zero.

    Args:
      model: the MuJoCo model.  target: ``(2,)`` (x, y) or ``(3,)`` point in m.
      ground_body: name of the ground body (None: world).  force_scale: F in N.
    """

    kind = "force_rows"
    rows = 2

    def __init__(self, model: mujoco.MjModel, target, *, weight: float = 1.0,
                 ground_body: str | None = None, force_scale: float | None = None,
                 name: str | None = None):
        t = as_array("target", target)
        if t.shape not in ((2,), (3,)):
            raise ParameterError(f"centre-of-pressure target must have shape (2,) or (3,), got {t.shape}")
        self.target = t[:2].copy()
        self.ground_id = (0 if ground_body is None
                          else _object_id(model, mujoco.mjtObj.mjOBJ_BODY, ground_body, "body"))
        if force_scale is None:
            force_scale = float(model.body_subtreemass[0]) * float(np.linalg.norm(model.opt.gravity))
            if not force_scale > 0:
                force_scale = 1.0
        self.force_scale = check_positive("force_scale", force_scale)
        super().__init__(weight, name=name or "CenterOfPressure")
        self.model = model

    def ground_contacts(self, problem: GDDProblem):
        """``(contact id, efc address, rows, pyramidal)`` of the contacts touching the ground body."""
        m, d = problem.model, problem.data
        out = []
        for c, adr, rows, pyr in _contact_rows(m, d):
            g1, g2 = d.contact.geom[c]
            b1, b2 = m.geom_bodyid[g1], m.geom_bodyid[g2]
            if (b1 == self.ground_id) != (b2 == self.ground_id):
                out.append((c, adr, rows, pyr))
        return out

    def normal_force_matrix(self, problem: GDDProblem):
        """``(N (ncontacts, nefc), positions (ncontacts, 3))``: ``N f`` are the normal forces."""
        contacts = self.ground_contacts(problem)
        N = np.zeros((len(contacts), problem.nefc))
        pos = np.zeros((len(contacts), 3))
        for k, (c, adr, rows, pyr) in enumerate(contacts):
            if pyr:
                N[k, adr:adr + rows] = 1.0
            else:
                N[k, adr] = 1.0
            pos[k] = problem.data.contact.pos[c]
        return N, pos

    def center_of_pressure(self, problem: GDDProblem, efc_force) -> np.ndarray | None:
        """CoP ``(2,)`` for given constraint forces (None when the ground carries no load)."""
        N, pos = self.normal_force_matrix(problem)
        fn = N @ np.asarray(efc_force, dtype=float)
        total = fn.sum()
        return None if not total > 0 else (fn @ pos[:, :2]) / total

    def fill(self, problem, out):
        N, pos = self.normal_force_matrix(problem)
        arm = (pos[:, :2] - self.target) / self.force_scale
        out.Kf[:] = arm.T @ N
        out.Ka[:] = 0.0
        out.e[:] = 0.0


class ContactForce(AccelerationTerm):
    """Net contact force on a body toward a desired force: ``(w/2)‖F(f) − F*‖²``.

    ``F(f) = Σ_c ± frame_cᵀ (f_n, f_t1, f_t2)_c`` (world frame, N) over the contacts
    of the body's geoms, with the contact-frame force decoded from the constraint
    rows as in ``mj_contactForce`` (pyramidal: ``f_n = Σ rows``,
    ``f_tj = μ_j (f_2j − f_2j+1)``); the sign makes it the force acting ON the body.

    Args:
      model: the MuJoCo model.  body: the body's name.
      target: ``(3,)`` desired force in N (world frame).
    """

    kind = "force_rows"
    rows = 3

    def __init__(self, model: mujoco.MjModel, body: str, target, *, weight: float = 1.0,
                 name: str | None = None):
        self.body_id = _object_id(model, mujoco.mjtObj.mjOBJ_BODY, body, "body")
        self.target = as_array("target", target, (3,)).copy()
        super().__init__(weight, name=name or f"ContactForce({body})")
        self.model = model

    def force_matrix(self, problem: GDDProblem) -> np.ndarray:
        """``(3, nefc)`` matrix G with ``G f`` = net contact force on the body (world, N)."""
        m, d = problem.model, problem.data
        G = np.zeros((3, problem.nefc))
        for c, adr, rows, pyr in _contact_rows(m, d):
            g1, g2 = d.contact.geom[c]
            b1, b2 = m.geom_bodyid[g1], m.geom_bodyid[g2]
            if (b1 == self.body_id) == (b2 == self.body_id):
                continue
            sign = 1.0 if b2 == self.body_id else -1.0
            frame = d.contact.frame[c].reshape(3, 3)
            dim = int(d.contact.dim[c])
            if dim == 1:
                G[:, adr] = sign * frame[0]
            elif pyr:
                mu = d.contact.friction[c]
                for j in range(dim - 1):
                    for s in range(2):
                        col = frame[0].copy()
                        if j < 2:
                            col += (1.0 if s == 0 else -1.0) * mu[j] * frame[j + 1]
                        G[:, adr + 2 * j + s] = sign * col
            else:
                for j in range(min(dim, 3)):
                    G[:, adr + j] = sign * frame[j]
        return G

    def fill(self, problem, out):
        out.Kf[:] = self.force_matrix(problem)
        out.Ka[:] = 0.0
        np.negative(self.target, out=out.e)
