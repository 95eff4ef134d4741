"""Stage costs ``ℓ(x, u) = Σ w n(r(x, u))``, their derivatives and the batched stage evaluation."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import NonFiniteError, ParameterError, as_array, check_nonnegative
from .acceleration import AccelerationResidual
from .norms import Norm, Quadratic
from .residuals import Residual, _batch_requests

__all__ = [
    "CostDerivatives",
    "CostTerm",
    "StageCost",
    "StageDerivatives",
    "refuse_acceleration_terms",
]


# =========================================================================== stage costs


@dataclass(frozen=True)
class CostTerm:
    """One weighted term ``w · norm(residual(x, u))`` of a cost.

    Attributes:
      residual: a :class:`Residual` over states and controls (every planner consumes it), or an
        :class:`~contactopt.costs.acceleration.AccelerationResidual` over the acceleration at
        one state (goal-directed dynamics' own terms; only ``gdd`` consumes it, with its own
        quadratic form, so its norm must be :class:`Quadratic`).
      norm: the :class:`Norm` (default :class:`Quadratic`).
      weight: ``w ≥ 0`` (finite).
    """

    residual: Residual
    norm: Norm = Quadratic()
    weight: float = 1.0

    def __post_init__(self):
        if not isinstance(self.residual, (Residual, AccelerationResidual)):
            raise ParameterError(f"CostTerm residual must be a Residual or an AccelerationResidual, got "
                                 f"{type(self.residual).__name__}")
        if not isinstance(self.norm, Norm):
            raise ParameterError(f"CostTerm norm must be a Norm, got {type(self.norm).__name__}")
        if isinstance(self.residual, AccelerationResidual) and type(self.norm) is not Quadratic:
            raise ParameterError(f"cost term {self.residual.name}: an acceleration-level term has its own "
                                 f"quadratic form; its norm must be Quadratic, got {type(self.norm).__name__}")
        object.__setattr__(self, "weight",
                           check_nonnegative(f"weight of {self.residual.name}", self.weight))

    @property
    def name(self) -> str:
        """The residual's name (used in logs and error messages)."""
        return self.residual.name

    @property
    def acceleration_level(self) -> bool:
        """True for a term over accelerations (:class:`AccelerationResidual`): only ``gdd`` takes it."""
        return isinstance(self.residual, AccelerationResidual)


def refuse_acceleration_terms(terms, planner: str) -> None:
    """Raise :class:`ParameterError` naming the first acceleration-level term of ``terms``.

    ``planner`` names the consumer in the message (a planner over states and controls, which
    cannot evaluate a term that is written over the acceleration at one state).
    """
    for t in terms:
        if isinstance(t, CostTerm) and t.acceleration_level:
            raise ParameterError(
                f"cost term {t.name} ({type(t.residual).__name__}) is written over accelerations: only the "
                f"'gdd' planner consumes such terms, {planner} plans over states and controls (write it "
                "with a state residual of contactopt.costs, e.g. SitePosition, Qpos, Qvel)")


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


def moving_residuals(terms) -> list:
    """The residuals of ``terms`` (:class:`CostTerm` s) whose target follows a reference
    (:meth:`Residual.with_reference <contactopt.costs.Residual.with_reference>`; parts of a
    :class:`~contactopt.costs.Combination` included), each once."""
    out = []
    for t in terms:
        stack = [t.residual]
        while stack:
            r = stack.pop()
            if getattr(r, "reference", None) is not None and all(r is not o for o in out):
                out.append(r)
            stack.extend(res for _, res in getattr(r, "parts", ()))
    return out


class StageCost:
    """A weighted sum of residual terms, ``ℓ(x, u) = Σ_k w_k n_k(r_k(x, u))``.

    Args:
      model: the model every residual was built for.
      terms: :class:`CostTerm` objects (an empty list is the zero cost).

    Raises:
      ParameterError: a term built for another model, not a CostTerm, or written over
        accelerations (:class:`~contactopt.costs.acceleration.AccelerationResidual`: it has no
        value at a state and control).
    """

    def __init__(self, model: mujoco.MjModel, terms: Iterable[CostTerm] = ()):
        if not isinstance(model, mujoco.MjModel):
            raise ParameterError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        self.model = model
        self.terms: tuple[CostTerm, ...] = tuple(terms)
        for t in self.terms:
            if not isinstance(t, CostTerm):
                raise ParameterError(f"StageCost terms must be CostTerm objects, got {type(t).__name__}")
        refuse_acceleration_terms(self.terms, "a cost over states and controls")
        for t in self.terms:
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

    @property
    def moving_residuals(self) -> list:
        """:func:`moving_residuals` of this cost's terms."""
        return moving_residuals(self.terms)

    def schedule(self, times, t0: float, x0) -> None:
        """Every moving target at the stage times ``times (S,)`` [s] of a plan from ``x0 (nx,)``
        at ``t0`` [s] (:meth:`Residual.schedule <contactopt.costs.Residual.schedule>`); stage
        ``k`` of later evaluations (``row_offset + i``) is compared with the targets at ``times[k]``."""
        for r in self.moving_residuals:
            r.schedule(times, t0, x0)

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
          row_offset: the index of the first stage (in error messages, and the row of a
            :meth:`schedule` d target that stage ``i`` is evaluated against: ``i + row_offset``).

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
    from .. import native

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
    moving = [k for k, t in enumerate(terms) if t.residual.scheduled]  # targets per stage
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
                if moving:
                    terms[k].residual._set_stage(i + row_offset)
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
            if moving:
                res._set_stage(np.arange(row_offset, row_offset + N))
            r, jx, ju = res.batch_evaluate(kin, X, U, derivatives)
            R[k] = np.asarray(r, dtype=float).reshape(N, res.size)
            if derivatives:
                JX[k] = jx                     # None: identically zero (skipped below)
                JU[k] = ju if res.uses_control else None
    for k in moving:
        terms[k].residual._set_stage(0)  # an evaluation outside a plan is of the schedule's first stage
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
