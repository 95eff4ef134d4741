"""Policies and states as protobuf messages, and the client-side policies rebuilt from them.

A policy message (:class:`policy_server_pb2.Policy`) carries everything needed to evaluate
the control law on the plant's machine without the planner or even the MuJoCo model:

* iLQG's :class:`~contactopt.mpc.policy.TrajectoryPolicy` → ``TrajectoryLaw`` (``h``, ``U``,
  ``X``, ``K``, limits) → :class:`RemoteTrajectoryPolicy`;
* IDTO's :class:`~contactopt.mpc.idto_planner.IDTOPolicy` → ``SplineLaw`` (knots ``q``, ``v``,
  ``u_ff``, PD matrices ``Kp``, ``Kd`` and limits) → :class:`RemoteSplinePolicy`;
* GDD's :class:`~contactopt.mpc.policy.ConstantPolicy` → ``ConstantLaw`` → :class:`RemoteConstantPolicy`.

The configuration difference ``q₁ ⊖ q₀`` (quaternion-aware, as ``mujoco.mj_differentiatePos``)
is computed from the model's joint layout (:class:`Layout`, sent once when a session opens).
Arrays travel as little-endian float64 bytes with their shape (``Array``); decoding checks
sizes and finiteness and raises :class:`~contactopt.errors.ParameterError` naming the field.
Nothing received is unpickled or evaluated.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError
from ..mpc.policy import Policy, SplineTrackingPolicy

__all__ = ["Layout", "RemoteConstantPolicy", "RemoteSplinePolicy", "RemoteTrajectoryPolicy", "check_mocap",
           "decode_array", "decode_mocap", "decode_policy", "decode_state", "encode_array", "encode_policy",
           "encode_state", "grpc_module", "layout_of", "pb"]


def _missing_extra(requirement: str, exc: Exception) -> ParameterError:
    """The one-line error of a ``[server]`` dependency that is missing or too old."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return ParameterError(f"the policy server needs {requirement} ({type(exc).__name__}: {first}); "
                          "pip install -U contactopt[server]")


def pb():
    """The generated message module (imported lazily: grpc/protobuf are the ``[server]`` extra)."""
    try:
        from . import policy_server_pb2
    except Exception as exc:  # noqa: BLE001 - missing, or older than the generated code needs
        raise _missing_extra("protobuf >= 7.35", exc) from None
    return policy_server_pb2


def grpc_module():
    """The ``grpc`` module, or a one-line :class:`ParameterError` naming the ``[server]`` extra."""
    try:
        import grpc

        from . import policy_server_pb2_grpc  # noqa: F401  (checks the grpcio version it was generated for)
    except Exception as exc:  # noqa: BLE001 - missing, or older than the generated code needs
        raise _missing_extra("grpcio >= 1.85.1", exc) from None
    return grpc


# --------------------------------------------------------------------------- arrays

_F8 = np.dtype("<f8")


def encode_array(msg, value) -> None:
    """Fill the ``Array`` message ``msg`` with ``value`` (any float array; shape kept)."""
    a = np.ascontiguousarray(value, dtype=_F8)
    del msg.shape[:]
    msg.shape.extend(a.shape)
    msg.data = a.tobytes()


def decode_array(name: str, msg, shape=None, *, allow_empty: bool = False, finite: bool = True) -> np.ndarray | None:
    """The float64 array of the ``Array`` message ``msg`` (a read-only view of its bytes).

    Args:
      name: field name for errors (``"policy.trajectory.K"``).
      shape: expected shape, ``None`` entries match anything.
      allow_empty: an unset array (no shape, no data) decodes to None.
      finite: refuse NaN and inf (``±inf`` is allowed only where ``finite`` is False, e.g. limits).

    Raises:
      ParameterError: data size not ``8 · prod(shape)``, wrong shape or non-finite values.
    """
    dims = tuple(int(d) for d in msg.shape)
    if not dims and not msg.data:
        if allow_empty:
            return None
        raise ParameterError(f"{name}: missing array")
    n = math.prod(dims) if dims else 1
    if n > 1 << 28 or len(msg.data) != 8 * n:
        raise ParameterError(f"{name}: {len(msg.data)} bytes do not hold a float64 array of shape {dims}")
    a = np.frombuffer(msg.data, dtype=_F8).reshape(dims)
    if shape is not None and (len(shape) != len(dims) or any(s is not None and s != d
                                                               for s, d in zip(shape, dims))):
        want = ", ".join("*" if s is None else str(s) for s in shape)
        raise ParameterError(f"{name}: expected shape ({want}{',' if len(shape) == 1 else ''}), got {dims}")
    if finite and not np.isfinite(a).all():
        raise ParameterError(f"{name}: contains NaN or inf")
    if not finite and np.isnan(a).any():
        raise ParameterError(f"{name}: contains NaN")
    return a


# --------------------------------------------------------------------------- layout and ⊖

_FREE, _BALL = 0, 1


@dataclass(frozen=True)
class Layout:
    """The sizes and joint layout of a model: what the client needs to evaluate a policy.

    Attributes:
      nq, nv, nu, na, nmocap: MuJoCo sizes.
      joints: ``(type, qposadr, dofadr)`` per joint (``mjtJoint``: 0 free, 1 ball, 2 slide, 3 hinge).
      timestep: the model's time step [s].
    """

    nq: int
    nv: int
    nu: int
    na: int
    nmocap: int
    joints: tuple
    timestep: float

    @property
    def nx(self) -> int:
        """State size ``nq + nv + na``."""
        return self.nq + self.nv + self.na

    @property
    def ndx(self) -> int:
        """Tangent state size ``2 nv + na``."""
        return 2 * self.nv + self.na

    def to_message(self, msg) -> None:
        """Fill a ``ModelLayout`` message."""
        msg.nq, msg.nv, msg.nu, msg.na, msg.nmocap = self.nq, self.nv, self.nu, self.na, self.nmocap
        msg.timestep = self.timestep
        del msg.joints[:]
        for t, qa, da in self.joints:
            msg.joints.add(type=t, qposadr=qa, dofadr=da)

    @classmethod
    def from_message(cls, msg) -> Layout:
        """The layout of a ``ModelLayout`` message (addresses checked against the sizes)."""
        joints = tuple((int(j.type), int(j.qposadr), int(j.dofadr)) for j in msg.joints)
        out = cls(int(msg.nq), int(msg.nv), int(msg.nu), int(msg.na), int(msg.nmocap), joints, float(msg.timestep))
        for t, qa, da in joints:
            nqj, nvj = {0: (7, 6), 1: (4, 3)}.get(t, (1, 1))
            if t not in (0, 1, 2, 3) or qa < 0 or da < 0 or qa + nqj > out.nq or da + nvj > out.nv:
                raise ParameterError(f"layout: joint (type {t}, qposadr {qa}, dofadr {da}) does not fit "
                                     f"nq={out.nq}, nv={out.nv}")
        return out

    def differentiate(self, q0: np.ndarray, q1: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``q1 ⊖ q0`` ``(nv,)``: ``mujoco.mj_differentiatePos(model, out, 1, q0, q1)`` from the layout."""
        if out is None:
            out = np.empty(self.nv)
        if self._euclidean:
            np.subtract(q1, q0, out=out)
            return out
        qs, ds, rotations = self._split
        out[ds] = q1[qs] - q0[qs]  # slide and hinge joints, and the positions of free joints
        for qa, da in rotations:  # quaternions of free and ball joints
            out[da:da + 3] = _sub_quat(q1[qa:qa + 4], q0[qa:qa + 4])
        return out

    @functools.cached_property
    def _split(self):
        """``(qpos indices, dof indices)`` of the Euclidean coordinates and ``(qposadr, dofadr)``
        of each quaternion."""
        qs, ds, rotations = [], [], []
        for t, qa, da in self.joints:
            if t == _FREE:
                qs += [qa, qa + 1, qa + 2]
                ds += [da, da + 1, da + 2]
                rotations.append((qa + 3, da + 3))
            elif t == _BALL:
                rotations.append((qa, da))
            else:
                qs.append(qa)
                ds.append(da)
        return np.array(qs, dtype=int), np.array(ds, dtype=int), tuple(rotations)

    def normalize_quats(self, q: np.ndarray) -> None:
        """Normalize the quaternions of free and ball joints of ``q`` in place (``mj_normalizeQuat``)."""
        for t, qa, _ in self.joints:
            if t in (_FREE, _BALL):
                s = qa + 3 if t == _FREE else qa
                n = math.sqrt(float(q[s] ** 2 + q[s + 1] ** 2 + q[s + 2] ** 2 + q[s + 3] ** 2))
                if n < 1e-15:
                    q[s:s + 4] = (1.0, 0.0, 0.0, 0.0)
                else:
                    q[s:s + 4] /= n

    @functools.cached_property
    def _euclidean(self) -> bool:
        return self.nq == self.nv and all(t not in (_FREE, _BALL) for t, _, _ in self.joints)


def _sub_quat(qa, qb) -> np.ndarray:
    """``mju_subQuat``: the rotation vector of ``qb⁻¹ qa`` (3,)."""
    # qdif = conj(qb) * qa
    w1, x1, y1, z1 = qb[0], -qb[1], -qb[2], -qb[3]
    w2, x2, y2, z2 = qa
    w = w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2
    x = w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2
    y = w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2
    z = w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2
    s = math.sqrt(x * x + y * y + z * z)
    angle = 2 * math.atan2(s, w)
    if angle > math.pi:
        angle -= 2 * math.pi
    if s < 1e-15:  # mju_normalize3 falls back to the x axis
        return np.array([angle, 0.0, 0.0])
    return np.array([x / s, y / s, z / s]) * angle


def layout_of(model) -> Layout:
    """The :class:`Layout` of a ``mujoco.MjModel``."""
    joints = tuple((int(model.jnt_type[j]), int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j]))
                   for j in range(model.njnt))
    return Layout(model.nq, model.nv, model.nu, model.na, model.nmocap, joints, float(model.opt.timestep))


# --------------------------------------------------------------------------- client-side policies


class RemoteTrajectoryPolicy(Policy):
    """iLQG's law rebuilt on the client; the same control as
    :class:`~contactopt.mpc.policy.TrajectoryPolicy` (interpolated ``Ū``, reference ``X̄(t)``,
    gains ``K_i``, clipping; the last control held after the plan).

    Args:
      layout: the model's :class:`Layout`.
      t0: time [s] of ``X[0]``; h: knot spacing [s].
      U: ``(T, nu)``; X: ``(T+1, nx)`` or None; K: ``(T, nu, ndx)`` or None; lower, upper: ``(nu,)``.
    """

    def __init__(self, layout: Layout, t0: float, h: float, U, X, K, lower, upper):
        self.layout, self.t0, self.h = layout, float(t0), float(h)
        self.U, self.X, self.K = U, X, K
        self.nu = layout.nu
        self.lower, self.upper = lower, upper
        self._dX: dict[int, np.ndarray] = {}  # X[i+1] ⊖ X[i], computed on first use

    @property
    def horizon_time(self) -> float:
        """Seconds covered by the plan ``T h``."""
        return self.U.shape[0] * self.h

    def _diff(self, x0, x1) -> np.ndarray:
        lay = self.layout
        out = np.empty(lay.ndx)
        lay.differentiate(x0[:lay.nq], x1[:lay.nq], out[:lay.nv])
        out[lay.nv:] = x1[lay.nq:] - x0[lay.nq:]
        return out

    def _index(self, t: float):
        from ..mpc.policy import plan_index

        return plan_index(t, self.t0, self.h, self.U.shape[0])

    def _ff(self, i: int, w: float):
        T = self.U.shape[0]
        return self.U[i] if (w == 0.0 or i + 1 >= T) else (1 - w) * self.U[i] + w * self.U[i + 1]

    def feedforward(self, t: float) -> np.ndarray:
        """Clipped ``Ū(t)`` ``(nu,)``."""
        i, w = self._index(t)
        return np.clip(self._ff(i, w), self.lower, self.upper)

    def control(self, t: float, x) -> np.ndarray:
        """``clip(Ū(t) + K_i (x ⊖ X̄(t)))`` ``(nu,)`` for state ``x`` ``(nx,)`` at time ``t`` [s]."""
        i, w = self._index(t)
        u = self._ff(i, w)
        if self.K is not None and x is not None:
            dx = self._diff(self.X[i], np.asarray(x, dtype=float))
            if w:
                step = self._dX.get(i)
                if step is None:
                    step = self._dX[i] = self._diff(self.X[i], self.X[i + 1])
                dx -= w * step
            u = u + self.K[i] @ dx
        return np.clip(u, self.lower, self.upper)


class RemoteSplinePolicy(SplineTrackingPolicy):
    """IDTO's law rebuilt on the client from the model's joint layout (no ``MjModel``); the same
    control as :class:`~contactopt.mpc.idto_planner.IDTOPolicy` (the shared law:
    :class:`~contactopt.mpc.policy.SplineTrackingPolicy`).

    Args:
      layout: :class:`Layout`; t0, h: first knot time and spacing [s];
      q ``(T+1, nq)``, v ``(T+1, nv)``, u_ff ``(T, nu)``, Kp, Kd ``(nu, nv)``, lower, upper ``(nu,)``.
    """

    def __init__(self, layout: Layout, t0: float, h: float, q, v, u_ff, Kp, Kd, lower, upper):
        self.layout, self.t0, self.h = layout, float(t0), float(h)
        self.nq, self.nv, self.nu = layout.nq, layout.nv, layout.nu
        self.Kp, self.Kd, self.lower, self.upper = Kp, Kd, lower, upper
        self._set_plan(q, v, u_ff)

    def _normalize(self, q: np.ndarray) -> None:
        self.layout.normalize_quats(q)

    def _difference(self, q: np.ndarray, q_target: np.ndarray, out: np.ndarray) -> None:
        self.layout.differentiate(q, q_target, out)


class RemoteConstantPolicy(Policy):
    """GDD's law on the client: the control computed at the sent state, held."""

    def __init__(self, u, t0: float):
        self.u = np.array(u, dtype=float)
        self.nu = self.u.size
        self.t0 = float(t0)
        self.horizon_time = math.inf

    def control(self, t: float, x) -> np.ndarray:
        """``u`` ``(nu,)``."""
        return self.u.copy()


# --------------------------------------------------------------------------- encode / decode


def encode_policy(policy, msg, *, sequence: int, cost: float = math.nan, compute_time: float = 0.0,
                  message: str = "") -> None:
    """Fill the ``Policy`` message ``msg`` with ``policy`` (a TrajectoryPolicy, IDTOPolicy or
    ConstantPolicy, or their client-side twins).

    Raises:
      ParameterError: a policy type without a wire form.
    """
    msg.sequence = int(sequence)
    msg.t0 = float(policy.t0)
    msg.cost = float(cost)
    msg.compute_time_s = float(compute_time)
    msg.message = str(message)[:1000]
    msg.nu = int(policy.nu)
    if hasattr(policy, "U") and hasattr(policy, "lower"):  # iLQG
        law = msg.trajectory
        law.h = float(policy.h)
        encode_array(law.U, policy.U)
        if getattr(policy, "K", None) is not None:
            encode_array(law.X, policy.X)
            encode_array(law.K, policy.K)
        encode_array(law.lower, policy.lower)
        encode_array(law.upper, policy.upper)
    elif hasattr(policy, "Kp") and hasattr(policy, "q") or hasattr(policy, "_spline"):  # IDTO
        law = msg.spline
        law.h = float(policy.h)
        if isinstance(policy, RemoteSplinePolicy):
            nq, nv = policy.layout.nq, policy.layout.nv
            Y = policy._spline.Y
            q, v, u = Y[:, :nq], Y[:, nq:nq + nv], Y[:-1, nq + nv:]
        else:
            q, v, u = policy.q, policy.v, policy.u
        encode_array(law.q, q)
        encode_array(law.v, v)
        encode_array(law.u_ff, u)
        encode_array(law.Kp, policy.Kp)
        encode_array(law.Kd, policy.Kd)
        encode_array(law.lower, policy.lower)
        encode_array(law.upper, policy.upper)
    elif hasattr(policy, "u"):
        encode_array(msg.constant.u, policy.u)
    else:
        raise ParameterError(f"policy of type {type(policy).__name__} has no wire form")


def _limits(name, law, nu):
    lo = decode_array(f"{name}.lower", law.lower, (nu,), finite=False)
    hi = decode_array(f"{name}.upper", law.upper, (nu,), finite=False)
    return lo, hi


def decode_policy(msg, layout: Layout) -> Policy:
    """The client-side policy of a ``Policy`` message for a model of layout ``layout``.

    Raises:
      ParameterError: a missing law, a bad step, or an array of the wrong shape (names the field).
    """
    nu = layout.nu
    if not math.isfinite(msg.t0):
        raise ParameterError("policy.t0: not finite")
    kind = msg.WhichOneof("law")
    if kind == "trajectory":
        law = msg.trajectory
        if not (math.isfinite(law.h) and law.h > 0):
            raise ParameterError(f"policy.trajectory.h: must be positive, got {law.h}")
        U = decode_array("policy.trajectory.U", law.U, (None, nu))
        T = U.shape[0]
        if T < 1:
            raise ParameterError("policy.trajectory.U: needs at least one step")
        K = decode_array("policy.trajectory.K", law.K, (T, nu, layout.ndx), allow_empty=True)
        X = None
        if K is not None:
            X = decode_array("policy.trajectory.X", law.X, (T + 1, layout.nx))
        lo, hi = _limits("policy.trajectory", law, nu)
        return RemoteTrajectoryPolicy(layout, msg.t0, law.h, U, X, K, lo, hi)
    if kind == "spline":
        law = msg.spline
        if not (math.isfinite(law.h) and law.h > 0):
            raise ParameterError(f"policy.spline.h: must be positive, got {law.h}")
        q = decode_array("policy.spline.q", law.q, (None, layout.nq))
        T = q.shape[0] - 1
        if T < 1:
            raise ParameterError("policy.spline.q: needs at least two knots")
        v = decode_array("policy.spline.v", law.v, (T + 1, layout.nv))
        u = decode_array("policy.spline.u_ff", law.u_ff, (T, nu))
        Kp = decode_array("policy.spline.Kp", law.Kp, (nu, layout.nv))
        Kd = decode_array("policy.spline.Kd", law.Kd, (nu, layout.nv))
        lo, hi = _limits("policy.spline", law, nu)
        return RemoteSplinePolicy(layout, msg.t0, law.h, q, v, u, Kp, Kd, lo, hi)
    if kind == "constant":
        return RemoteConstantPolicy(decode_array("policy.constant.u", msg.constant.u, (nu,)), msg.t0)
    raise ParameterError("policy: no control law in the message")


# --------------------------------------------------------------------------- states


def check_mocap(name: str, value, nmocap: int, width: int) -> np.ndarray:
    """``value`` as a float array of shape ``(nmocap, width)`` (positions: width 3 [m];
    quaternions: width 4, ``w x y z``, normalized here).

    Args:
      name: field name for errors (``"state.mocap_pos"``).
      value: anything ``np.asarray`` takes with ``nmocap * width`` numbers (flat or 2-D).
      nmocap: the model's number of mocap bodies.
      width: 3 for positions, 4 for quaternions.

    Raises:
      ParameterError: a wrong size or shape, NaN or inf, or a quaternion of zero length
        (names the field and the row).
    """
    try:
        a = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError(f"{name}: expected {nmocap} x {width} numbers, got {type(value).__name__}") from None
    if a.size != nmocap * width or (a.ndim == 2 and a.shape != (nmocap, width)) or a.ndim > 2:
        raise ParameterError(f"{name}: expected shape ({nmocap}, {width}) (nmocap = {nmocap}), "
                             f"got {a.shape if a.ndim != 1 else f'{a.size} values'}")
    a = a.reshape(nmocap, width)
    if not np.isfinite(a).all():
        row = int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])
        raise ParameterError(f"{name}: contains NaN or inf (mocap body {row})")
    if width == 4:
        norms = np.linalg.norm(a, axis=1)
        if (norms < 1e-12).any():
            raise ParameterError(f"{name}: quaternion of mocap body {int(np.flatnonzero(norms < 1e-12)[0])} "
                                 "has zero length")
        a /= norms[:, None]
    return a


def encode_state(msg, t: float, qpos, qvel, act=None, *, mocap_pos=None, mocap_quat=None) -> None:
    """Fill a ``State`` message (time [s], qpos ``(nq,)``, qvel ``(nv,)``, act ``(na,)``; optional
    mocap positions ``(nmocap, 3)`` [m] and quaternions ``(nmocap, 4)``, sent row-major flat)."""
    msg.time = float(t)
    del msg.qpos[:], msg.qvel[:], msg.act[:], msg.mocap_pos[:], msg.mocap_quat[:]
    msg.qpos.extend(np.asarray(qpos, dtype=float).ravel().tolist())
    msg.qvel.extend(np.asarray(qvel, dtype=float).ravel().tolist())
    if act is not None:
        msg.act.extend(np.asarray(act, dtype=float).ravel().tolist())
    if mocap_pos is not None:
        msg.mocap_pos.extend(np.asarray(mocap_pos, dtype=float).ravel().tolist())
    if mocap_quat is not None:
        msg.mocap_quat.extend(np.asarray(mocap_quat, dtype=float).ravel().tolist())


def decode_mocap(msg, layout: Layout) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(mocap_pos (nmocap, 3) [m] or None, mocap_quat (nmocap, 4), normalized, or None)`` of a
    ``State`` message; None where the field was not sent.

    Raises:
      ParameterError: a wrong size, NaN or inf, or a zero quaternion, naming the field.
    """
    out = []
    for name, field, width in (("mocap_pos", msg.mocap_pos, 3), ("mocap_quat", msg.mocap_quat, 4)):
        if len(field) == 0:
            out.append(None)
            continue
        if len(field) != width * layout.nmocap:
            raise ParameterError(f"state.{name}: expected {width * layout.nmocap} values "
                                 f"(nmocap = {layout.nmocap} x {width}), got {len(field)}")
        out.append(check_mocap(f"state.{name}", np.asarray(field, dtype=float), layout.nmocap, width))
    return out[0], out[1]


def decode_state(msg, layout: Layout) -> tuple[float, np.ndarray]:
    """``(t, x (nx,))`` of a ``State`` message; act may be omitted when ``na > 0`` (zeros).
    The mocap poses are checked (:func:`decode_mocap` returns them).

    Raises:
      ParameterError: a wrong size or a non-finite value, naming the field (``state.qpos`` …).
    """
    if not math.isfinite(msg.time):
        raise ParameterError(f"state.time: must be finite, got {msg.time}")
    parts = []
    for name, field, n in (("qpos", msg.qpos, layout.nq), ("qvel", msg.qvel, layout.nv),
                           ("act", msg.act, layout.na)):
        a = np.asarray(field, dtype=float)
        if name == "act" and a.size == 0:
            a = np.zeros(n)
        if a.size != n:
            raise ParameterError(f"state.{name}: expected {n} values, got {a.size}")
        if not np.isfinite(a).all():
            first = int(np.flatnonzero(~np.isfinite(a))[0])
            raise ParameterError(f"state.{name}: contains NaN or inf at index {first}")
        parts.append(a)
    decode_mocap(msg, layout)  # checked here too: a bad mocap pose refuses the whole state
    return float(msg.time), np.concatenate(parts)
