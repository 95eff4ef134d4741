"""Goal-directed dynamics solver (Todorov, *Goal directed dynamics*, inverse formulation eq. 8).

Given a state (q, v) and a cost ℓ(a) over accelerations, find::

    a* = argmin_a  ½ g(a)ᵀ M⁻¹ g(a) + ℓ(a)
         s.t.      Zᵀ g(a) = 0                  (no force on unactuated directions, g_z = 0)
                   lo ≤ B⁺ g(a) ≤ hi            (actuator forces within their limits)

where ``g(a) = M a + c − Jᵀ f(J a − aref)`` is MuJoCo's inverse dynamics with
its soft constraints (contacts, joint limits, friction loss, equalities), read
from ONE MuJoCo evaluation of the state and iterated on in compiled code
(:mod:`contactopt.solvers.gdd.kernels`):

* Gauss-Newton with ``P = ∂g/∂a = M + JᵀH[s]J`` (eq. 15) and Hessian
  ``P R P + H[ℓ]`` (eq. 18), ``R = M⁻¹``; exact inside each piece where the
  constraint states are fixed, so the factorization is reused while they stay;
* exact line search: with pyramidal cones the objective is piecewise quadratic
  along a line, and the search walks its breakpoints; elliptic cones use a
  safeguarded 1-D Newton/bisection search on the directional derivative;
* augmented-Lagrangian multiplier updates for ``Zᵀg = 0`` and the box, warm
  started from the previous solve; with :attr:`DualUpdate.NEWTON` the first
  Gauss-Newton step of a solve is a KKT step of its piece (multipliers and
  acceleration updated together), so it usually lands on the constraints at once.

The kernel runs in a workspace the solver keeps between solves (no allocation on
the hot path once it is large enough for the number of constraint rows).

Compiled step: when every cost term is a built-in one (end-effector / centre-of-mass
terms with a spring-damper or fixed target, damping, fixed or :class:`PostureTarget`
acceleration targets) and the model is dense, pyramidal, with state-independent
actuation, one compiled call (:func:`kernels.gdd_fast`) reads MuJoCo's arrays directly —
the inertia from ``d.M`` and its factor ``M = Lᵀ D L`` from ``d.qLD`` (tree-sparse, as
``mj_fwdPosition`` left it), the forces, and the frame Jacobians and ``J̇v`` from
``cdof``/``cdof_dot``/``cvel`` (as ``mj_jac``/``mj_jacDot``/``mj_jacSubtreeCom``) — and
solves; no Python object is built per step.  Other costs take the general path
(:class:`GDDProblem` + :meth:`Cost.arrays`, ``M`` factored densely in the kernel), with the
same results up to roundoff.

Safeguard (:attr:`GDDSettings.safeguard`): a non-finite or absurd first guess is replaced
by the free acceleration ``M⁻¹(−c)``; a non-finite or huge step, a numerical failure or
a non-converged solve from a non-neutral guess restarts once from it; the outcome is
reported (``GDDResult.safeguards``, :attr:`GDDStatus.NUMERICAL_ERROR`), never applied blindly.

Then the control ``ctrl = (B⁺g − bias)/gain`` is clamped to its limits, written to
``data.ctrl``, and MuJoCo's forward dynamics run warm-started from the
goal-directed acceleration (``data.qacc_warmstart``); the *physics violation*
``‖a_gdd − a_forward‖₂`` measures how physical the solution was.

Typical use (see :func:`gdd_step`)::

    solver = GDDSolver(model)
    cost = Cost(EndEffectorAcceleration(model, site="right_hand", target=SpringDamper(goal)),
                Damping(alpha=0.1, beta=10.0))
    for _ in range(200):
        result = gdd_step(model, data, cost, solver)
"""

from __future__ import annotations

import ctypes
import enum
import math
import time
from dataclasses import dataclass, replace

import mujoco
import numpy as np

from ...errors import NonFiniteError, ParameterError, as_array, check_positive
from ...simulate import SimulationError
from . import kernels as K
from .costs import _STRUCTURE, Cost, CostTerm
from .problem import ActuationModel, DataViews, GDDProblem

__all__ = [
    "GDDStatus",
    "LineSearch",
    "DualUpdate",
    "GDDSettings",
    "GDDIterationLog",
    "GDDResult",
    "GDDSolver",
    "gdd_step",
]


class GDDStatus(enum.IntEnum):
    """Outcome of one goal-directed solve."""

    CONVERGED = K.STATUS_CONVERGED
    """Gradient below tolerance and constraints satisfied to tolerance."""
    MAX_ITERATIONS = K.STATUS_MAX_ITERATIONS
    """The Gauss-Newton iteration limit was reached."""
    MAX_DUAL_UPDATES = K.STATUS_MAX_DUAL_UPDATES
    """Constraints still violated after the allowed multiplier updates."""
    STALLED = K.STATUS_STALLED
    """The line search could not decrease the objective (roundoff floor) with the gradient above tolerance."""
    NUMERICAL_ERROR = K.STATUS_NUMERICAL_ERROR
    """A non-finite value or a failed factorization; the result must not be used."""


class DualUpdate(enum.Enum):
    """Augmented-Lagrangian multiplier update."""

    NEWTON = "newton"
    """Second order: ``ν += (C H⁻¹ Cᵀ)⁻¹ t`` — in the current piece the next inner
    solve then lands on the constraints (falls back to first order if singular).
    The first step of a solve uses ``ν += (C H⁻¹ Cᵀ)⁻¹ (t − C H⁻¹ ∇L)`` together
    with the Gauss-Newton step (a KKT step of the current piece)."""
    FIRST_ORDER = "first_order"
    """The classical ``λ += ρ h``, ``μ± = max(0, μ± + ρ t±)``."""


class LineSearch(enum.Enum):
    """Line-search method."""

    AUTO = "auto"
    """Exact piecewise-quadratic sweep with pyramidal cones, 1-D search with elliptic ones."""
    EXACT = "exact"
    """Force the breakpoint sweep (falls back to 1-D search if elliptic cones are present)."""
    NEWTON_1D = "newton1d"
    """Safeguarded 1-D Newton/bisection on the directional derivative (any cone)."""


@dataclass(frozen=True)
class GDDSettings:
    """Settings of :class:`GDDSolver` (validated on construction).

    Attributes:
      max_iterations: Gauss-Newton iterations per solve, all multiplier updates included (≥ 1).
      max_dual_updates: augmented-Lagrangian multiplier updates per solve (≥ 0).
      penalty: dimensionless penalty ρ; the penalty of constraint row k is
        ``ρ · n_kᵀ M⁻¹ n_k`` (n_k its generalized-force direction), so ρ is relative
        to the ``M⁻¹``-weighted force regularizer (> 0).  Larger values need fewer
        multiplier updates but amplify roundoff in the gradient (≈ ρ·ε·‖g‖·‖P‖).
      tol_gradient: stop the inner iterations when ``‖∇L‖₂ ≤ tol_gradient · max(1, ‖c‖₂, ‖g(a₀)‖₂)``
        (∇L is a generalized force in N; ``c`` is gravity + bias force, ``g(a₀)`` the force at
        the initial guess) (> 0).
      tol_feasibility: constraint violation accepted, in acceleration units
        ``‖M⁻¹ n_k‖ · |violation_k|`` (m/s²) (> 0).
      line_search: :class:`LineSearch`.
      dual_update: :class:`DualUpdate`.
      warm_start: start from the previous solution and multipliers of this solver.
      safeguard: guard against roundoff blow-ups: an initial guess that is not finite or
        absurdly large (beyond ``1e4`` times the state's acceleration scale — the free
        acceleration ``M⁻¹(−c)``, the constraint reference accelerations and the cost's
        targets) is replaced by the free acceleration, and a non-finite or huge step
        (beyond ``1e6`` times that scale) or a failed solve restarts once from the free
        acceleration with fresh multipliers; if that fails too the status is
        :attr:`GDDStatus.NUMERICAL_ERROR` (never applied).  ``GDDResult.safeguards`` counts it.
    """

    max_iterations: int = 50
    max_dual_updates: int = 10
    penalty: float = 100.0
    tol_gradient: float = 1e-10
    tol_feasibility: float = 1e-10
    line_search: LineSearch = LineSearch.AUTO
    dual_update: "DualUpdate" = None
    warm_start: bool = True
    safeguard: bool = True

    def __post_init__(self):
        if not (isinstance(self.max_iterations, (int, np.integer)) and self.max_iterations >= 1):
            raise ParameterError(f"max_iterations must be an integer >= 1, got {self.max_iterations!r}")
        if not (isinstance(self.max_dual_updates, (int, np.integer)) and self.max_dual_updates >= 0):
            raise ParameterError(f"max_dual_updates must be an integer >= 0, got {self.max_dual_updates!r}")
        check_positive("penalty", self.penalty)
        check_positive("tol_gradient", self.tol_gradient)
        check_positive("tol_feasibility", self.tol_feasibility)
        for name, enum_cls, default in (("line_search", LineSearch, LineSearch.AUTO),
                                        ("dual_update", DualUpdate, DualUpdate.NEWTON)):
            value = getattr(self, name)
            if value is None:
                value = default
            if not isinstance(value, enum_cls):
                try:
                    value = enum_cls(value)
                except ValueError:
                    raise ParameterError(
                        f"{name} must be one of {[m.value for m in enum_cls]}, got {value!r}"
                    ) from None
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class GDDIterationLog:
    """One Gauss-Newton iteration.

    objective: augmented Lagrangian after the step; gradient_norm: ‖∇L‖₂ (N);
    step_norm: ‖α d‖₂ (m/s²); alpha: line-search step; breakpoints: breakpoints
    crossed by the exact line search; active_rows: constraint rows not satisfied;
    factored: whether the Hessian was rebuilt; dual_round: multiplier updates before it.
    """

    objective: float
    gradient_norm: float
    step_norm: float
    alpha: float
    breakpoints: int
    active_rows: int
    factored: bool
    dual_round: int


class GDDResult:
    """Result of one goal-directed solve (and, after :meth:`GDDSolver.forward`, of the forward check).

    Attributes:
      qacc: ``(nv,)`` goal-directed acceleration a_gdd.
      ctrl: ``(nu,)`` control for every actuator (controllable ones from the
        solution, clamped to their limits; the others copied from ``data.ctrl``).
      actuator_force: ``(nc,)`` forces ``w = B⁺ g`` of the controllable actuators before clamping.
      qfrc: ``(nv,)`` ``g(a_gdd)``, the generalized force the actuators must produce.
      Zt: ``(nz, nv)`` basis of the unactuated directions (see :attr:`unactuated_force`).
      efc_force: ``(nefc,)`` constraint forces ``f(a_gdd)``.
      efc_state: ``(nefc,)`` constraint states (``mjtConstraintState`` numbers).
      status: :class:`GDDStatus`.
      iterations, dual_updates, factorizations: counts.
      residual_gradient: ``‖∇L‖₂`` at the solution (N).
      feasibility_equality, feasibility_box: constraint violations in m/s² (see settings).
      objective: augmented Lagrangian value at the solution; cost: ℓ(a_gdd).
      nefc, ncon: constraint rows and contacts at this state.
      clamped: number of controls changed by clamping.
      breakpoints: line-search breakpoints crossed (all iterations).
      safeguards: times the step safeguard acted (a non-finite, huge or non-descent step
        was replaced by a damped one or the solve restarted from a cold guess).
      physics_violation: ``‖a_gdd − a_forward‖₂`` (m/s²), None until the forward check ran.
      qacc_forward: ``(nv,)`` forward acceleration with the applied control, or None.
      solve_time: seconds spent in :meth:`GDDSolver.solve` (building + kernel + post-processing).
      log: per-iteration :class:`GDDIterationLog` records.

    The scalar statistics are read from the kernel's statistics vector on access.  The
    kernel's outputs live in one float buffer (``qfrc | efc_force | actuator_force | ctrl |
    statistics | qacc | efc_state | log``, the layout :func:`kernels.gdd_fast` writes) and the
    array attributes are views of it made on access: building a result costs one allocation,
    not eight.
    """

    __slots__ = ("Zt", "nefc", "ncon", "physics_violation", "qacc_forward", "solve_time",
                 "_buf", "_ctrl", "_nv", "_nc", "_qacc")

    def __init__(self, qacc, ctrl, actuator_force, qfrc, Zt, efc_force, efc_state, stats,
                 nefc, ncon, solve_time=0.0, log_array=None):
        log = np.zeros((0, K.LOG_NCOL)) if log_array is None else np.asarray(log_array, dtype=float)
        nc = len(actuator_force)
        buf = np.concatenate((np.asarray(qfrc, dtype=float), np.asarray(efc_force, dtype=float),
                              np.asarray(actuator_force, dtype=float), np.zeros(nc),
                              np.asarray(stats, dtype=float), np.asarray(qacc, dtype=float),
                              np.asarray(efc_state, dtype=float), log.ravel()))
        self._setup(Zt, buf, len(qfrc), nefc, nc, ncon, solve_time, np.asarray(ctrl))

    def _setup(self, Zt, buf, nv, nefc, nc, ncon, solve_time, ctrl):
        self.Zt = Zt
        self._buf = buf
        self._nv = nv
        self.nefc = nefc
        self._nc = nc
        self.ncon = ncon
        self.physics_violation = None
        self.qacc_forward = None
        self.solve_time = solve_time
        self._ctrl = ctrl
        self._qacc = None

    @classmethod
    def _packed(cls, Zt, buf, nv, nefc, nc, ncon, solve_time, ctrl=None):
        """A result on the kernel's output buffer ``buf`` (layout above); ``ctrl`` None: the
        controls are the buffer's (every actuator controllable)."""
        r = cls.__new__(cls)
        r._setup(Zt, buf, nv, nefc, nc, ncon, solve_time, ctrl)
        return r

    @property
    def qacc(self) -> np.ndarray:
        """``(nv,)`` goal-directed acceleration a_gdd (m/s², rad/s²)."""
        q = self._qacc
        if q is None:
            o = 2 * self._nc + self._nv + self.nefc + K.ST_NSTAT
            q = self._qacc = self._buf[o:o + self._nv]
        return q

    @property
    def _st(self) -> np.ndarray:
        o = self._nv + self.nefc + 2 * self._nc
        return self._buf[o:o + K.ST_NSTAT]

    qfrc = property(lambda self: self._buf[:self._nv], doc="``(nv,)`` g(a_gdd) (N, N·m).")
    efc_force = property(lambda self: self._buf[self._nv:self._nv + self.nefc],
                         doc="``(nefc,)`` constraint forces f(a_gdd).")
    actuator_force = property(
        lambda self: self._buf[self._nv + self.nefc:self._nv + self.nefc + self._nc],
        doc="``(nc,)`` forces of the controllable actuators before clamping.")
    @property
    def efc_state(self) -> np.ndarray:
        """``(nefc,)`` constraint states (``mjtConstraintState`` numbers, int64)."""
        o = 2 * (self._nv + self._nc) + self.nefc + K.ST_NSTAT
        return self._buf[o:o + self.nefc].astype(np.int64)

    @property
    def ctrl(self) -> np.ndarray:
        """``(nu,)`` control of every actuator (see the class docstring)."""
        if self._ctrl is not None:
            return self._ctrl
        o = self._nv + self.nefc + self._nc
        return self._buf[o:o + self._nc]

    @property
    def log_array(self) -> np.ndarray:
        """``(iterations, LOG_NCOL)`` per-iteration records (see :attr:`log`)."""
        o = 2 * (self._nv + self._nc + self.nefc) + K.ST_NSTAT
        rows = min(int(self._st[K.ST_ITER]), (self._buf.shape[0] - o) // K.LOG_NCOL)
        return self._buf[o:o + rows * K.LOG_NCOL].reshape(rows, K.LOG_NCOL)

    status = property(lambda self: _STATUS[int(self._st[K.ST_STATUS])], doc=":class:`GDDStatus`.")
    iterations = property(lambda self: int(self._st[K.ST_ITER]), doc="Gauss-Newton iterations.")
    dual_updates = property(lambda self: int(self._st[K.ST_DUAL]), doc="Multiplier updates.")
    factorizations = property(lambda self: int(self._st[K.ST_FACT]), doc="Hessian factorizations.")
    residual_gradient = property(lambda self: float(self._st[K.ST_GRAD]), doc="‖∇L‖₂ at the solution (N).")
    feasibility_equality = property(lambda self: float(self._st[K.ST_FEAS_EQ]),
                                    doc="Equality violation (m/s²).")
    feasibility_box = property(lambda self: float(self._st[K.ST_FEAS_BOX]), doc="Box violation (m/s²).")
    objective = property(lambda self: float(self._st[K.ST_OBJECTIVE]), doc="Augmented Lagrangian.")
    cost = property(lambda self: float(self._st[K.ST_COST]), doc="ℓ(a_gdd).")
    clamped = property(lambda self: int(self._st[K.ST_CLAMPED]), doc="Controls changed by clamping.")
    breakpoints = property(lambda self: int(self._st[K.ST_EVENTS]), doc="Line-search breakpoints crossed.")
    safeguards = property(lambda self: int(self._st[K.ST_SAFEGUARD]), doc="Step safeguard actions.")

    @property
    def converged(self) -> bool:
        """True when the status is :attr:`GDDStatus.CONVERGED`."""
        return self.status == GDDStatus.CONVERGED

    @property
    def unactuated_force(self) -> np.ndarray:
        """``(nz,)`` ``Zᵀ g``: force on the unactuated directions (≈ 0 at convergence; N or N·m)."""
        return self.Zt @ self.qfrc

    @property
    def log(self) -> tuple[GDDIterationLog, ...]:
        """Per-iteration records (built on access)."""
        return tuple(
            GDDIterationLog(float(r[K.LOG_OBJECTIVE]), float(r[K.LOG_GRAD]), float(r[K.LOG_STEP]),
                         float(r[K.LOG_ALPHA]), int(r[K.LOG_EVENTS]), int(r[K.LOG_NACTIVE]),
                         bool(r[K.LOG_FACTORED]), int(r[K.LOG_OUTER]))
            for r in self.log_array
        )

    def timing(self) -> dict[str, float]:
        """Seconds of the solve, with the keys shared by the three solvers.

        ``solve`` and ``total`` are :attr:`solve_time` (building the problem, the compiled kernel
        and the post-processing); ``derivatives`` (the MuJoCo position/velocity stages run inside
        the compiled step) and ``line_search`` (inside the kernel) are not measured separately: 0.
        """
        t = float(self.solve_time)
        return {"derivatives": 0.0, "solve": t, "line_search": 0.0, "total": t}

    def __repr__(self) -> str:
        return (f"GDDResult(status={self.status.name}, iterations={self.iterations}, "
                f"dual_updates={self.dual_updates}, nefc={self.nefc}, "
                f"residual_gradient={self.residual_gradient:.2e}, "
                f"physics_violation={self.physics_violation})")

    def summary(self) -> dict:
        """JSON-ready statistics."""
        return {
            "status": self.status.name,
            "iterations": int(self.iterations),
            "dual_updates": int(self.dual_updates),
            "factorizations": int(self.factorizations),
            "residual_gradient": float(self.residual_gradient),
            "feasibility_equality": float(self.feasibility_equality),
            "feasibility_box": float(self.feasibility_box),
            "physics_violation": None if self.physics_violation is None else float(self.physics_violation),
            "nefc": int(self.nefc),
            "ncon": int(self.ncon),
            "clamped": int(self.clamped),
            "safeguards": int(self.safeguards),
            "objective": float(self.objective),
            "cost": float(self.cost),
            "solve_time": float(self.solve_time),
        }


class GDDSolver:
    """Goal-directed dynamics solver for one model (workspace: actuation cache and warm start).

    Args:
      model: the MuJoCo model (needs at least one controllable actuator).
      settings: :class:`GDDSettings` (defaults if None); keyword overrides
        (``GDDSolver(model, max_iterations=20)``) are applied on top.

    A solver holds reusable buffers and the warm start: use one solver per
    simulation (and per thread).

    Raises:
      ParameterError: no actuators / no controllable actuator, bad settings.
    """

    #: recompute the penalty and violation scales (which use M⁻¹) every this many solves
    SCALE_INTERVAL = 25

    def __init__(self, model: mujoco.MjModel, settings: GDDSettings | None = None, **overrides):
        self.model = model
        settings = settings or GDDSettings()
        if overrides:
            try:
                settings = replace(settings, **overrides)
            except TypeError as exc:
                raise ParameterError(str(exc)) from None
        self.settings = settings
        self.actuation = ActuationModel(model)
        self._params = np.zeros(K.PAR_NPAR)
        self._iparams = np.zeros(K.IPAR_NIPAR, dtype=np.int64)
        self._log = np.zeros((settings.max_iterations, K.LOG_NCOL))
        self._stats = np.zeros(K.ST_NSTAT)
        self._scales = np.zeros((4, 0))
        self._views = None
        self._entry = None
        self._wsf = np.zeros(0)  # kernel workspace (grown on demand, see kernels._ws_sizes)
        self._wsi = np.zeros(0, dtype=np.int64)
        self._pattern_of = None  # actuation arrays whose sparsity the workspace holds
        self._actbuf = None  # their packed form (ActuationArrays.packed)
        self._dims_of = None  # the cost sizes (km, kd, m1, m2) in the int parameters
        self._lam = None
        self._plan = None  # compiled-step plan of the last cost (_FastPlan)
        self._span = None  # (data, span, offsets) of the last data (_data_span)
        nv = model.nv
        self._Mbuf = np.zeros((nv, nv))
        self._cbuf = np.zeros(nv)
        self._dqbuf = np.zeros(nv + 6 * model.nbody)  # fill_problem's scratch
        self._abuf = np.zeros(nv)  # the warm start (valid when _have_warm) and gdd_step's solution
        self._have_warm = False
        self._outf = np.empty(0)  # gdd_step's outputs (grown on demand, copied into each result)
        self._outstate = np.empty(0, dtype=np.int64)
        # gdd_step's output length without the rows: 2 (nv + nc) + ST_NSTAT + max_iter · LOG_NCOL
        self._out_fixed = K.step_output_length(nv, 0, self.actuation.controllable.size,
                                               settings.max_iterations)
        self._ctx = None  # gdd_step's context for the current plan and data (_step_context)
        self._hot = False  # the next solve with that plan and data may call gdd_step directly
        #: use the native entry of the compiled step (class default: :data:`NATIVE_STEP`)
        self._use_native = NATIVE_STEP
        self._fast_ok = bool(
            not mujoco.mj_isSparse(model) and model.opt.cone == int(mujoco.mjtCone.mjCONE_PYRAMIDAL)
            and not self.actuation.state_dependent and self.actuation.uncontrolled.size == 0
            and model.nM > 0 and hasattr(model, "M_rownnz") and _factor_layout_ok(model))
        self._all_controllable = bool(np.array_equal(self.actuation.controllable, np.arange(model.nu)))
        s = self.settings
        self._params[K.PAR_PENALTY] = s.penalty
        self._params[K.PAR_TOL_GRAD] = s.tol_gradient
        self._params[K.PAR_TOL_FEAS] = s.tol_feasibility
        self._iparams[K.IPAR_MAX_ITER] = s.max_iterations
        self._iparams[K.IPAR_MAX_DUAL] = s.max_dual_updates
        self._iparams[K.IPAR_EXACT_LS] = 0 if s.line_search == LineSearch.NEWTON_1D else 1
        self._iparams[K.IPAR_NEWTON_DUAL] = 1 if s.dual_update == DualUpdate.NEWTON else 0
        self._iparams[K.IPAR_SAFEGUARD] = 1 if s.safeguard else 0
        self._iparams[K.IPAR_SCALE_INTERVAL] = self.SCALE_INTERVAL
        self._warm = bool(s.warm_start)
        self.reset()

    def reset(self) -> None:
        """Forget the warm start (previous acceleration and multipliers)."""
        self._have_warm = False
        self._lam = None
        self._mu_lo = np.zeros(0)
        self._mu_hi = np.zeros(0)
        self._iparams[K.IPAR_SCALES] = 1
        self._invalidate()

    def _invalidate(self) -> None:
        """Drop the compiled step's context: a buffer it points to was (or may be) replaced.
        Every reassignment of an array that :meth:`_step_context` records calls this."""
        self._ctx = None
        self._hot = False

    @property
    def _qacc(self):
        """The warm start ``(nv,)`` (a copy), or None."""
        return self._abuf.copy() if self._have_warm else None

    @_qacc.setter
    def _qacc(self, value):
        if value is None:
            self._have_warm = False
            self._hot = False
        else:
            self._abuf[:] = value
            self._have_warm = True

    # ------------------------------------------------------------------ solve

    def problem(self, data: mujoco.MjData, *, compute_stages: bool = True, copy: bool = True
                ) -> GDDProblem:
        """The :class:`GDDProblem` of ``data``'s state (runs the position/velocity stages if asked).

        With ``copy=False`` the problem shares buffers with this solver and views of
        ``data``: it is valid until ``data`` changes or the next solve.
        """
        if compute_stages:
            mujoco.mj_fwdPosition(self.model, data)
            mujoco.mj_fwdVelocity(self.model, data)
        views = self._views
        if views is None or views.data is not data:
            views = self._views = DataViews(self.model, data)
        return GDDProblem(self.model, data, self.actuation, copy=copy, views=views)

    def solve(self, data: mujoco.MjData, cost: Cost | CostTerm, *, compute_stages: bool = True,
              initial_qacc=None, problem: GDDProblem | None = None) -> GDDResult:
        """Solve goal-directed dynamics at ``data``'s state (q, v, time).

        Args:
          data: the state.  With ``compute_stages`` its position and velocity stages
            are computed here (``mj_fwdPosition`` + ``mj_fwdVelocity``: the one MuJoCo
            evaluation of the state); otherwise they must be current (after
            ``mj_step1`` or ``mj_forward``).  ``data`` is not otherwise modified.
            The compiled step computes the stages without ``mj_island`` (the forward
            solver's constraint partition, unused here): ``data.nisland`` is then 0,
            which MuJoCo's forward solver handles with the same result.
          cost: a :class:`~contactopt.solvers.gdd.costs.Cost` or a single term.
          initial_qacc: ``(nv,)`` initial guess; default: the previous solution when
            warm starting, else ``data.qacc``.

        There is no separate ``solve_from_warm_start``: the warm start is internal.  The solver
        keeps its last solution (accelerations and multipliers) and starts the next solve from
        it when ``settings.warm_start`` is on (:meth:`reset` forgets it).
          problem: an already built :class:`GDDProblem` of this state.

        When every term of the cost is a built-in one the compiled solver evaluates
        itself (end-effector and centre-of-mass terms with a :class:`SpringDamper` or
        fixed target, :class:`Damping`, :class:`AccelerationTarget` with a fixed or a
        :class:`PostureTarget` target) and the model is dense with pyramidal cones and
        state-independent actuation, the whole step — inertia, forces, cost terms and
        the solve — runs in one compiled call (no :class:`GDDProblem` is built).

        Returns:
          :class:`GDDResult` (controls clamped but not applied; see :meth:`apply`).

        Raises:
          NonFiniteError: the state or a cost term is not finite (the term is named).
          ParameterError: a bad cost argument.
        """
        t0 = _perf_counter()
        if self._hot and problem is None and initial_qacc is None:
            # the previous solve ran gdd_step with this plan and data: call it straight away
            cx = self._ctx  # (plan, data, entry, ctx with stages, ctx without, result maker, ...)
            plan = cx[0]
            if cx[1] is data and plan.cost is cost and plan.version == _STRUCTURE[0] and (
                    plan.terms is None or plan.terms == cost.terms):
                code = cx[2](cx[3] if compute_stages else cx[4])
                if code > 0 and code & 15 != K.STATUS_NUMERICAL_ERROR:
                    return cx[5](self._outf[:code >> 4].copy(), code, data.ncon, _perf_counter() - t0)
                if code > 0:
                    return self._native_result(data, cost, plan, code, t0)
                return self._native_retry(data, cost, plan, code, t0)
        if problem is None and self._fast_ok:
            plan = self._plan
            if plan is None or plan.cost is not cost or plan.version != _STRUCTURE[0] or (
                    plan.terms is not None and plan.terms != cost.terms):
                plan = self._plan = _FastPlan(self, cost)
                self._invalidate()
            if plan.ok:
                sp = self._span
                if sp is None or sp[0] is not data:
                    _check_data(self.model, data)
                    sp = self._span = _data_span(self.model, data)
                    self._invalidate()
                if sp[1] is not None:
                    return self._solve_fast(data, cost, plan, sp, initial_qacc, t0, compute_stages)
        if not isinstance(cost, Cost):
            if isinstance(cost, CostTerm):
                cost = Cost(cost)
            else:
                raise ParameterError(f"cost must be a Cost or a CostTerm, got {type(cost).__name__}")
        if problem is None:
            problem = self.problem(data, compute_stages=compute_stages, copy=False)
        ca = cost.arrays(problem)
        act = problem.actuation
        a = self._initial_guess(data, initial_qacc)
        self._prepare(act, ca.dims)
        nefc = problem.nefc
        outs = self._outputs(nefc, act.gain.size)
        args = (problem.M, _EMPTY_I, _EMPTY_I, _EMPTY_I, _EMPTY_F, _EMPTY_F,  # M factored in the kernel
                problem.c, problem.J, problem.aref, problem.D, problem.R,
                problem.floss, problem.efc_type, problem.efc_id, problem.con_dim,
                problem.con_mu, problem.con_fric, problem.con_adr,
                self._actbuf, self._scales, ca.buffer, ca.Kf2,
                a, self._lam, self._mu_lo, self._mu_hi, self._params, self._iparams) + outs + (
                self._wsf, self._wsi)
        if self._entry is None:
            K.gdd_general(*args)  # type-checked call (compiles on first use)
            self._entry = _kernel_entry(K.gdd_general, args)
        else:
            self._entry(*args)
        self._retry_workspace(self._entry, args)
        return self._finish(data, a, act, outs, self._stats, self._log, nefc, t0,
                            lambda: self._diagnose_nonfinite(data, problem, ca))

    # -- pieces shared by the two paths

    def _initial_guess(self, data, initial_qacc):
        nv = self.model.nv
        if initial_qacc is not None:
            return as_array("initial_qacc", initial_qacc, (nv,)).copy()
        if self.settings.warm_start and self._qacc is not None:
            return self._qacc.copy()
        a = np.array(data.qacc, dtype=float)
        if not np.isfinite(a).all():
            a[:] = 0.0
        return a

    def _prepare(self, act, dims):
        """Multipliers, penalty scales and the kernel's int parameters for this solve."""
        nz = act.Zt.shape[0]
        nb = act.box.size
        self._invalidate()
        lam = self._lam
        if not self.settings.warm_start or lam is None or lam.size != nz or self._mu_lo.size != nb:
            self._lam, self._mu_lo, self._mu_hi = np.zeros(nz), np.zeros(nb), np.zeros(nb)
        ip = self._iparams
        width = max(nz, nb)
        if self._scales.shape[1] != width:
            self._scales = np.zeros((4, width))
            ip[K.IPAR_SCALES] = 1  # (else the kernel recomputes them every SCALE_INTERVAL solves)
        if act is not self._pattern_of:
            ip[K.IPAR_PATTERN] = 1  # (cleared by the kernel once computed)
            self._pattern_of = act
            ip[K.IPAR_NZ] = nz
            ip[K.IPAR_NB] = nb
            ip[K.IPAR_NC] = act.gain.size
            packed = act.packed
            self._actbuf = _pack_actuation(act) if packed is None else packed
        if dims is not self._dims_of:
            self._dims_of = dims
            ip[K.IPAR_KM], ip[K.IPAR_KD], ip[K.IPAR_M1], ip[K.IPAR_M2] = dims

    def _outputs(self, nefc, nc):
        nv = self.model.nv
        return (np.empty(nv), np.empty(nefc), np.empty(nefc, dtype=np.int64), np.empty(nc),
                np.empty(nc), self._stats, self._log)

    def _retry_workspace(self, entry, args):
        if self._stats[K.ST_STATUS] == K.STATUS_WORKSPACE:  # first solve or more constraint rows
            self._grow_workspace(self._stats)
            entry(*(args[:-2] + (self._wsf, self._wsi)))

    def _grow_workspace(self, stats):
        """New kernel workspaces 1.5× the lengths the kernel asked for in ``stats``."""
        self._invalidate()
        self._wsf = np.zeros(int(1.5 * stats[K.ST_WS_FLOAT]) + 64)
        self._wsi = np.zeros(int(1.5 * stats[K.ST_WS_INT]) + 64, dtype=np.int64)
        self._iparams[K.IPAR_PATTERN] = 1

    def _finish(self, data, a, act, outs, stats, log, nefc, t0, diagnose):
        g, f, state, w, u = outs[:5]
        st = stats.copy()
        code = int(st[K.ST_STATUS])
        if code == K.STATUS_NUMERICAL_ERROR:
            self.reset()
            diagnose()
        else:
            self._qacc = a.copy()
        if self._all_controllable:
            ctrl = u
        else:
            ctrl = data.ctrl.copy()
            ctrl[self.actuation.controllable] = u
        iters = int(st[K.ST_ITER])
        return GDDResult(a, ctrl, w, g, act.Zt, f, state, st, nefc, data.ncon,
                         time.perf_counter() - t0, log[:min(iters, log.shape[0])].copy())

    def _solve_fast(self, data, cost, plan, sp, initial_qacc, t0, stages):
        """The compiled step (see :meth:`solve`): problem, cost terms and solve in one call.

        After the first solve of a plan the call is :func:`kernels.gdd_step`: the stages
        (``stages``: ``mj_fwdPosition`` + ``mj_fwdVelocity``) run inside it and the constraint
        rows are read through the ``mjData`` struct.  Later solves with the same cost and
        ``data`` go straight from :meth:`solve` to that call (the "hot" path: the step context
        and the warm start are already in place).  The first solve, or every solve where
        that entry is unavailable (:data:`NATIVE_STEP`), runs the stages here and passes the
        rows as the bindings' array views (:func:`kernels.gdd_fast`); the results are the same.
        Kept lean on purpose: it runs once per simulation step, and its Python overhead is
        a visible part of the step time (see ``contactopt bench gdd``)."""
        native = plan.native
        if native is None and stages:
            mujoco.mj_fwdPosition(self.model, data)
            mujoco.mj_fwdVelocity(self.model, data)
        act = plan.act
        if act is None:
            act = plan.act = self.actuation.arrays(self.model, data)
        a = self._initial_guess(data, initial_qacc)
        ip = self._iparams
        if not (act is self._pattern_of and plan.dims is self._dims_of and self._lam is not None
                and self._warm and self._lam.size == act.Zt.shape[0]):
            self._prepare(act, plan.dims)
        if native is not None:
            self._abuf[:] = a
            return self._solve_native(data, cost, plan, sp, t0, stages)
        aref = data.efc_aref
        nefc = aref.shape[0]
        # one output buffer per solve (GDDResult's layout): g | f | w | u | stats | a | state | log
        nv = self.model.nv
        o_st = nv + nefc + 2 * act.gain.size
        buf = np.empty(K.step_output_length(nv, nefc, act.gain.size, self._log.shape[0]))
        state = np.empty(nefc, dtype=np.int64)
        args = (plan.si, sp[1], sp[2], plan.ptab, data.efc_J, aref, data.efc_D, data.efc_R,
                data.efc_frictionloss if plan.floss else aref, data.efc_type, self._Mbuf,
                self._cbuf, self._dqbuf, self._actbuf, self._scales, plan.costbuf, plan.Kf2,
                a, self._lam, self._mu_lo, self._mu_hi, self._params, ip, buf, state,
                self._wsf, self._wsi)
        entry = plan.entry
        if entry is None:
            K.gdd_fast(*args)
            entry = plan.entry = _kernel_entry(K.gdd_fast, args)
        else:
            entry(*args)
        if buf[o_st + K.ST_STATUS] == K.STATUS_WORKSPACE:  # first solve or more rows: grow, again
            self._grow_workspace(buf[o_st:o_st + K.ST_NSTAT])
            entry(*(args[:-2] + (self._wsf, self._wsi)))
        result = self._fast_result(data, cost, plan, buf, nefc, t0)
        if plan.native is None and self._use_native:
            plan.native = _step_entry()
        return result

    def _fast_result(self, data, cost, plan, buf, nefc, t0):
        """The :class:`GDDResult` of a compiled step (``buf``: its packed float output, the
        layout of :func:`kernels.gdd_fast`)."""
        act = plan.act
        nc = act.gain.size
        nv = self.model.nv
        o_st = nv + nefc + 2 * nc
        o_a = o_st + K.ST_NSTAT
        if buf[o_st + K.ST_STATUS] == K.STATUS_NUMERICAL_ERROR or not self._all_controllable:
            o_log = o_a + nv + nefc
            outs = (buf[:nv], buf[nv:nv + nefc], buf[o_a + nv:o_log].astype(np.int64),
                    buf[nv + nefc:nv + nefc + nc], buf[nv + nefc + nc:o_st])
            return self._finish(data, buf[o_a:o_a + nv].copy(), act, outs, buf[o_st:o_a],
                                buf[o_log:].reshape(self._log.shape), nefc, t0,
                                lambda: self._diagnose_fast(data, cost))
        self._qacc = buf[o_a:o_a + nv]
        return GDDResult._packed(act.Zt, buf, nv, nefc, nc, data.ncon, time.perf_counter() - t0)

    def _step_context(self, plan, data, sp):
        """The context of :func:`kernels.gdd_step` for this plan, ``data`` and the solver's
        current buffers, cached in ``self._ctx``: ``(plan, data, entry, ctx with stages, ctx
        without, result maker (:func:`_result_maker`), the arrays it points to)``.  The tuple keeps those arrays alive;
        :meth:`_invalidate` drops it whenever one of them is replaced."""
        cx = self._ctx
        if cx is not None and cx[0] is plan and cx[1] is data:
            return cx
        dl = _efc_layout().copy()
        if not plan.floss:
            dl[K.DL_FLOSS] = dl[K.DL_AREF]
        arrays = {K.AS_SI: plan.si, K.AS_SPAN: sp[1], K.AS_DOFF: sp[2], K.AS_PTAB: plan.ptab,
                  K.AS_M: self._Mbuf, K.AS_C: self._cbuf, K.AS_DQ: self._dqbuf,
                  K.AS_ACT: self._actbuf, K.AS_SCALES: self._scales, K.AS_COST: plan.costbuf,
                  K.AS_KF2: plan.Kf2, K.AS_A: self._abuf, K.AS_LAM: self._lam,
                  K.AS_MULO: self._mu_lo, K.AS_MUHI: self._mu_hi, K.AS_PARAMS: self._params,
                  K.AS_IPARAMS: self._iparams, K.AS_OUTF: self._outf, K.AS_OUTS: self._outstate,
                  K.AS_WSF: self._wsf, K.AS_WSI: self._wsi}
        ctx = np.zeros(K.CX_N, dtype=np.int64)
        ctx[K.CX_MODEL] = self.model._address
        ctx[K.CX_DATA] = data._address
        ctx[K.CX_DL:K.CX_DL + K.DL_N] = dl
        flags = _flags_offset()
        if flags is not None:  # the stages skip mj_island (see gdd_step)
            ctx[K.CX_FLAGS] = self.model._address + flags
            ctx[K.CX_ISLAND] = int(mujoco.mjtDisableBit.mjDSBL_ISLAND)
            ctx[K.CX_SLEEP] = int(getattr(mujoco.mjtEnableBit, "mjENBL_SLEEP", 0))
        for slot, arr in arrays.items():
            want = _SLOT_TYPES[slot]
            if arr.dtype != want[0] or arr.ndim != want[1] or not arr.flags.c_contiguous:
                raise RuntimeError(f"internal error: gdd_step slot {slot} got a {arr.dtype} "
                                   f"array of {arr.ndim} dimensions")  # pragma: no cover
            o = K.CX_ARRAYS + 3 * slot
            ctx[o] = arr.ctypes.data
            ctx[o + 1] = arr.shape[0]
            ctx[o + 2] = arr.shape[1] if arr.ndim == 2 else 1
        staged = ctx.copy()
        ctx[K.CX_STAGES] = 1
        cx = self._ctx = (plan, data, plan.native, ctx, staged,
                          _result_maker(plan.act.Zt, self.model.nv, plan.act.gain.size,
                                        self._out_fixed), tuple(arrays.values()))
        return cx

    def _solve_native(self, data, cost, plan, sp, t0, stages):
        """:meth:`_solve_fast` through :func:`kernels.gdd_step` (one compiled call per step,
        from ``self._abuf`` as the initial guess)."""
        cx = self._step_context(plan, data, sp)
        code = cx[2](cx[3] if stages else cx[4])
        if code > 0:
            return self._native_result(data, cost, plan, code, t0)
        return self._native_retry(data, cost, plan, code, t0)

    def _native_retry(self, data, cost, plan, code, t0):
        """:func:`kernels.gdd_step` stopped before solving (``code`` = −need): more constraint
        rows than so far or a workspace too small.  Grow what is short and solve again (the
        stages are computed; ``a``, λ and μ are untouched)."""
        ip = self._iparams
        for _ in range(3):
            need = -code
            nefc = int(ip[K.IPAR_NEFC])
            if need > self._outf.size or nefc > self._outstate.size:
                self._invalidate()
                self._outf = np.empty(need + 64)
                self._outstate = np.empty(nefc + 16, dtype=np.int64)
            else:
                o_st = self.model.nv + nefc + 2 * int(ip[K.IPAR_NC])
                self._grow_workspace(self._outf[o_st:o_st + K.ST_NSTAT])
            cx = self._step_context(plan, data, self._span)
            code = cx[2](cx[4])
            if code > 0:
                return self._native_result(data, cost, plan, code, t0)
        raise RuntimeError("internal error: the compiled step keeps asking for more memory")  # pragma: no cover

    def _native_result(self, data, cost, plan, code, t0):
        """The :class:`GDDResult` of a :func:`kernels.gdd_step` call that returned ``code`` =
        16 · (floats written) + status: one copy of its output buffer, whose views are the
        result's arrays."""
        need = code >> 4
        buf = self._outf[:need].copy()
        nv = self.model.nv
        nc = plan.act.gain.size
        nefc = (need - self._out_fixed) >> 1
        if (code & 15) == K.STATUS_NUMERICAL_ERROR or not self._all_controllable:
            self._hot = False
            return self._fast_result(data, cost, plan, buf, nefc, t0)
        self._have_warm = True
        self._hot = self._warm  # (all controllable here)
        return GDDResult._packed(plan.act.Zt, buf, nv, nefc, nc, data.ncon,
                                 time.perf_counter() - t0)

    def _diagnose_fast(self, data, cost):
        """Numerical failure on the compiled path: name the cause through the general path."""
        cost = cost if isinstance(cost, Cost) else Cost(cost)
        problem = self.problem(data, compute_stages=False, copy=True)
        self._diagnose_nonfinite(data, problem, cost.arrays(problem))

    @staticmethod
    def _diagnose_nonfinite(data, problem, ca):
        """Raise a clear :class:`NonFiniteError` for the usual causes of a numerical failure."""
        bad = ca.first_nonfinite()
        if bad is not None:
            raise NonFiniteError(f"cost term {bad} is not finite at this state")
        if not (np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all()):
            raise NonFiniteError("state (qpos/qvel) is not finite")
        if not (np.isfinite(problem.M).all() and np.isfinite(problem.c).all()):
            raise NonFiniteError("the state's dynamics (inertia or bias force) are not finite")

    # ------------------------------------------------------------------ apply / forward

    def apply(self, data: mujoco.MjData, result: GDDResult) -> None:
        """Write the result's control to ``data.ctrl`` and its acceleration to ``qacc_warmstart``.

        Raises:
          SimulationError: the result is a numerical failure or its control is not
            finite; ``data`` is left untouched.
        """
        ctrl = result.ctrl
        # a finite sum means every entry is finite (NaN/inf propagate); else check exactly
        if result._st[K.ST_STATUS] == K.STATUS_NUMERICAL_ERROR or not (
                math.isfinite(ctrl.sum()) or np.isfinite(ctrl).all()):
            raise SimulationError(
                f"goal-directed solve failed ({result.status.name}); refusing to apply a non-finite control"
            )
        data.ctrl[:] = ctrl
        data.qacc_warmstart[:] = result.qacc

    def forward(self, data: mujoco.MjData, result: GDDResult) -> GDDResult:
        """Apply the result and run forward dynamics from the velocity stage, warm-started.

        Sets ``result.qacc_forward`` and ``result.physics_violation =
        ‖a_gdd − a_forward‖₂``.  ``data`` must still hold the position and velocity
        stages of the solved state.
        """
        self.apply(data, result)
        mujoco.mj_forwardSkip(self.model, data, int(mujoco.mjtStage.mjSTAGE_VEL), 1)
        result.qacc_forward = data.qacc.copy()
        diff = result.qacc - result.qacc_forward
        result.physics_violation = math.sqrt(float(diff.dot(diff)))
        return result


_STATUS = {int(st): st for st in GDDStatus}


def _pack_actuation(act) -> np.ndarray:
    """``ActuationArrays.packed`` for arrays built without it (layout: see the kernel)."""
    return np.concatenate((act.Zt.ravel(), act.Cbox.ravel(), act.Bdir.ravel(), act.Bpinv.ravel(),
                           act.lo, act.hi, act.gain, act.bias, act.ctrl_lo, act.ctrl_hi))

def _kernel_entry(fn, args):
    """The compiled entry point of the numba function ``fn`` for these argument types.

    Calling through numba's dispatcher type-checks the ~30 arguments on every call
    (several µs).  Their types never change for a solver (every array is made by
    this package with a fixed dtype and C layout), so the solver checks them once,
    here, and then calls the entry point directly.  Falls back to the dispatcher
    if numba's internals differ.
    """
    try:
        import numba

        sig = tuple(numba.typeof(a) for a in args)
        return fn.overloads[sig].entry_point
    except Exception:  # pragma: no cover - numba internals changed
        return fn


_STEP_ENTRY = []  # [entry point of kernels.gdd_step] once compiled
_perf_counter = time.perf_counter


def _result_maker(Zt, nv, nc, fixed):
    """``make(buf, code, ncon, solve_time)``: the :class:`GDDResult` of a converged-or-not (but
    finite) :func:`kernels.gdd_step` call that returned ``code``, on its output copy ``buf``
    (all actuators controllable) — :meth:`GDDResult._packed` with this solver's constants bound,
    for the hot path of :meth:`GDDSolver.solve`.  It sets the attributes of
    :meth:`GDDResult._setup` itself (one Python call less per solve): keep the two in step."""
    new = GDDResult.__new__

    def make(buf, code, ncon, solve_time):
        r = new(GDDResult)
        r.Zt = Zt
        r._buf = buf
        r._nv = nv
        r.nefc = ((code >> 4) - fixed) >> 1
        r._nc = nc
        r.ncon = ncon
        r.physics_violation = None
        r.qacc_forward = None
        r.solve_time = solve_time
        r._ctrl = None
        r._qacc = None
        return r

    return make


def _step_entry():
    """The compiled entry point of :func:`kernels.gdd_step`, or None where the ``mjData``
    layout is not the one measured at import (:func:`_efc_layout`): then every solve takes
    :func:`kernels.gdd_fast` with the stages and row views from Python."""
    if _efc_layout() is None:
        return None
    if not _STEP_ENTRY:
        import numba

        ctx = np.zeros(K.CX_N, dtype=np.int64)
        K.gdd_step.compile((numba.typeof(ctx),))  # compiled or loaded from numba's cache, not run
        _STEP_ENTRY.append(_kernel_entry(K.gdd_step, (ctx,)))
    return _STEP_ENTRY[0]


#: dtype and dimensions of each array slot of the step context (``kernels.AS_*``)
_SLOT_TYPES = {K.AS_SI: (np.int64, 1), K.AS_SPAN: (np.float64, 1), K.AS_DOFF: (np.int64, 1),
               K.AS_PTAB: (np.int64, 2), K.AS_M: (np.float64, 2), K.AS_C: (np.float64, 1),
               K.AS_DQ: (np.float64, 1), K.AS_ACT: (np.float64, 1), K.AS_SCALES: (np.float64, 2),
               K.AS_COST: (np.float64, 1), K.AS_KF2: (np.float64, 2), K.AS_A: (np.float64, 1),
               K.AS_LAM: (np.float64, 1), K.AS_MULO: (np.float64, 1), K.AS_MUHI: (np.float64, 1),
               K.AS_PARAMS: (np.float64, 1), K.AS_IPARAMS: (np.int64, 1),
               K.AS_OUTF: (np.float64, 1), K.AS_OUTS: (np.int64, 1), K.AS_WSF: (np.float64, 1),
               K.AS_WSI: (np.int64, 1)}


def _factor_layout_ok(model) -> bool:
    """Whether ``data.qLD`` holds ``M = Lᵀ D L`` in the CSR layout of ``model.M_rownnz/M_rowadr/
    M_colind`` (what the compiled step reads), checked once at ``qpos0``: ``kernels.ldl_factor``
    of ``data.M`` must reproduce it (MuJoCo versions that keep ``qLD`` in another layout use the
    general path)."""
    try:
        d = mujoco.MjData(model)
        mujoco.mj_fwdPosition(model, d)
        if d.M.shape != d.qLD.shape or d.qLDiagInv.shape != (model.nv,):
            return False
        rn, ra, ci = (np.asarray(x, dtype=np.int64) for x in (model.M_rownnz, model.M_rowadr, model.M_colind))
        q, dinv = np.array(d.M, dtype=float), np.empty(model.nv)
        return bool(K.ldl_factor(rn, ra, ci, q, dinv)
                    and np.allclose(q, d.qLD, rtol=1e-9, atol=1e-12 * max(1.0, np.abs(d.qLD).max()))
                    and np.allclose(dinv, d.qLDiagInv, rtol=1e-9))
    except (AttributeError, ValueError, TypeError):
        return False


_EMPTY_KF2 = np.zeros((0, 0))
_EMPTY_I = np.zeros(0, dtype=np.int64)  # no MuJoCo factor of M on the general path
_EMPTY_F = np.zeros(0)


class _FastPlan:
    """How the compiled step evaluates one cost for one solver (see :meth:`GDDSolver.solve`).

    ``ok`` is False when some term is not built in (the general path is used then).
    ``si``: the static int array (``kernels.SI_*`` header: model structure, the term table
    and the subtree body lists); ``tparams``: the terms' parameter arrays (weights, targets:
    the terms' own arrays, so changes of weight, activity and goals are seen without
    rebuilding; a term never replaces them, it writes into them); ``ptab (n, 2)``: their
    addresses and lengths, what the kernels read; ``costbuf``: the packed cost the kernel
    fills (``CostArrays`` layout).
    """

    __slots__ = ("ok", "cost", "terms", "version", "si", "tparams", "ptab", "costbuf", "dims",
                 "Kf2", "entry", "act", "floss", "native")

    def __init__(self, solver: "GDDSolver", cost):
        self.cost = cost
        self.version = _STRUCTURE[0]
        self.terms = list(cost.terms) if isinstance(cost, Cost) else None
        self.ok = False
        self.entry = None
        self.native = None  # entry point of kernels.gdd_step, after the first solve
        if isinstance(cost, Cost):
            terms = cost.terms
        elif isinstance(cost, CostTerm):
            terms = [cost]
        else:
            return
        model = solver.model
        specs = [t._fast_spec() for t in terms]
        if not specs or any(sp is None for sp in specs):
            return
        nv = model.nv
        head = np.zeros(K.SI_NHEAD, dtype=np.int64)
        parts = [head]
        off = [K.SI_NHEAD]

        def add(arr):
            arr = np.asarray(arr, dtype=np.int64).ravel()
            o = off[0]
            parts.append(arr)
            off[0] += arr.size
            return o

        head[K.SI_NBODY] = model.nbody
        head[K.SI_NJNT] = model.njnt
        head[K.SI_NTERM] = len(terms)
        head[K.SI_PARENT] = add(model.body_parentid)
        head[K.SI_ROOT] = add(model.body_rootid)
        head[K.SI_DOFADR] = add(model.body_dofadr)
        head[K.SI_DOFNUM] = add(model.body_dofnum)
        head[K.SI_DOFPARENT] = add(model.dof_parentid)
        head[K.SI_MROWNNZ] = add(model.M_rownnz)
        head[K.SI_MROWADR] = add(model.M_rowadr)
        head[K.SI_MCOLIND] = add(model.M_colind)
        head[K.SI_JTYPE] = add(model.jnt_type)
        head[K.SI_JQPOS] = add(model.jnt_qposadr)
        head[K.SI_JDOF] = add(model.jnt_dofadr)
        head[K.SI_XFRC] = 1
        table = np.zeros((len(terms), K.TERM_NCOL), dtype=np.int64)
        head[K.SI_TERMS] = add(table)  # filled below (parts[-1] is a copy: write it there)
        table = parts[-1].reshape(len(terms), K.TERM_NCOL)
        tparams = []

        def param(arr):
            if not (isinstance(arr, np.ndarray) and arr.dtype == np.float64 and arr.ndim == 1
                    and arr.flags.c_contiguous):
                raise ValueError
            tparams.append(arr)
            return len(tparams) - 1

        counts = {"mass": 0, "diag": 0, "rows": 0}
        try:
            for i, sp in enumerate(specs):
                row = table[i]
                kind = sp["kind"]
                row[K.TC_CODE] = sp["code"]
                row[K.TC_SLOT] = counts[kind]
                counts[kind] += sp.get("rows", 1)
                row[K.TC_BODY] = sp.get("body", 0)
                row[K.TC_SITE] = sp.get("site", -1)
                row[K.TC_PW] = param(sp["w"])
                row[K.TC_PT] = param(sp["t"]) if "t" in sp else row[K.TC_PW]
                row[K.TC_PX] = param(sp["x"]) if "x" in sp else row[K.TC_PW]
                if "list" in sp:
                    row[K.TC_LIST] = add(sp["list"])
                    row[K.TC_COUNT] = sp.get("count", len(sp["list"]))
                pm = sp.get("model")
                if pm is not None and pm is not model and not (
                        pm.nq == model.nq and pm.nv == model.nv and pm.njnt == model.njnt
                        and np.array_equal(pm.jnt_type, model.jnt_type)):
                    raise ValueError
                if "t" in sp and sp["code"] in (K.TERM_MASS_FIXED, K.TERM_DIAG_FIXED) and sp["t"].size != 2 * nv:
                    raise ValueError
        except ValueError:
            return
        self.si = np.concatenate(parts)
        self.tparams = tuple(tparams)  # kept alive: the kernels read them through ptab
        self.ptab = np.array([(arr.ctypes.data, arr.size) for arr in tparams], dtype=np.int64)
        km, kd, m1 = counts["mass"], counts["diag"], counts["rows"]
        self.dims = (km, kd, m1, 0)
        self.costbuf = np.zeros(km * (nv + 1) + kd * (2 * nv + 1) + m1 * (nv + 2))
        self.Kf2 = _EMPTY_KF2
        self.act = None  # the (state-independent) actuation arrays, read at the first solve
        # friction-loss rows only exist when some dof or tendon has friction loss
        self.floss = bool(np.any(model.dof_frictionloss > 0) or (
            model.ntendon > 0 and np.any(model.tendon_frictionloss > 0)))
        self.ok = True


#: run the compiled step through :func:`kernels.gdd_step` (stages and constraint rows read in
#: the compiled call) where the ``mjData`` layout allows; False: :func:`kernels.gdd_fast` with the
#: stages and array views from Python (the same results, a few µs slower per step)
NATIVE_STEP = True

#: ``mjData`` fields of the constraint rows read by ``gdd_step``, by ``kernels.DL_*`` index
_EFC_FIELDS = ("efc_J", "efc_aref", "efc_D", "efc_R", "efc_frictionloss", "efc_type")
_EFC_LAYOUT = []  # [layout or None] once measured


def _efc_layout():
    """Byte offsets (``kernels.DL_*``, int64) in the ``mjData`` struct of ``nefc`` and of the
    pointer fields of the constraint rows, or None (no native MuJoCo calls in this installation
    or a layout other than ``mjdata.h``'s: ``nefc`` the fifth ``int`` after the ``timer`` array).

    Measured once on a probe model (a ball on a plane, a hinge with a limit and friction loss)
    and checked against the bindings' views at configurations with different numbers of rows."""
    if not _EFC_LAYOUT:
        try:
            _EFC_LAYOUT.append(_measure_efc_layout())
        except Exception:  # noqa: BLE001  # pragma: no cover - another layout: use gdd_fast
            _EFC_LAYOUT.append(None)
    return _EFC_LAYOUT[0]


def _measure_efc_layout():
    from ... import native

    if not native.NATIVE:
        return None
    m = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><geom type='plane' size='1 1 0.1'/>"
        "<body><freejoint/><geom type='sphere' size='0.1'/></body>"
        "<body><joint type='hinge' range='-0.5 0.5' frictionloss='0.1' limited='true'/>"
        "<geom type='capsule' size='0.02' fromto='0 0 1 0.3 0 1'/></body>"
        "</worldbody></mujoco>")
    layout = None
    for trial in range(2):  # two MjData: the same offsets
        d = mujoco.MjData(m)
        base = d._address
        counts = native.ncon_field_offset(d)
        cur = np.zeros(K.DL_N, dtype=np.int64)
        cur[K.DL_NEFC] = counts + 16  # ncon, ne, nf, nl, nefc
        seen = set()
        for height, angle in ((0.09, 0.7), (0.5, 0.0), (0.05, 0.0)):  # 6, 1 and 5 rows
            d.qpos[:] = m.qpos0
            d.qpos[2] = height
            d.qpos[7] = angle
            mujoco.mj_forward(m, d)
            ints = np.frombuffer((ctypes.c_int32 * 5).from_address(base + counts), dtype=np.int32)
            if list(ints) != [d.ncon, d.ne, d.nf, d.nl, d.nefc]:
                return None
            seen.add(d.nefc)
            for k, name in enumerate(_EFC_FIELDS, start=1):
                addr = getattr(d, name).ctypes.data
                if not cur[k]:
                    cur[k] = native.pointer_field_offset(d, addr, int(counts))
                if ctypes.c_uint64.from_address(base + int(cur[k])).value != addr:
                    return None
        if len(seen) < 3 or (layout is not None and not np.array_equal(layout, cur)):
            return None
        layout = cur
    return layout


_FLAGS_OFFSET = []  # [byte offset of mjModel.opt.disableflags or None] once measured


def _flags_offset():
    """Byte offset in the ``mjModel`` struct of ``opt.disableflags`` (then ``enableflags``), or
    None: the compiled step then runs ``mj_fwdPosition`` as it is (with ``mj_island``).
    Measured once (:func:`~contactopt.native.option_flags_offset`) on two probe
    models of different sizes, which must agree."""
    if not _FLAGS_OFFSET:
        from ... import native

        off = None
        try:
            if native.NATIVE:
                a = native.option_flags_offset(mujoco.MjModel.from_xml_string("<mujoco/>"))
                b = native.option_flags_offset(mujoco.MjModel.from_xml_string(
                    "<mujoco><worldbody><body><freejoint/><geom size='0.1'/></body>"
                    "<site name='s'/></worldbody></mujoco>"))
                off = a if a == b else None
        except Exception:  # noqa: BLE001  # pragma: no cover - another layout: keep mj_island
            off = None
        _FLAGS_OFFSET.append(off)
    return _FLAGS_OFFSET[0]


def _check_data(model, data) -> None:
    """Raise :class:`ParameterError` unless ``data`` has ``model``'s sizes (the compiled step runs
    MuJoCo on the pair through raw pointers; checked once per ``MjData``)."""
    if not isinstance(data, mujoco.MjData):
        raise ParameterError(f"data must be a mujoco.MjData, got {type(data).__name__}")
    sizes = (data.qpos.size, data.qvel.size, data.act.size, data.ctrl.size, data.xpos.shape[0])
    if sizes != (model.nq, model.nv, model.na, model.nu, model.nbody):
        raise ParameterError(
            "data was made for a different model (nq, nv, na, nu, nbody "
            f"{sizes} vs the solver's {(model.nq, model.nv, model.na, model.nu, model.nbody)})")


#: MuJoCo fixed-size arrays the compiled step reads, by ``kernels.DO_*`` offset index
_SPAN_FIELDS = ("M", "qpos", "qvel", "qfrc_bias", "qfrc_passive", "qfrc_applied", "xfrc_applied",
                "cdof", "cdof_dot", "cvel", "subtree_com", "xipos", "xpos", "site_xpos",
                "qLD", "qLDiagInv")


def _data_span(model, data):
    """``(data, span, offsets)``: one float64 view over the part of ``data``'s buffer that holds
    the arrays of :data:`_SPAN_FIELDS` and their offsets in it (one kernel argument instead of
    fourteen).  ``(data, None, None)`` if the arrays are not laid out in one buffer as expected."""
    arrs = [getattr(data, name) for name in _SPAN_FIELDS]
    live = [x for x in arrs if x.size]
    if not all(x.dtype == np.float64 and x.flags.c_contiguous for x in live):
        return data, None, None
    addr = [x.ctypes.data for x in live]
    lo = min(addr)
    hi = max(p + x.nbytes for p, x in zip(addr, live))
    nbuffer = getattr(data, "nbuffer", None)
    if nbuffer is None or hi - lo > nbuffer or any((p - lo) % 8 for p in addr):
        return data, None, None
    raw = (ctypes.c_double * ((hi - lo) // 8)).from_address(lo)
    span = np.frombuffer(raw, dtype=np.float64)
    doff = np.zeros(K.DO_N, dtype=np.int64)
    for k, x in enumerate(arrs):
        if x.size:
            doff[k] = (x.ctypes.data - lo) // 8
            if not np.shares_memory(span, x) or not np.array_equal(
                    span[doff[k]:doff[k] + x.size], x.ravel(), equal_nan=True):
                return data, None, None
    return data, span, doff


def gdd_step(model: mujoco.MjModel, data: mujoco.MjData, cost: Cost | CostTerm,
             solver: GDDSolver | None = None) -> GDDResult:
    """One step of goal-directed simulation: solve, clamp, apply the control, ``mj_step``.

    Uses MuJoCo's split step: ``mj_step1`` (position and velocity stages — the one
    evaluation the solver reads), the solve, then ``mj_step2`` with ``data.ctrl``
    set and the forward solver warm-started from the goal-directed acceleration.
    ``result.physics_violation`` compares a_gdd with the forward acceleration of
    that step.  MuJoCo's split step integrates with Euler or the implicit
    integrators (``mj_step2`` does not support RK4, which then falls back to Euler).

    Args:
      model, data: the simulation (``data`` is advanced by one time step).
      cost: the cost over accelerations.
      solver: a :class:`GDDSolver` for ``model`` (keeps the warm start between
        steps); a new one is made if None.

    Returns:
      :class:`GDDResult` of the step.

    Raises:
      SimulationError: the solve failed numerically or produced a non-finite
        control; the step is NOT taken (``data`` holds the stages of the unchanged state).
      NonFiniteError: the state or the cost is not finite; the step is NOT taken.
    """
    if solver is None:
        solver = GDDSolver(model)
    elif solver.model is not model:
        if solver.model.nv != model.nv or solver.model.nu != model.nu:
            raise ParameterError("solver was made for a different model")
    if not (np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all()):
        # checked here: mj_step1 would silently reset a non-finite state
        raise NonFiniteError("state (qpos/qvel) is not finite; not stepping")
    mujoco.mj_step1(model, data)
    result = solver.solve(data, cost, compute_stages=False)
    solver.apply(data, result)
    mujoco.mj_step2(model, data)
    result.qacc_forward = data.qacc.copy()
    diff = result.qacc - result.qacc_forward
    result.physics_violation = math.sqrt(float(diff.dot(diff)))
    if not (np.all(np.isfinite(data.qpos)) and np.all(np.isfinite(data.qvel))):
        raise SimulationError("the simulation diverged (non-finite state after the step)")
    return result
