"""Cost terms over accelerations for goal-directed dynamics, composable and weighted.

Every term is, at a given state, a (Gauss-Newton) quadratic in the acceleration
``a (nv,)`` and, through MuJoCo's inverse constraint force ``f(a) = −∇s(J a − aref)``
(piecewise affine in ``a`` for pyramidal cones), in the constraint forces::

    ℓ_t(a) = ½ aᵀ Q a + qᵀ a + c0 + ½ ‖Ka a + Kf f(a) + e‖²

:meth:`CostTerm.fill` writes a term's data for one
:class:`~contactopt.solvers.gdd.problem.GDDProblem` in place (no allocation on the
solver's hot path); :class:`Cost` gathers the terms into :class:`CostArrays`,
the form the solver kernel takes, and :meth:`CostTerm.model` returns the
weighted arrays of one term (:class:`TermModel`).  :meth:`CostTerm.evaluate` gives value, gradient and
Hessian (exact inside each piece where the constraint states are fixed:
``∇ℓ = Qa + q + Kᵀr``, ``H = Q + KᵀK`` with ``K = Ka + Kf ∂f/∂a``).

Terms (Todorov, *Goal directed dynamics*, sections II and V):

* :class:`EndEffectorAcceleration` — ``(w/2)‖J_e a + J̇_e v − a*_e‖²`` (eq. 11) for a
  site or body, 3 rows (position) or 6 rows (pose), with ``a*_e`` from a
  :class:`SpringDamper` toward a spatial goal, a :class:`MinimumJerk` profile, or
  a fixed array;
* :class:`Damping` — ``(α/2)‖a + βv‖²_M`` (eq. 26);
* :class:`CenterOfMassAcceleration` — ``(w/2)‖J_c a + J̇_c v − a*_c‖²``;
* :class:`CenterOfPressure` — ``(w/2)‖Σ_c f_n,c (p_c − p*)_xy / F‖²`` over ground contacts;
* :class:`ContactForce` — ``(w/2)‖F_body(f) − F*‖²``, the net contact force on a body;
* :class:`AccelerationTarget` — ``(w/2)‖a − a*‖²_W`` with an acceleration target
  handed in by an external policy (``W = M`` or identity on chosen dofs).

Units: accelerations m/s² (rad/s²), forces N; a weight multiplies the squared
residual, so its unit is that of the objective (N²/kg ≡ N·m/s²) divided by the
squared residual unit.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import NamedTuple

import mujoco
import numpy as np

from ...errors import NonFiniteError, ParameterError, as_array, check_nonnegative, check_positive
from . import kernels as K
from .problem import GDDProblem

_ENTRIES: dict = {}

#: bumped whenever a term's structure changes (a new target object, fixed ↔ policy):
#: the solver's compiled plan of a cost is rebuilt then
_STRUCTURE = [0]


def _bump_structure() -> None:
    _STRUCTURE[0] += 1


class _TargetAttr:
    """Descriptor for a frame term's ``target``: validated and converted by :func:`_as_target`;
    replacing it bumps the structure version."""

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj._target

    def __set__(self, obj, value):
        obj._target = _as_target(value)
        _bump_structure()


def _fast(site, fn, *args):
    """Call the numba kernel ``fn`` through its compiled entry point.

    Numba's dispatcher type-checks every argument on each call (µs); a call
    ``site`` always passes the same argument types (float64 C arrays made or
    viewed by this package), so the entry point is looked up once per site.
    """
    e = _ENTRIES.get(site)
    if e is not None:
        return e(*args)
    out = fn(*args)
    try:
        import numba

        _ENTRIES[site] = fn.overloads[tuple(numba.typeof(a) for a in args)].entry_point
    except Exception:  # pragma: no cover - numba internals changed
        _ENTRIES[site] = fn
    return out

__all__ = [
    "FrameState",
    "TermModel",
    "CostArrays",
    "CostTerm",
    "Cost",
    "SpringDamper",
    "MinimumJerk",
    "EndEffectorAcceleration",
    "Damping",
    "CenterOfMassAcceleration",
    "CenterOfPressure",
    "ContactForce",
    "AccelerationTarget",
    "PostureTarget",
]


# --------------------------------------------------------------------------- term models


@dataclass
class TermModel:
    """One weighted term at one state: ``ℓ(a) = ½aᵀQa + qᵀa + c0 + ½‖Ka a + Kf f(a) + e‖²``.

    Attributes:
      Q: ``(nv, nv)`` or None; q: ``(nv,)`` or None; c0: constant.
      Ka: ``(m, nv)`` or None; Kf: ``(m, nefc)`` or None (rows that do not depend
      on the constraint forces); e: ``(m,)`` or None.
    """

    Q: np.ndarray | None = None
    q: np.ndarray | None = None
    c0: float = 0.0
    Ka: np.ndarray | None = None
    Kf: np.ndarray | None = None
    e: np.ndarray | None = None

    def evaluate(self, problem: GDDProblem, qacc):
        """Value, gradient ``(nv,)`` and Gauss-Newton Hessian ``(nv, nv)`` at ``qacc``.

        The Hessian ``Q + KᵀK`` (``K = Ka + Kf ∂f/∂a``) is exact wherever the
        constraint states do not change (pyramidal cones).
        """
        a = as_array("qacc", qacc, (problem.nv,))
        nv = problem.nv
        val = self.c0
        grad = np.zeros(nv)
        hess = np.zeros((nv, nv))
        if self.Q is not None:
            Qa = self.Q @ a
            val += 0.5 * a @ Qa
            grad += Qa
            hess += self.Q
        if self.q is not None:
            val += self.q @ a
            grad += self.q
        if self.e is not None:
            r = self.e.copy()
            Kmat = np.zeros((r.size, nv)) if self.Ka is None else self.Ka.copy()
            if self.Ka is not None:
                r += self.Ka @ a
            if self.Kf is not None and problem.nefc:
                f, dfda = problem.constraint_force(a, jacobian=True)
                r += self.Kf @ f
                Kmat += self.Kf @ dfda
            val += 0.5 * r @ r
            grad += Kmat.T @ r
            hess += Kmat.T @ Kmat
        return float(val), grad, hess


class _Slot:
    """Where one term writes its unweighted data (views into the cost buffers).

    kind "mass": ``target (nv,)``; kind "diag": ``mask (nv,)``, ``target (nv,)``;
    kind "rows": ``Ka (m, nv)``, ``e (m,)``; kind "force_rows": also ``Kf (m, nefc)``
    (zeroed before :meth:`CostTerm.fill`).
    """

    __slots__ = ("target", "mask", "Ka", "Kf", "e")

    def __init__(self):
        self.target = self.mask = self.Ka = self.Kf = self.e = None


class CostArrays:
    """All active terms of a :class:`Cost` at one state, in the form the solver kernel takes.

    mass_w ``(km,)``, mass_t ``(km, nv)``: terms ``(w/2)(a − t)ᵀM(a − t)``;
    diag_w ``(kd,)``, diag_m, diag_t ``(kd, nv)``: terms ``(w/2)Σ_i m_i (a_i − t_i)²``;
    Ka1 ``(m1, nv)``, e1, wa ``(m1,)``: rows ``(w_r/2)(Ka1_r a + e1_r)²``;
    Ka2 ``(m2, nv)``, Kf2 ``(m2, nefc)``, e2, wf ``(m2,)``: rows
    ``(w_r/2)(Ka2_r a + Kf2_r f(a) + e2_r)²``.  All but Kf2 are views of ``buffer``
    (``dims = (km, kd, m1, m2)``), the form the solver kernel takes.
    """

    def __init__(self, terms, nv):
        self.nv = nv
        self.terms = list(terms)
        km = sum(1 for t in terms if t.kind == "mass")
        kd = sum(1 for t in terms if t.kind == "diag")
        m1 = sum(t.rows for t in terms if t.kind == "rows")
        m2 = sum(t.rows for t in terms if t.kind == "force_rows")
        # every array except Kf2 is a view of one buffer, which the solver kernel takes
        # whole (layout: see kernels.cost_views; dims = (km, kd, m1, m2))
        self.dims = (km, kd, m1, m2)
        self.buffer = np.zeros(km * (nv + 1) + kd * (2 * nv + 1) + m1 * (nv + 2) + m2 * (nv + 2))
        o = 0
        views = []
        for shape in ((km,), (km, nv), (kd,), (kd, nv), (kd, nv), (m1, nv), (m1,), (m1,),
                      (m2, nv), (m2,), (m2,)):
            n = int(np.prod(shape))
            views.append(self.buffer[o:o + n].reshape(shape))
            o += n
        (self.mass_w, self.mass_t, self.diag_w, self.diag_m, self.diag_t, self.Ka1, self.e1,
         self.wa, self.Ka2, self.e2, self.wf) = views
        self.Kf2 = np.zeros((m2, 0))
        self._nefc = 0
        self.slots = []
        self.index = []  # per term: (kind, start, stop) in its weight array
        im = idg = r1 = r2 = 0
        for t in terms:
            sl = _Slot()
            if t.kind == "mass":
                sl.target = self.mass_t[im]
                self.index.append(("mass", im, im + 1))
                im += 1
            elif t.kind == "diag":
                sl.mask = self.diag_m[idg]
                sl.target = self.diag_t[idg]
                self.index.append(("diag", idg, idg + 1))
                idg += 1
            elif t.kind == "rows":
                sl.Ka = self.Ka1[r1:r1 + t.rows]
                sl.e = self.e1[r1:r1 + t.rows]
                self.index.append(("rows", r1, r1 + t.rows))
                r1 += t.rows
            elif t.kind == "force_rows":
                sl.Ka = self.Ka2[r2:r2 + t.rows]
                sl.e = self.e2[r2:r2 + t.rows]
                self.index.append(("force_rows", r2, r2 + t.rows))
                r2 += t.rows
            else:
                raise ParameterError(f"cost term {t.name}: unknown kind {t.kind!r}")
            self.slots.append(sl)
        self.has_force_rows = m2 > 0
        self._plan = [(t, sl, self._weights_of(kind)[a:b], i)
                      for i, (t, sl, (kind, a, b)) in enumerate(zip(self.terms, self.slots, self.index))]
        self._written = [None] * len(self.terms)  # weight last written per term

    def _weights_of(self, kind):
        return {"mass": self.mass_w, "diag": self.diag_w, "rows": self.wa, "force_rows": self.wf}[kind]

    def resize_forces(self, nefc: int) -> None:
        """(Re)allocate ``Kf2`` for ``nefc`` constraint rows and point the slots at it."""
        if nefc != self._nefc or self.Kf2.shape[1] != nefc:
            self.Kf2 = np.zeros((self.Ka2.shape[0], nefc))
            self._nefc = nefc
            for (kind, a, b), sl in zip(self.index, self.slots):
                if kind == "force_rows":
                    sl.Kf = self.Kf2[a:b]
        elif self.has_force_rows:
            self.Kf2[:] = 0.0

    def fill(self, problem: GDDProblem) -> None:
        """Let every term write its data for ``problem``'s state; inactive terms get weight 0."""
        if self.has_force_rows:
            self.resize_forces(problem.nefc)
        written = self._written
        for t, sl, wts, i in self._plan:
            w = t._weight if t.active else 0.0
            if w != 0.0:
                t.fill(problem, sl)
            if written[i] != w:
                wts.fill(w)
                written[i] = w

    def first_nonfinite(self) -> str | None:
        """Name of the first term whose data are not finite (None if all are)."""
        for t, sl, (kind, a, b) in zip(self.terms, self.slots, self.index):
            if not t.active or t.weight == 0.0:
                continue
            for arr in (sl.target, sl.mask, sl.Ka, sl.Kf, sl.e):
                if arr is not None and not np.all(np.isfinite(arr)):
                    return t.name
        return None

    def term_model(self, i: int, problem: GDDProblem) -> TermModel:
        """The weighted :class:`TermModel` of term ``i`` from the filled data."""
        sl, (kind, a, _) = self.slots[i], self.index[i]
        w = self._weights_of(kind)[a]
        if kind == "mass":
            Mt = problem.M @ sl.target
            return TermModel(Q=w * problem.M, q=-w * Mt, c0=0.5 * w * float(sl.target @ Mt))
        if kind == "diag":
            wm = w * sl.mask
            return TermModel(Q=np.diag(wm), q=-wm * sl.target, c0=0.5 * float(wm @ sl.target ** 2))
        sw = math.sqrt(w)
        Kf = sw * sl.Kf.copy() if kind == "force_rows" else None
        return TermModel(Ka=sw * sl.Ka.copy(), Kf=Kf, e=sw * sl.e.copy())


# --------------------------------------------------------------------------- desired accelerations


class FrameState(NamedTuple):
    """Kinematic state of an end-effector frame (world coordinates).

    pos (3,) m, vel (3,) m/s, quat (4,) (w, x, y, z) and angvel (3,) rad/s
    (None when the target only needs the position), time s.
    """

    pos: np.ndarray
    vel: np.ndarray
    quat: np.ndarray | None
    angvel: np.ndarray | None
    time: float


class SpringDamper:
    """Desired acceleration of a virtual spring-damper toward a spatial goal.

    ``a* = k S (x_goal − x) − b ẋ`` (3 rows; ``S = diag(axes)`` selects the axes the
    spring acts on, default all three); with an orientation goal also
    ``α* = k_r · log(q_goal q⁻¹) − b_r ω`` (rotation vector in the world frame),
    making 6 rows ``(linear, angular)``.  The linear part can be capped to
    ``max_acceleration`` (norm), which keeps far goals from asking for huge accelerations.

    Args:
      position: ``(3,)`` goal position, m.
      stiffness: k in 1/s² (> 0).  damping: b in 1/s (≥ 0; default critical, ``2√k``).
      orientation: optional ``(4,)`` goal quaternion (w, x, y, z).
      rot_stiffness, rot_damping: orientation gains (default: same as the linear ones).
      max_acceleration: optional cap in m/s² on the norm of the linear part.
      axes: ``(3,)`` 0/1 weights of the spring per world axis (default ``(1, 1, 1)``;
        e.g. ``(1, 1, 0)``: a horizontal spring with damping on all three axes).

    The linear gains and the goal live in one array the compiled solver reads
    directly (``position`` is a view of it; assign to it or write into it in place).
    """

    def __init__(self, position, *, stiffness: float = 100.0, damping: float | None = None,
                 orientation=None, rot_stiffness: float | None = None,
                 rot_damping: float | None = None, max_acceleration: float | None = None,
                 axes=None):
        # layout: goal (3), k, b, cap (0: none), axes (3), offset (3) — kernels.SPRING_LEN
        self._kbuf = np.zeros(K.SPRING_LEN)
        self._kbuf[6:9] = 1.0
        self.position = as_array("position", position, (3,))
        self.stiffness = stiffness
        self.damping = (2.0 * math.sqrt(self.stiffness) if damping is None else damping)
        if orientation is not None:
            q = as_array("orientation", orientation, (4,)).copy()
            n = np.linalg.norm(q)
            if not n > 0:
                raise ParameterError("orientation must be a nonzero quaternion (w, x, y, z)")
            orientation = q / n
        self.orientation = orientation
        self.rot_stiffness = (self.stiffness if rot_stiffness is None
                              else check_positive("rot_stiffness", rot_stiffness))
        self.rot_damping = (2.0 * math.sqrt(self.rot_stiffness) if rot_damping is None
                            else check_nonnegative("rot_damping", rot_damping))
        self.max_acceleration = max_acceleration
        if axes is not None:
            ax = as_array("axes", axes, (3,))
            if np.any((ax != 0.0) & (ax != 1.0)):
                raise ParameterError(f"axes must hold 0 or 1 per axis, got {ax.tolist()}")
            self._kbuf[6:9] = ax
        self._all_axes = bool(np.all(self._kbuf[6:9] == 1.0))

    @property
    def position(self) -> np.ndarray:
        """``(3,)`` goal position, m (assignable, validated; a view the solver reads)."""
        return self._kbuf[0:3]

    @position.setter
    def position(self, value) -> None:
        self._kbuf[0:3] = as_array("position", value, (3,))

    @property
    def stiffness(self) -> float:
        """k, 1/s² (> 0)."""
        return float(self._kbuf[3])

    @stiffness.setter
    def stiffness(self, value) -> None:
        self._kbuf[3] = check_positive("stiffness", value)

    @property
    def damping(self) -> float:
        """b, 1/s (≥ 0)."""
        return float(self._kbuf[4])

    @damping.setter
    def damping(self, value) -> None:
        self._kbuf[4] = check_nonnegative("damping", value)

    @property
    def max_acceleration(self) -> float | None:
        """Cap on the norm of the linear part, m/s² (None: no cap)."""
        cap = float(self._kbuf[5])
        return None if cap == 0.0 else cap

    @max_acceleration.setter
    def max_acceleration(self, value) -> None:
        self._kbuf[5] = 0.0 if value is None else check_positive("max_acceleration", value)

    @property
    def axes(self) -> np.ndarray:
        """``(3,)`` axes the spring acts on (copy)."""
        return self._kbuf[6:9].copy()

    def _kernel_gains(self):
        """``(k, b, cap or 0)`` for :func:`kernels.spring_residual` (current attributes)."""
        return float(self._kbuf[3]), float(self._kbuf[4]), float(self._kbuf[5])

    @property
    def dim(self) -> int:
        """3 (position goal) or 6 (position and orientation goal)."""
        return 3 if self.orientation is None else 6

    def __call__(self, frame: FrameState) -> np.ndarray:
        """Desired ``(3,)`` or ``(6,)`` acceleration for the frame's current state."""
        kb = self._kbuf
        lin = kb[3] * kb[6:9] * (kb[0:3] - frame.pos) - kb[4] * np.asarray(frame.vel, dtype=float)
        cap = kb[5]
        if cap > 0:
            n = math.sqrt(lin.dot(lin))
            if n > cap:
                lin *= cap / n
        if self.orientation is None:
            return lin
        err = np.empty(3)
        # rotation taking the current orientation to the goal, in the current frame → world
        mujoco.mju_subQuat(err, self.orientation, frame.quat)
        mat = np.empty(9)
        mujoco.mju_quat2Mat(mat, frame.quat)
        err_world = mat.reshape(3, 3) @ err
        ang = self.rot_stiffness * err_world - self.rot_damping * frame.angvel
        return np.concatenate([lin, ang])


class MinimumJerk:
    """Desired acceleration that tracks a minimum-jerk profile (Flash & Hogan 1985).

    Reference ``x_ref(t) = x0 + (x1 − x0) s(τ)``, ``s = 10τ³ − 15τ⁴ + 6τ⁵``,
    ``τ = clip((t − t0)/T, 0, 1)``; desired acceleration
    ``a* = ẍ_ref + k (x_ref − x) + b (ẋ_ref − ẋ)``.

    Args:
      goal: ``(3,)`` end position x1, m.  duration: T in s (> 0).
      start: ``(3,)`` start position x0; None: the frame position at the first call.
      start_time: t0 in s; None: the simulation time at the first call.
      stiffness, damping: feedback gains around the reference (1/s², 1/s).
    """

    dim = 3

    def __init__(self, goal, duration: float, *, start=None, start_time: float | None = None,
                 stiffness: float = 100.0, damping: float | None = None):
        self.goal = as_array("goal", goal, (3,)).copy()
        self.duration = check_positive("duration", duration)
        self.start = None if start is None else as_array("start", start, (3,)).copy()
        self.start_time = None if start_time is None else float(start_time)
        self.stiffness = check_nonnegative("stiffness", stiffness)
        self.damping = (2.0 * math.sqrt(self.stiffness) if damping is None
                        else check_nonnegative("damping", damping))

    def reference(self, t: float):
        """``(x_ref, ẋ_ref, ẍ_ref)`` at time ``t`` (needs the start to be set)."""
        if self.start is None or self.start_time is None:
            raise ParameterError("MinimumJerk: start and start_time are not set yet")
        T = self.duration
        tau = min(max((t - self.start_time) / T, 0.0), 1.0)
        s = tau ** 3 * (10 - 15 * tau + 6 * tau ** 2)
        inside = 0.0 < (t - self.start_time) < T
        ds = (30 * tau ** 2 - 60 * tau ** 3 + 30 * tau ** 4) / T if inside else 0.0
        dds = (60 * tau - 180 * tau ** 2 + 120 * tau ** 3) / T ** 2 if inside else 0.0
        delta = self.goal - self.start
        return self.start + delta * s, delta * ds, delta * dds

    def __call__(self, frame: FrameState) -> np.ndarray:
        if self.start is None:
            self.start = np.array(frame.pos, dtype=float)
        if self.start_time is None:
            self.start_time = float(frame.time)
        x, v, acc = self.reference(frame.time)
        return acc + self.stiffness * (x - frame.pos) + self.damping * (v - frame.vel)


class _FixedTarget:
    """A constant desired acceleration ``(3,)`` or ``(6,)``."""

    def __init__(self, value):
        value = as_array("target", value)
        if value.shape not in ((3,), (6,)):
            raise ParameterError(f"target acceleration must have shape (3,) or (6,), got {value.shape}")
        self.value = value.copy()
        self.dim = value.size
        # spring layout (kernels.SPRING_LEN) with k = b = 0 and the value as offset
        self._kbuf = np.zeros(K.SPRING_LEN)
        if self.dim == 3:
            self._kbuf[9:12] = self.value

    def __call__(self, frame: FrameState) -> np.ndarray:
        return self.value


def _as_target(target):
    if isinstance(target, (SpringDamper, MinimumJerk, _FixedTarget)):
        return target
    if callable(target):
        dim = getattr(target, "dim", None)
        if dim not in (3, 6):
            raise ParameterError("a callable target needs an attribute dim = 3 or 6")
        return target
    return _FixedTarget(target)


# --------------------------------------------------------------------------- base class


class CostTerm(abc.ABC):
    """A weighted cost term over accelerations.

    Subclasses set ``kind`` — ``"mass"`` (``(w/2)(a − t)ᵀM(a − t)``), ``"diag"``
    (``(w/2)Σ m_i(a_i − t_i)²``), ``"rows"`` (``(w/2)‖Ka a + e‖²``, ``rows`` rows) or
    ``"force_rows"`` (``(w/2)‖Ka a + Kf f(a) + e‖²``) — and implement :meth:`fill`,
    which writes the unweighted data of the current state in place.

    Attributes:
      weight: non-negative multiplier w of the term (settable).
      active: a disabled term contributes nothing (settable), e.g. to switch off an
        end-effector goal once it is reached (seed section VI).
      name: label used in error messages.
    """

    kind: str = "rows"
    rows: int = 0

    def __init__(self, weight: float = 1.0, *, name: str | None = None):
        # [effective weight (0 when inactive), term parameter]: read by the compiled solver
        self._kw = np.zeros(2)
        self._active = True
        self.weight = weight
        self.name = name or type(self).__name__

    @property
    def weight(self) -> float:
        """Non-negative multiplier w of the term."""
        return self._weight

    @weight.setter
    def weight(self, value: float) -> None:
        self._weight = check_nonnegative("weight", value)
        self._kw[0] = self._weight if self._active else 0.0

    @property
    def active(self) -> bool:
        """Whether the term contributes (a disabled term has effective weight 0)."""
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        self._active = bool(value)
        self._kw[0] = self._weight if self._active else 0.0

    def _fast_spec(self):
        """What the compiled solver needs to evaluate this term itself (None: it cannot).

        A dict with ``code`` (``kernels.TERM_*``), ``kind`` and the term's arrays;
        see :class:`contactopt.solvers.gdd.solver.GDDSolver` (fast path).
        """
        return None

    @abc.abstractmethod
    def fill(self, problem: GDDProblem, out: _Slot) -> None:
        """Write this term's unweighted data for ``problem``'s state into ``out`` (see :class:`_Slot`)."""

    def model(self, problem: GDDProblem) -> TermModel:
        """The weighted :class:`TermModel` at ``problem``'s state.

        Raises:
          NonFiniteError: the term is not finite at this state (e.g. a NaN target).
        """
        arrays = CostArrays([self], problem.nv)
        arrays.fill(problem)
        bad = arrays.first_nonfinite()
        if bad is not None:
            raise NonFiniteError(f"cost term {bad} is not finite at this state")
        return arrays.term_model(0, problem)

    def evaluate(self, problem: GDDProblem, qacc):
        """Value, gradient ``(nv,)`` and Hessian ``(nv, nv)`` of the weighted term at ``qacc``."""
        return self.model(problem).evaluate(problem, qacc)

    def __add__(self, other):
        return Cost(self, other)


# --------------------------------------------------------------------------- the sum


class Cost:
    """A weighted sum of :class:`CostTerm` objects: ``ℓ(a) = Σ_t w_t ℓ_t(a)``.

    ``Cost(term1, term2)``, ``term1 + term2`` or ``cost + term`` compose terms;
    ``cost.terms`` lists them (``weight`` and ``active`` of a term may change
    between solves; adding or removing terms rebuilds the buffers).
    """

    def __init__(self, *terms):
        flat: list[CostTerm] = []
        for t in terms:
            if isinstance(t, Cost):
                flat.extend(t.terms)
            elif isinstance(t, CostTerm):
                flat.append(t)
            elif isinstance(t, (list, tuple)):
                flat.extend(Cost(*t).terms)
            else:
                raise ParameterError(f"not a cost term: {t!r}")
        self.terms = flat
        self._arrays = None

    def __add__(self, other):
        return Cost(self, other)

    def __iter__(self):
        return iter(self.terms)

    def __len__(self):
        return len(self.terms)

    def arrays(self, problem: GDDProblem) -> CostArrays:
        """Fill and return the :class:`CostArrays` of ``problem``'s state (buffers are reused).

        Raises:
          NonFiniteError: names the first term whose data are not finite.
        """
        arr = self._arrays
        if arr is None or arr.nv != problem.nv or arr.terms != self.terms:
            arr = self._arrays = CostArrays(self.terms, problem.nv)
        arr.fill(problem)
        return arr

    def term_models(self, problem: GDDProblem) -> list[tuple[CostTerm, TermModel]]:
        """``(term, weighted model)`` of every active term with nonzero weight."""
        return [(t, t.model(problem)) for t in self.terms if t.active and t.weight > 0]

    def evaluate(self, problem: GDDProblem, qacc):
        """Value, gradient ``(nv,)`` and Hessian ``(nv, nv)`` of the whole cost at ``qacc``."""
        nv = problem.nv
        val, grad, hess = 0.0, np.zeros(nv), np.zeros((nv, nv))
        for _, tm in self.term_models(problem):
            v, g, h = tm.evaluate(problem, qacc)
            val += v
            grad += g
            hess += h
        return val, grad, hess


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


class EndEffectorAcceleration(CostTerm):
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
        self._jac = np.zeros((6, model.nv))
        self._jacdot = np.zeros((6, model.nv))
        self._jd = self._jacdot[: self.rows]
        self._jdp = self._jacdot[:3]
        self._jdr = self._jacdot[3:6] if self.rows == 6 else None

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


class Damping(CostTerm):
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


class AccelerationTarget(CostTerm):
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


class PostureTarget:
    """A PD acceleration target toward a reference configuration, for :class:`AccelerationTarget`.

    ``a* = kp ⊙ (qref ⊖ q) − kd ⊙ v`` ``(nv,)`` (m/s², rad/s²), with ``⊖`` the
    configuration difference of ``mj_differentiatePos`` (quaternions for free and
    ball joints) and per-dof gains ``kp`` (1/s²) and ``kd`` (1/s).  The compiled
    solver evaluates it itself (no Python call per step); as a callable
    ``problem -> (nv,)`` it gives the same values.

    Args:
      model: the MuJoCo model.  qref: ``(nq,)`` reference (default ``qpos0``).
      kp: stiffness, scalar or ``(nv,)`` (≥ 0).  kd: damping, scalar or ``(nv,)``
        (≥ 0; default ``2√kp``, critical).
    """

    def __init__(self, model: mujoco.MjModel, qref=None, *, kp=10.0, kd=None):
        self.model = model
        self.nv, self.nq = model.nv, model.nq
        # layout: kp (nv), kd (nv), qref (nq) — read by the compiled solver
        self._kbuf = np.zeros(2 * self.nv + self.nq)
        self.qref = model.qpos0 if qref is None else qref
        kp_arr = np.broadcast_to(np.asarray(kp, dtype=float), (self.nv,))
        self.set_gains(kp_arr, np.sqrt(np.maximum(kp_arr, 0.0)) * 2.0 if kd is None else kd)
        self._dq = np.zeros(self.nv)

    @property
    def qref(self) -> np.ndarray:
        """``(nq,)`` reference configuration (a view; assign or write in place)."""
        return self._kbuf[2 * self.nv:]

    @qref.setter
    def qref(self, value) -> None:
        self._kbuf[2 * self.nv:] = as_array("qref", value, (self.nq,))

    @property
    def kp(self) -> np.ndarray:
        """``(nv,)`` stiffness per dof, 1/s² (a view)."""
        return self._kbuf[:self.nv]

    @property
    def kd(self) -> np.ndarray:
        """``(nv,)`` damping per dof, 1/s (a view)."""
        return self._kbuf[self.nv:2 * self.nv]

    def set_gains(self, kp=None, kd=None) -> None:
        """Set the gains (scalars or ``(nv,)``, ≥ 0); None keeps the current ones."""
        for name, value, sl in (("kp", kp, slice(0, self.nv)), ("kd", kd, slice(self.nv, 2 * self.nv))):
            if value is None:
                continue
            arr = np.broadcast_to(np.asarray(value, dtype=float), (self.nv,))
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ParameterError(f"{name} must be finite and >= 0")
            self._kbuf[sl] = arr

    def __call__(self, problem) -> np.ndarray:
        mujoco.mj_differentiatePos(self.model, self._dq, 1.0, problem.data.qpos, self.qref)
        return self.kp * self._dq - self.kd * problem.data.qvel


class CenterOfMassAcceleration(CostTerm):
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


class CenterOfPressure(CostTerm):
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


class ContactForce(CostTerm):
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
