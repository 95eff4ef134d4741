"""Results of the goal-directed dynamics solver: :class:`GDDStatus`, :class:`GDDIterationLog`,
:class:`GDDResult` (see :mod:`contactopt.solvers.gdd.solver`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from . import kernels as K

__all__ = ["GDDIterationLog", "GDDResult", "GDDStatus"]


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

    def __new__(cls, qacc, ctrl, actuator_force, qfrc, Zt, efc_force, efc_state, stats,
                nefc, ncon, solve_time=0.0, log_array=None):
        log = np.zeros((0, K.LOG_NCOL)) if log_array is None else np.asarray(log_array, dtype=float)
        nc = len(actuator_force)
        buf = np.concatenate((np.asarray(qfrc, dtype=float), np.asarray(efc_force, dtype=float),
                              np.asarray(actuator_force, dtype=float), np.zeros(nc),
                              np.asarray(stats, dtype=float), np.asarray(qacc, dtype=float),
                              np.asarray(efc_state, dtype=float), log.ravel()))
        return _result_maker(Zt, len(qfrc), nc)(buf, nefc, ncon, solve_time, np.asarray(ctrl), cls)

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


_STATUS = {int(st): st for st in GDDStatus}


def _result_maker(Zt, nv, nc):
    """``make(buf, nefc, ncon, solve_time, ctrl=None)``: the :class:`GDDResult` on the kernel's
    output buffer ``buf`` (the layout in its docstring) of a state with ``nefc`` rows, for a
    solver's ``Zt``, ``nv`` and ``nc``; ``ctrl`` None: the controls are the buffer's (every
    actuator controllable).  The one place that sets a result's attributes, as a closure so that
    the hot path of :meth:`GDDSolver.solve` (which keeps one) makes a result in one Python call."""
    new = object.__new__

    def make(buf, nefc, ncon, solve_time, ctrl=None, cls=GDDResult):
        r = new(cls)
        r.Zt = Zt
        r._buf = buf
        r._nv = nv
        r.nefc = nefc
        r._nc = nc
        r.ncon = ncon
        r.physics_violation = None
        r.qacc_forward = None
        r.solve_time = solve_time
        r._ctrl = ctrl
        r._qacc = None
        return r

    return make
