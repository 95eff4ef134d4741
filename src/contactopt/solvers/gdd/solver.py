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

import math
import time
from dataclasses import replace

import mujoco
import numpy as np

from ...errors import NonFiniteError, ParameterError, as_array
from ...model import check_state_range, new_reset_warnings, reset_warnings
from ...simulate import SimulationError
from . import cost_base
from . import kernels as K
from .cost_base import AccelerationTerm, Cost
from .fast_plan import (
    _SLOT_TYPES,
    _check_data,
    _data_span,
    _efc_layout,
    _factor_layout_ok,
    _FastPlan,
    _flags_offset,
    _kernel_entry,
    _step_entry,
)
from .problem import ActuationModel, DataViews, GDDProblem
from .result import GDDIterationLog, GDDResult, GDDStatus, _result_maker
from .settings import DualUpdate, GDDSettings, LineSearch

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
      ModelError: a ``<size memory>`` too small for the position and velocity stages the
        compiled step runs (``mj_forward`` probed once at ``qpos0`` and the keyframes by
        :func:`contactopt.native.check_compiled_loops`; a MuJoCo fatal error inside the compiled
        step would end the process).  RK4 is fine here (the stages do not integrate).
    """

    #: recompute the penalty and violation scales (which use M⁻¹) every this many solves
    SCALE_INTERVAL = 25

    def __init__(self, model: mujoco.MjModel, settings: GDDSettings | None = None, **overrides):
        from ... import native

        native.check_compiled_loops(model, ("forward",), what="GDDSolver")
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

    def solve(self, data: mujoco.MjData, cost: Cost | AccelerationTerm, *, compute_stages: bool = True,
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
            if cx[1] is data and plan.cost is cost and plan.version == cost_base._STRUCTURE[0] and (
                    plan.terms is None or plan.terms == cost.terms):
                code = cx[2](cx[3] if compute_stages else cx[4])
                if code > 0 and code & 15 != K.STATUS_NUMERICAL_ERROR:
                    need = code >> 4
                    return cx[5](self._outf[:need].copy(), (need - self._out_fixed) >> 1, data.ncon,
                                 _perf_counter() - t0)
                if code > 0:
                    return self._native_result(data, cost, plan, code, t0)
                return self._native_retry(data, cost, plan, code, t0)
        if problem is None and self._fast_ok:
            plan = self._plan
            if plan is None or plan.cost is not cost or plan.version != cost_base._STRUCTURE[0] or (
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
            if isinstance(cost, AccelerationTerm):
                cost = Cost(cost)
            else:
                raise ParameterError(f"cost must be a Cost or an AccelerationTerm, got {type(cost).__name__}")
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
        return _result_maker(act.Zt, nv, nc)(buf, nefc, data.ncon, time.perf_counter() - t0)

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
                          _result_maker(plan.act.Zt, self.model.nv, plan.act.gain.size),
                          tuple(arrays.values()))
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
        nefc = (need - self._out_fixed) >> 1
        if (code & 15) == K.STATUS_NUMERICAL_ERROR or not self._all_controllable:
            self._hot = False
            return self._fast_result(data, cost, plan, buf, nefc, t0)
        self._have_warm = True
        self._hot = self._warm  # (all controllable here)
        return self._ctx[5](buf, nefc, data.ncon, time.perf_counter() - t0)

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


def _pack_actuation(act) -> np.ndarray:
    """``ActuationArrays.packed`` for arrays built without it (layout: see the kernel)."""
    return np.concatenate((act.Zt.ravel(), act.Cbox.ravel(), act.Bdir.ravel(), act.Bpinv.ravel(),
                           act.lo, act.hi, act.gain, act.bias, act.ctrl_lo, act.ctrl_hi))


_perf_counter = time.perf_counter


_EMPTY_I = np.zeros(0, dtype=np.int64)  # no MuJoCo factor of M on the general path
_EMPTY_F = np.zeros(0)


#: run the compiled step through :func:`kernels.gdd_step` (stages and constraint rows read in
#: the compiled call) where the ``mjData`` layout allows; False: :func:`kernels.gdd_fast` with the
#: stages and array views from Python (the same results, a few µs slower per step)
NATIVE_STEP = True


def gdd_step(model: mujoco.MjModel, data: mujoco.MjData, cost: Cost | AccelerationTerm,
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
      ParameterError: a qpos/qvel entry beyond 1e10 (MuJoCo would reset it); the step is NOT taken.
    """
    if solver is None:
        solver = GDDSolver(model)
    elif solver.model is not model:
        if solver.model.nv != model.nv or solver.model.nu != model.nu:
            raise ParameterError("solver was made for a different model")
    if not (np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all()):
        # checked here: mj_step1 would silently reset a non-finite state
        raise NonFiniteError("state (qpos/qvel) is not finite; not stepping")
    check_state_range(model, data)  # likewise a state beyond 1e10 (mjMAXVAL)
    before = reset_warnings(data)
    mujoco.mj_step1(model, data)
    result = solver.solve(data, cost, compute_stages=False)
    solver.apply(data, result)
    mujoco.mj_step2(model, data)
    reset = new_reset_warnings(data, before)
    if reset:
        raise SimulationError(f"the simulation diverged: MuJoCo found {'/'.join(reset)} non-finite or "
                              "beyond 1e10 in this step and reset the state to qpos0")
    result.qacc_forward = data.qacc.copy()
    diff = result.qacc - result.qacc_forward
    result.physics_violation = math.sqrt(float(diff.dot(diff)))
    if not (np.all(np.isfinite(data.qpos)) and np.all(np.isfinite(data.qvel))):
        raise SimulationError("the simulation diverged (non-finite state after the step)")
    return result
