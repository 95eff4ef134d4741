"""Base machinery of the goal-directed cost terms (see :mod:`contactopt.solvers.gdd.costs`).

:class:`AccelerationTerm` is the abstract weighted term over accelerations, :class:`Cost` their
weighted sum, :class:`CostArrays` the filled form the solver kernel takes and :class:`TermModel`
one weighted term at one state.  The module-level state shared by every term module lives here:
the structure version (:data:`_STRUCTURE`, bumped by :func:`_bump_structure`; the solver's compiled
plan of a cost is rebuilt when it changes) and the entry-point cache of :func:`_fast`.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass

import numpy as np

from ...costs.acceleration import AccelerationResidual
from ...errors import NonFiniteError, ParameterError, as_array, check_nonnegative
from .problem import GDDProblem

_ENTRIES: dict = {}

#: bumped whenever a term's structure changes (a new target object, fixed ↔ policy):
#: the solver's compiled plan of a cost is rebuilt then
_STRUCTURE = [0]


def _bump_structure() -> None:
    _STRUCTURE[0] += 1


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


__all__ = ["AccelerationTerm", "Cost", "CostArrays", "TermModel"]


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
    (zeroed before :meth:`AccelerationTerm.fill`).
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
            if not t.active or t._weight == 0.0:
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
        Kf = sw * sl.Kf.copy() if kind == "force_rows" and sl.Kf is not None else None
        return TermModel(Ka=sw * sl.Ka.copy(), Kf=Kf, e=sw * sl.e.copy())


# --------------------------------------------------------------------------- base class


class AccelerationTerm(AccelerationResidual, abc.ABC):
    """A weighted cost term over accelerations (an
    :class:`~contactopt.costs.acceleration.AccelerationResidual`).

    Subclasses set ``kind`` — ``"mass"`` (``(w/2)(a − t)ᵀM(a − t)``), ``"diag"``
    (``(w/2)Σ m_i(a_i − t_i)²``), ``"rows"`` (``(w/2)‖Ka a + e‖²``, ``rows`` rows) or
    ``"force_rows"`` (``(w/2)‖Ka a + Kf f(a) + e‖²``) — and implement :meth:`fill`,
    which writes the unweighted data of the current state in place.

    The term enters a cost as the residual of a shared :class:`~contactopt.costs.CostTerm`,
    ``CostTerm(term, weight=c)``, or directly (``Cost(term)``, ``c = 1``); its effective weight is
    ``w = c · weight``.

    Attributes:
      weight: non-negative multiplier of the term (settable).
      cost_weight: the multiplier ``c`` of the :class:`~contactopt.costs.CostTerm` the term was
        given in (1 when given directly; set by :class:`Cost`).
      effective_weight: ``w = cost_weight · weight``, what the solver uses.
      active: a disabled term contributes nothing (settable), e.g. to switch off an
        end-effector goal once it is reached (seed section VI).
      name: label used in error messages.
      model: the model the term was built for (None for terms that need none).
    """

    kind: str = "rows"
    rows: int = 0

    def __init__(self, weight: float = 1.0, *, name: str | None = None):
        # [effective weight (0 when inactive), term parameter]: read by the compiled solver
        self._kw = np.zeros(2)
        self._active = True
        self._cost_weight = 1.0
        self.weight = weight
        self.name = name or type(self).__name__

    def _sync_weight(self) -> None:
        self._weight = self._cost_weight * self._base_weight
        self._kw[0] = self._weight if self._active else 0.0

    @property
    def weight(self) -> float:
        """Non-negative multiplier of the term (the effective weight is ``cost_weight · weight``)."""
        return self._base_weight

    @weight.setter
    def weight(self, value: float) -> None:
        self._base_weight = check_nonnegative("weight", value)
        self._sync_weight()

    @property
    def cost_weight(self) -> float:
        """The weight ``c`` of the :class:`~contactopt.costs.CostTerm` that holds the term (1 if none)."""
        return self._cost_weight

    @cost_weight.setter
    def cost_weight(self, value: float) -> None:
        self._cost_weight = check_nonnegative(f"weight of {self.name}", value)
        self._sync_weight()

    @property
    def effective_weight(self) -> float:
        """``cost_weight · weight``: the multiplier the solver applies."""
        return self._weight

    @property
    def active(self) -> bool:
        """Whether the term contributes (a disabled term has effective weight 0)."""
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        self._active = bool(value)
        self._sync_weight()

    def _fast_spec(self):
        """What the compiled solver needs to evaluate this term itself (None: it cannot).

        A dict with ``code`` (``kernels.TERM_*``), ``kind`` and the term's arrays;
        see :class:`contactopt.solvers.gdd.solver.GDDSolver` (fast path).
        """
        return None

    @abc.abstractmethod
    def fill(self, problem: GDDProblem, out: _Slot) -> None:
        """Write this term's unweighted data for ``problem``'s state into ``out`` (see :class:`_Slot`)."""

    def term_model(self, problem: GDDProblem) -> TermModel:
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
        return self.term_model(problem).evaluate(problem, qacc)

    def __add__(self, other):
        return Cost(self, other)


# --------------------------------------------------------------------------- the sum


class Cost:
    """A weighted sum of :class:`AccelerationTerm` objects: ``ℓ(a) = Σ_t w_t ℓ_t(a)``.

    ``Cost(term1, term2)``, ``term1 + term2`` or ``cost + term`` compose terms;
    ``cost.terms`` lists them (``weight`` and ``active`` of a term may change
    between solves; adding or removing terms rebuilds the buffers).  A shared
    :class:`~contactopt.costs.CostTerm` whose residual is an :class:`AccelerationTerm` is
    taken as that term with ``cost_weight`` set to the CostTerm's weight.  A CostTerm over
    states (a :class:`~contactopt.costs.Residual`) must first become an acceleration feature
    (:func:`contactopt.solvers.gdd.features.acceleration_terms`).
    """

    def __init__(self, *terms):
        from ...costs import CostTerm

        flat: list[AccelerationTerm] = []
        for t in terms:
            if isinstance(t, Cost):
                flat.extend(t.terms)
            elif isinstance(t, AccelerationTerm):
                flat.append(t)
            elif isinstance(t, CostTerm):
                if not isinstance(t.residual, AccelerationTerm):
                    raise ParameterError(
                        f"cost term {t.name} is written over states; turn it into an acceleration feature "
                        "first (contactopt.solvers.gdd.features.acceleration_terms)")
                t.residual.cost_weight = t.weight
                flat.append(t.residual)
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

    def term_models(self, problem: GDDProblem) -> list[tuple[AccelerationTerm, TermModel]]:
        """``(term, weighted model)`` of every active term with nonzero weight."""
        return [(t, t.term_model(problem)) for t in self.terms if t.active and t._weight > 0]

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
