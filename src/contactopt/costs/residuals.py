"""Residuals ``r(x, u)``: the :class:`Residual` base and the state, control and energy residuals
(the point/frame residuals are in :mod:`contactopt.costs.frames`)."""

from __future__ import annotations

import abc
import math
import weakref
from collections.abc import Callable, Sequence

import mujoco
import numpy as np

from ..errors import ContactoptError, NonFiniteError, ParameterError, ShapeError, as_array, check_positive
from ..rotations import rotation_vector_difference

__all__ = [
    "Combination",
    "Control",
    "MechanicalEnergy",
    "Qpos",
    "Qvel",
    "Residual",
    "UserResidual",
]


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

    #: whether the residual's ``target`` may move with time (:meth:`with_reference`)
    supports_reference = False

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
        #: the moving target ``reference(t, t0, x0) -> target`` or None (:meth:`with_reference`)
        self.reference: Callable | None = None
        self._scheduled: np.ndarray | None = None  # (S, *target.shape): the targets of stages 0..S-1
        self._stage = 0                            # the stage(s) being evaluated: int or (N,) ints

    # ------------------------------------------------------------------ moving targets

    def with_reference(self, reference: Callable) -> "Residual":
        """Let the target move: ``reference(t, t0, x0) -> target`` (the shape of ``self.target``).

        A planner that plans from the state ``x0 (nx,)`` measured (or predicted) at time ``t0``
        [s] calls :meth:`schedule` with its stage times ``t_k = t0 + k h``; stage ``k`` is then
        evaluated against ``reference(t_k, t0, x0)``.  A reference of time alone (a gait clock)
        ignores ``t0`` and ``x0``; one that re-anchors at the measured state (a target kept
        2 rad ahead of a spinner: ``x0[i] + 2 (t − t0)/H``) uses them.  Before the first
        :meth:`schedule` the fixed ``target`` is used.  Returns ``self``.

        Raises:
          ParameterError: ``reference`` is not callable, or this residual has no target that moves.
        """
        if not self.supports_reference:
            raise ParameterError(f"{self.name}: {type(self).__name__} has no target that can follow a reference")
        if not callable(reference):
            raise ParameterError(f"{self.name}: reference must be callable (t, t0, x0) -> target, got {reference!r}")
        self.reference = reference
        self._scheduled = None
        return self

    def _normalize_targets(self, targets: np.ndarray) -> np.ndarray:
        """Checked targets ``(S, *target.shape)`` as the residual stores them (subclasses normalize)."""
        return targets

    def schedule(self, times, t0: float, x0) -> None:
        """Evaluate the reference at the plan's stage times ``times (S,)`` [s] (stage ``k`` at
        ``times[k]``) for a plan from ``x0 (nx,)`` at ``t0``; no-op without a reference.

        Raises:
          ContactoptError: the reference raised (names the residual); ShapeError / NonFiniteError:
            it returned a wrong shape or a non-finite value (names the residual and the time).
        """
        if self.reference is None:
            return
        x0 = np.array(x0, dtype=float, copy=True)
        times = np.atleast_1d(np.asarray(times, dtype=float))
        values = []
        for t in times:
            try:
                values.append(self.reference(float(t), float(t0), x0))
            except ContactoptError:
                raise
            except Exception as exc:  # noqa: BLE001 - user code: any exception is the user's error
                raise ContactoptError(f"residual {self.name}: reference(t, t0, x0) raised "
                                      f"{type(exc).__name__}: {exc}") from exc
        shape = (times.size,) + np.shape(self.target)
        try:
            targets = np.array(values, dtype=float)
        except (TypeError, ValueError):
            targets = None
        if targets is None or targets.shape != shape or not np.isfinite(targets).all():
            for t, value in zip(times, values):  # one check of all rows; per row only to name the bad one
                as_array(f"residual {self.name} reference at t = {t:g} s", value, shape[1:])
        self._scheduled = self._normalize_targets(targets)

    @property
    def scheduled(self) -> bool:
        """Whether a :meth:`schedule` set per-stage targets."""
        return self._scheduled is not None

    @property
    def scheduled_targets(self) -> np.ndarray | None:
        """The last :meth:`schedule` 's targets ``(S, *target.shape)`` (stage ``k`` in row ``k``), or None."""
        return self._scheduled

    def _set_stage(self, stage) -> None:
        """The stage index (int) or indices (``(N,)`` ints) the next evaluation is of."""
        self._stage = stage

    def current_target(self) -> np.ndarray:
        """The target of the stage(s) being evaluated: the fixed ``target`` without a schedule,
        else the scheduled row(s) (``(N, …)`` in a batch; stages past the schedule take its last)."""
        if self._scheduled is None:
            return self.target
        return self._scheduled[np.minimum(self._stage, len(self._scheduled) - 1)]

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
        self._set_stage(0)
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


class Qpos(Residual):
    """Configuration error on the manifold: ``r = (q ⊖ q_target)[dofs]`` (rad or m), size ``len(dofs)``
    (the angle of an unlimited hinge wrapped into ``(−π, π]``, see ``wrap``).

    ``q ⊖ q_target`` is ``mj_differentiatePos(q_target → q)``: hinge/slide differences,
    free-joint translations in the world frame, and for quaternions (ball, free) the
    rotation vector ``φ = log(q_targetˉ¹ ⊗ q)`` (angle wrapped to (−π, π]).  The Jacobian
    w.r.t. ``dq`` is the identity except for rotation blocks, where perturbing
    ``q ← q ⊗ exp(δ)`` gives the inverse right Jacobian of SO(3)::

        ∂φ/∂δ = J_r⁻¹(φ) = I + ½[φ]× + (1/θ² − (1 + cos θ)/(2 θ sin θ)) [φ]×²,  θ = ‖φ‖

    A cost evaluates it over all stages at once (:meth:`batch_evaluate`, NumPy; rotation
    vectors by :func:`~contactopt.rotations.rotation_vector_difference`); :meth:`evaluate`, on
    MuJoCo's ``mj_differentiatePos``, is the stage-by-stage reference.

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
      reference: optional ``reference(t, t0, x0) -> (nq,)`` target that moves
        (:meth:`Residual.with_reference`; quaternions are normalized).
    """

    supports_reference = True

    def __init__(self, model, target=None, *, joints=None, dofs=None, name: str = "qpos", wrap="auto",
                 reference: Callable | None = None):
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
        # the batched evaluation: a plain coordinate (hinge, slide or a free joint's translation)
        # has ``(q ⊖ q_target)_dof = q[qadr] − q_target[qadr]`` and the unit vector of its DoF
        # as Jacobian row; a rotation DoF takes its component of the block's rotation vector
        # and the matching row of ``J_r⁻¹(φ)``
        self._linear, self._blocks = _split_qpos_dofs(model, self.dofs)
        hinge = model.jnt_type[model.dof_jntid[self.dofs]] == int(mujoco.mjtJoint.mjJNT_HINGE)
        if wrap == "auto":
            hinge &= ~model.jnt_limited[model.dof_jntid[self.dofs]].astype(bool)
        #: positions in the residual whose error is wrapped into (−π, π]
        self.wrapped = np.flatnonzero(hinge) if wrap is not False else np.zeros(0, dtype=np.intp)
        #: the Jacobian rows of the plain coordinates (constant)
        self._jx = np.zeros((self.size, self.ndx))
        rows = self._linear[0]
        self._jx[rows, self.dofs[rows]] = 1.0
        if reference is not None:
            self.with_reference(reference)

    def _normalize_targets(self, targets):
        if self._rot:  # ball or free joints: unit quaternions
            for q in targets:
                mujoco.mj_normalizeQuat(self.model, q)
        return targets

    def evaluate(self, data, x, u, jacobian):
        nq, nv = self.model.nq, self.nv
        mujoco.mj_differentiatePos(self.model, self._diff, 1.0, self.current_target(), x[:nq])
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
        return ()

    def batch_evaluate(self, kin, X, U, jacobian):
        target = self.current_target()
        N = X.shape[0]
        r = np.empty((N, self.size))
        rows, qidx = self._linear
        r[:, rows] = X[:, qidx] - target[..., qidx]
        if self.wrapped.size:
            r[:, self.wrapped] = _wrap_angle(r[:, self.wrapped])
        phis = []
        for qadr, _, rows, comps in self._blocks:  # ball joints and free-joint rotations
            phi = rotation_vector_difference(X[:, qadr:qadr + 4], target[..., qadr:qadr + 4])
            r[:, rows] = phi[:, comps]
            phis.append(phi)
        if not jacobian:
            return r, None, None
        jx = np.broadcast_to(self._jx, (N,) + self._jx.shape).copy()
        for (_, adr, rows, comps), phi in zip(self._blocks, phis):
            jx[:, rows, adr:adr + 3] = _so3_right_jacobian_inverse_batch(phi)[:, comps]
        return r, jx, None


def _wrap_angle(a: np.ndarray) -> np.ndarray:
    """Angles ``a`` [rad] wrapped into ``(−π, π]``; angles already inside are returned bit for bit."""
    a = np.array(a, dtype=float)
    out = (a > np.pi) | (a <= -np.pi)
    if np.any(out):
        a[out] = np.pi - np.mod(np.pi - a[out], 2.0 * np.pi)
    return a


def _split_qpos_dofs(model, dofs):
    """The selected ``dofs`` split by how their configuration error is computed.

    Returns ``((rows, qidx), blocks)``: ``rows`` the positions in ``dofs`` of plain coordinates
    (hinge, slide, free-joint translation) and ``qidx`` their qpos indices; ``blocks`` one
    ``(qadr, dofadr, rows, components)`` per ball joint or free-joint rotation with a selected
    DoF — the quaternion's qpos address, the block's first DoF, the positions in ``dofs`` of
    its selected rotation DoFs and their components (0–2) in the block's rotation vector."""
    rows, qidx, blocks = [], [], {}
    for k, dof in enumerate(dofs):
        j = int(model.dof_jntid[dof])
        jt = int(model.jnt_type[j])
        off = int(dof) - int(model.jnt_dofadr[j])
        if jt in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
            rows.append(k)
            qidx.append(int(model.jnt_qposadr[j]))
        elif jt == int(mujoco.mjtJoint.mjJNT_FREE) and off < 3:
            rows.append(k)
            qidx.append(int(model.jnt_qposadr[j]) + off)
        else:  # a rotation DoF: ball (off 0-2) or free (off 3-5)
            shift = 3 if jt == int(mujoco.mjtJoint.mjJNT_FREE) else 0
            key = (int(model.jnt_qposadr[j]) + shift, int(model.jnt_dofadr[j]) + shift)
            block = blocks.setdefault(key, ([], []))
            block[0].append(k)
            block[1].append(off - shift)
    linear = (np.array(rows, dtype=np.intp), np.array(qidx, dtype=np.intp))
    return linear, [(qadr, dofadr, np.array(r, dtype=np.intp), np.array(c, dtype=np.intp))
                    for (qadr, dofadr), (r, c) in blocks.items()]


def _so3_right_jacobian_inverse(phi: np.ndarray) -> np.ndarray:
    """``J_r⁻¹(φ)`` of SO(3) for a rotation vector ``φ`` (3,), exact up to θ = π."""
    theta = math.sqrt(float(phi @ phi))
    S = np.array([[0.0, -phi[2], phi[1]], [phi[2], 0.0, -phi[0]], [-phi[1], phi[0], 0.0]])
    if theta < 1e-6:
        coef = 1.0 / 12.0 + theta * theta / 720.0
    else:
        coef = 1.0 / theta ** 2 - (1.0 + math.cos(theta)) / (2.0 * theta * math.sin(theta))
    return np.eye(3) + 0.5 * S + coef * (S @ S)


def _so3_right_jacobian_inverse_batch(phi: np.ndarray) -> np.ndarray:
    """``(N, 3, 3)``: :func:`_so3_right_jacobian_inverse` of each row of ``phi (N, 3)``."""
    theta2 = np.sum(phi * phi, axis=1)
    theta = np.sqrt(theta2)
    S = np.zeros((phi.shape[0], 3, 3))
    S[:, 0, 1], S[:, 0, 2], S[:, 1, 2] = -phi[:, 2], phi[:, 1], -phi[:, 0]
    S[:, 1, 0], S[:, 2, 0], S[:, 2, 1] = phi[:, 2], -phi[:, 1], phi[:, 0]
    small = theta < 1e-6
    safe = np.where(small, 1.0, theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        coef = np.where(small, 1.0 / 12.0 + theta2 / 720.0,
                        1.0 / safe ** 2 - (1.0 + np.cos(safe)) / (2.0 * safe * np.sin(safe)))
    return np.eye(3) + 0.5 * S + coef[:, None, None] * np.matmul(S, S)


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
      reference: optional ``reference(t, t0, x0) -> (len(dofs),)`` target that moves
        (:meth:`Residual.with_reference`).
    """

    supports_reference = True

    def __init__(self, model, target=None, *, joints=None, dofs=None, name: str = "qvel",
                 reference: Callable | None = None):
        super().__init__(model, 0, name)
        self.dofs = _select_dofs(model, joints, dofs, name)
        self.size = self.dofs.size
        self.target = (np.zeros(self.size) if target is None
                       else as_array(f"{name} target", target, (self.size,)).copy())
        self._jx = np.zeros((self.size, self.ndx))
        self._jx[np.arange(self.size), model.nv + self.dofs] = 1.0
        if reference is not None:
            self.with_reference(reference)

    def evaluate(self, data, x, u, jacobian):
        nq = self.model.nq
        r = x[nq + self.dofs] - self.current_target()
        return (r, self._jx.copy(), None) if jacobian else (r, None, None)

    def batch_requests(self, jacobian):
        return ()

    def batch_evaluate(self, kin, X, U, jacobian):
        r = X[:, self.model.nq + self.dofs] - self.current_target()
        if not jacobian:
            return r, None, None
        return r, np.broadcast_to(self._jx, (X.shape[0],) + self._jx.shape).copy(), None


class Control(Residual):
    """Control error ``r = u[actuators] − target`` (actuator units, e.g. N·m or normalized).

    Args:
      model: the model.
      target: ``(len(actuators),)`` target controls (default zero).
      actuators: actuator names or indices (default all).
      reference: optional ``reference(t, t0, x0) -> (len(actuators),)`` target that moves
        (:meth:`Residual.with_reference`).
    """

    supports_reference = True

    def __init__(self, model, target=None, *, actuators=None, name: str = "ctrl",
                 reference: Callable | None = None):
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
        if reference is not None:
            self.with_reference(reference)

    def evaluate(self, data, x, u, jacobian):
        r = u[self.actuators] - self.current_target()
        return (r, None, self._ju.copy()) if jacobian else (r, None, None)

    def batch_requests(self, jacobian):
        return ()

    def batch_evaluate(self, kin, X, U, jacobian):
        r = U[:, self.actuators] - self.current_target()
        if not jacobian:
            return r, None, None
        return r, None, np.broadcast_to(self._ju, (U.shape[0],) + self._ju.shape).copy()


class MechanicalEnergy(Residual):
    """Mechanical energy minus a target: ``r = E(q, v) − E_target`` (J), size 1.

    ``E = ½ vᵀM(q)v − m gᵀ c(q)`` with ``m`` the total mass, ``g`` the model's gravity and ``c``
    the centre of mass (MuJoCo's ``data.energy`` convention: potential zero at the origin).
    Jacobian: ``∂E/∂v = M v``; ``∂E/∂q = −m gᵀ J_c`` plus ``∂(½ vᵀMv)/∂q`` by forward
    differences of ``M(q)`` (``mj_crb`` on a scratch ``MjData``, step :attr:`FD_STEP` along each
    tangent direction).  Used to pump energy into swing-up tasks, where a position cost alone
    stalls at the hanging stationary point.

    Over many stages (:meth:`batch_evaluate`) the same MuJoCo calls run as one compiled loop
    (:func:`contactopt.native.native_mechanical_energy`) where the call layer is available;
    :meth:`evaluate` is the readable reference and the fallback.
    """

    #: forward-difference step of ``∂(½ vᵀMv)/∂q`` (rad or m along a tangent direction)
    FD_STEP = 1e-6

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
        s, eps = self._scratch, self.FD_STEP
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

    def batch_requests(self, jacobian):
        """No rows of the shared kinematics pass: the compiled energy loop runs its own MuJoCo
        calls per stage.  None (stage by stage) without the compiled call layer."""
        from .. import native

        return () if native.NATIVE else None

    def batch_evaluate(self, kin, X, U, jacobian):
        """``R (N, 1)`` and ``J_x (N, 1, ndx)`` of the states ``X (N, nx)`` in one compiled loop
        (the values of :meth:`evaluate` stage by stage, to roundoff)."""
        from .. import native

        E, JX = native.native_mechanical_energy(self.model, self._scratch, X, self.mass,
                                                self.gravity, self.FD_STEP, jacobian)
        r = (E - self.target)[:, None]
        return r, (None if JX is None else JX[:, None, :]), None


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

    def schedule(self, times, t0, x0) -> None:
        for _, res in self.parts:
            res.schedule(times, t0, x0)

    @property
    def scheduled(self) -> bool:
        return any(res.scheduled for _, res in self.parts)

    def _set_stage(self, stage) -> None:
        for _, res in self.parts:
            res._set_stage(stage)

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
        try:
            out = self.fn(self.model, data, x, u)
        except ContactoptError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: any exception is the user's error
            raise ContactoptError(f"residual {self.name}: fn(model, data, x, u) raised "
                                  f"{type(exc).__name__}: {exc}") from exc
        r = as_array(f"residual {self.name} output", out, (self.size,))
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
