"""The convex, smooth and invertible contact model (Todorov 2011), in contact space.

Unknowns: the impulse ``f ∈ R^n``, ``n = n_l + 3 n_c`` — joint limits first, then
one ``(tangent, tangent, normal)`` triple per contact.  With ``A = J M⁻¹ Jᵀ`` the
inverse inertia in contact space and ``v = A f + c`` the next-step contact
velocity (eq. 6):

* forward  ``(A, c) → (f, v)``: ``f = argmin ½ fᵀ(A+R)f + fᵀc + d(f)`` (eq. 15–17);
* inverse  ``(A, v) → (f, c)``: ``f = argmin ½ fᵀRf + d_F(f) + fᵀ(v + A ∇_v d_V(v))``
  (eq. 23), ``c = v − A f``.

``d = d_F + d_V`` are log barriers with fixed κ on the friction cones
``μ² f_n² ≥ f_t1² + f_t2²`` (eq. 9), ``f_n ≥ 0`` for limits and contacts (eq. 10),
and ``N v ≥ v_min`` (eq. 11).  The velocity barrier is always the elastic
version d̄_V of eq. 25 (``s₀ = κ/q``, C² quadratic extension below it), in both
directions, so both maps are defined for every input and are exact inverses.

Both are solved by a primal Newton method at fixed κ (the model *is* the fixed-κ
minimizer), with the step cut analytically at the boundary of each cone and
half-space (no backtracking for feasibility), converging on the Newton step size (the forward
also on each row's optimality residual, relative to the terms that cancel in it, for up to a
few extra steps: its impulses can span many orders of magnitude in one problem).
The inverse Hessian ``R + ∇²d_F`` is block diagonal, so the inverse costs one
3×3 solve per contact per iteration; only the forward problem couples contacts
through ``A``.  Kernels are compiled with numba (``contactopt.contact._convex_kernels``).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from ..errors import NonFiniteError, ParameterError, ShapeError, as_array
from ..native.blas import single_threaded_blas
from . import _convex_kernels as K

__all__ = [
    "ContactStatus",
    "ConvexContactModel",
    "ContactSolution",
    "ContactBatch",
    "BatchSolution",
    "velocity_barrier",
]


SCHEDULES = ("linear", "exponential", "smooth-onset")


class ContactStatus(enum.IntEnum):
    """Outcome of one contact-space solve."""

    CONVERGED = K.STATUS_CONVERGED
    MAX_ITERATIONS = K.STATUS_MAX_ITER
    NUMERICAL_ERROR = K.STATUS_NUMERICAL


@dataclass(frozen=True)
class ContactSolution:
    """Result of one forward or inverse solve.

    Attributes:
      f: ``(n,)`` contact impulse [N·s] (limits first, then (t1, t2, n) per contact).
      v: ``(n,)`` next-step contact velocity (given, for the inverse).
      c: ``(n,)`` contact velocity without impulse (given, for the forward).
      status: :class:`ContactStatus`.
      iterations: Newton iterations (for the inverse: the most any contact block took).
    """

    f: np.ndarray
    v: np.ndarray
    c: np.ndarray
    status: ContactStatus
    iterations: int

    @property
    def converged(self) -> bool:
        return self.status == ContactStatus.CONVERGED


def velocity_barrier(s, kappa: float, q: float):
    """Elastic-mode barrier d̄_V (eq. 25) and its first two derivatives, elementwise.

    ``d̄_V(s) = −κ log s`` for ``s ≥ s₀ = κ/q``; below, ``a₀ s² + a₁ s + a₂`` with
    ``a₀ = q²/(2κ)``, ``a₁ = −2q``, ``a₂ = −κ log s₀ + 3κ/2`` so value, slope (``−q``)
    and curvature (``q²/κ``) match at ``s₀``.

    Returns:
      ``(value, first, second)`` arrays shaped like ``s``.
    """
    s = np.asarray(s, dtype=float)
    out = np.array([K.dv_bar(float(x), kappa, q) for x in s.ravel()]).reshape(s.shape + (3,))
    return out[..., 0], out[..., 1], out[..., 2]


@dataclass(frozen=True)
class ConvexContactModel:
    """Parameters of the convex invertible contact model, with forward and inverse solvers.

    Attributes (defaults from the paper, section IV):
      kappa: barrier weight κ > 0 (constraint smoothing; units impulse × velocity).
      q: slope magnitude q > 0 where the elastic quadratic takes over (s₀ = κ/q).
      r_min, r_max: regularizer range, 0 < r_min ≤ r_max (units of A: velocity per impulse).
      w_max: distance at which contacts become active and R reaches r_max (> 0) [m; rad for hinge limits].
      schedule: ``"linear"`` (eq. 24), ``"exponential"``, or ``"smooth-onset"`` R(w)
        (see :meth:`regularizer_for_distance`).
      tol: relative Newton step-size tolerance for convergence; the forward solve also wants
        ``|g_i| ≤ tol·(sum of |terms| of g_i)`` in every gradient row (for at most a few more steps).
      max_iter: Newton iteration limit per solve (per continuation stage of a forward solve).
        The default 300 lets the rare forward solve whose last stage needs 100–300 steps finish:
        with 100, one of 500 (seed 2) and one of 2,000 (seed 1) random humanoid round trips
        stopped at the limit; with 300 none did, at the same total time (a converging solve
        stops long before the limit).

    Note:
      κ sets the complementarity slack ``f_n · s ≈ κ``: the paper's κ = 0.1 suits
      the humanoid at h = 10 ms (impulses of a few N·s); a 1 kg ball at h = 1 ms
      (impulses of ~0.01 N·s) needs κ ≈ 1e-5 or smaller for the same relative smoothing.
    """

    kappa: float = 0.1
    q: float = 10.0
    r_min: float = 0.01
    r_max: float = 100.0
    w_max: float = 0.1
    schedule: str = "linear"
    tol: float = 1e-10
    max_iter: int = 300

    def __post_init__(self):
        for name in ("kappa", "q", "r_min", "r_max", "w_max", "tol"):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.floating, np.integer)) or isinstance(value, bool):
                raise ParameterError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise NonFiniteError(f"{name} must be finite, got {value!r}")
            if not value > 0:
                raise ParameterError(f"{name} must be positive, got {value!r}")
        if self.r_min > self.r_max:
            raise ParameterError(f"r_min ({self.r_min}) must not exceed r_max ({self.r_max})")
        if self.schedule not in SCHEDULES:
            raise ParameterError(f"schedule must be one of {', '.join(map(repr, SCHEDULES))}, "
                                 f"got {self.schedule!r}")
        if int(self.max_iter) != self.max_iter or self.max_iter < 1:
            raise ParameterError(f"max_iter must be a positive integer, got {self.max_iter!r}")

    # ------------------------------------------------------------------ smoothing

    def regularizer_for_distance(self, distance) -> np.ndarray:
        """R value for each normal distance ``w`` (same shape as ``distance``), ``t = clip(w, 0, w_max)/w_max``.

        * linear (eq. 24): ``R = r_min + (r_max − r_min)·t``;
        * exponential: ``R = r_min·(r_max/r_min)^t``;
        * smooth-onset: the linear value divided by ``1 − t`` (+∞ at ``w ≥ w_max``).  With eq. 24
          a contact that enters the active set at ``w_max`` with approach velocity ``c < 0`` starts
          with the impulse ``−c/(A + r_max)`` at once (a step in the force history); this schedule
          makes the impulse start from zero.  Not in the paper.
        """
        w = as_array("distance", distance)
        t = np.clip(w / self.w_max, 0.0, 1.0)
        if self.schedule == "exponential":
            return self.r_min * (self.r_max / self.r_min) ** t
        linear = self.r_min + (self.r_max - self.r_min) * t
        if self.schedule == "linear":
            return linear
        with np.errstate(divide="ignore"):
            return np.where(t < 1.0, linear / np.maximum(1.0 - t, 0.0), np.inf)

    def regularizer(self, distance, n_limits: int) -> np.ndarray:
        """Diagonal of R, ``(n_l + 3 n_c,)``, from ``distance`` ``(n_l + n_c,)`` (limits first).

        Every component of a contact (both tangents and the normal) gets that contact's value.
        """
        r = self.regularizer_for_distance(distance)
        if not 0 <= n_limits <= r.shape[0]:
            raise ShapeError(f"n_limits={n_limits} does not fit {r.shape[0]} distances")
        return np.concatenate([r[:n_limits], np.repeat(r[n_limits:], 3)])

    # ------------------------------------------------------------------ single problems

    def forward(self, A, c, *, friction, v_min, R, n_limits: int = 0, f_init=None) -> ContactSolution:
        """Forward map ``(A, c) → (f, v)``; see the module docstring.

        Args:
          A: ``(n, n)`` symmetric positive semidefinite inverse inertia in contact space.
          c: ``(n,)`` contact velocity without impulse.
          friction: ``(n_c,)`` friction coefficients μ ≥ 0.
          v_min: ``(n_l + n_c,)`` minimum normal velocities.
          R: ``(n,)`` positive regularizer diagonal (see :meth:`regularizer`).
          n_limits: number of joint-limit rows n_l at the top.
          f_init: optional ``(n,)`` warm start (projected into the cones).
        """
        batch = ContactBatch([A], friction=[friction], v_min=[v_min], R=[R], n_limits=[n_limits])
        sol = self.forward_batch(batch, as_array("c", c, (batch.size,)), f_init=f_init)
        return sol.problem(0)

    def inverse(self, A, v, *, friction, v_min, R, n_limits: int = 0, f_init=None) -> ContactSolution:
        """Inverse map ``(A, v) → (f, c)``; arguments as in :meth:`forward` with ``v (n,)`` given."""
        batch = ContactBatch([A], friction=[friction], v_min=[v_min], R=[R], n_limits=[n_limits])
        sol = self.inverse_batch(batch, as_array("v", v, (batch.size,)), f_init=f_init)
        return sol.problem(0)

    # ------------------------------------------------------------------ batches

    def forward_batch(self, batch: "ContactBatch", c, *, f_init=None, parallel: bool = False) -> "BatchSolution":
        """Forward-solve every problem of ``batch`` in one compiled call.

        Args:
          batch: the problems' A, μ, v_min, R (validated once at construction).
          c: ``(batch.size,)`` concatenated ``c`` vectors.
          f_init: optional ``(batch.size,)`` concatenated warm starts.
          parallel: spread problems over numba threads.
        """
        c = as_array("c", c, (batch.size,))
        f, v, iters, status = self._run(False, parallel, batch, c, f_init)
        return BatchSolution(batch, f, v, c, status, iters)

    def inverse_batch(self, batch: "ContactBatch", v, *, f_init=None, parallel: bool = False) -> "BatchSolution":
        """Inverse-solve every problem of ``batch`` in one compiled call; ``v (batch.size,)``."""
        v = as_array("v", v, (batch.size,))
        f, c, iters, status = self._run(True, parallel, batch, v, f_init)
        return BatchSolution(batch, f, v, c, status, iters)

    def _run(self, inverse, parallel, batch, given, f_init):
        """Solve the batch's inverse (``inverse``) or forward problems in one kernel call; returns
        (f, the other velocity vector, iterations, status)."""
        if f_init is None:
            f, warm = np.zeros(batch.size), False
        else:
            f, warm = as_array("f_init", f_init, (batch.size,)).copy(), True
        other = np.empty(batch.size)
        iters = np.zeros(batch.count, dtype=np.int64)
        status = np.zeros(batch.count, dtype=np.int64)
        kernel = K.solve_batch_parallel if parallel else K.solve_batch
        # the serial kernel's small np.dot products on one OpenBLAS thread (module native.blas; the
        # parallel kernel's numba threads are not covered: the setting is per calling thread)
        with single_threaded_blas():
            kernel(inverse, batch.A_flat, batch.a_offsets, given, batch.R, batch.friction, batch.v_min,
                   batch.n_limits, batch.n_contacts, batch.offsets, batch.contact_offsets, batch.normal_offsets,
                   self.kappa, self.q, self.tol, int(self.max_iter), f, other, warm, iters, status)
        return f, other, iters, status


class ContactBatch:
    """Many independent contact-space problems of different sizes, stored ragged.

    Problem ``p`` has ``n_l[p]`` limits and ``n_c[p]`` contacts, ``n[p] = n_l + 3 n_c``;
    its vectors live at ``offsets[p]:offsets[p+1]`` of every concatenated vector,
    its ``A`` is ``A_flat[a_offsets[p] : a_offsets[p] + n[p]²]`` (row-major), its
    friction at ``contact_offsets`` and its ``v_min`` at ``normal_offsets``.

    Args:
      A: sequence of ``(n_p, n_p)`` symmetric positive semidefinite matrices (``J M⁻¹ Jᵀ`` is
        singular when the contact space has more rows than degrees of freedom; ``A + R``
        must be positive definite).
      friction: sequence of ``(n_c,)`` arrays, μ ≥ 0.
      v_min: sequence of ``(n_l + n_c,)`` arrays.
      R: sequence of ``(n_p,)`` positive arrays.
      n_limits: sequence of ints (default all 0).

    Raises:
      ShapeError, NonFiniteError, ParameterError: naming the argument and the problem index.
    """

    def __init__(self, A, *, friction, v_min, R, n_limits=None):
        count = len(A)
        if n_limits is None:
            n_limits = [0] * count
        for name, seq in (("friction", friction), ("v_min", v_min), ("R", R), ("n_limits", n_limits)):
            if len(seq) != count:
                raise ShapeError(f"{name}: expected {count} problems, got {len(seq)}")
        mats, nls, ncs = [], [], []
        for p in range(count):
            a = as_array(f"A[{p}]", A[p], (None, None))
            if a.shape[0] != a.shape[1]:
                raise ShapeError(f"A[{p}]: must be square, got {a.shape}")
            nl = int(n_limits[p])
            if nl < 0 or (a.shape[0] - nl) % 3 or nl > a.shape[0]:
                raise ShapeError(f"A[{p}]: size {a.shape[0]} is not n_limits ({nl}) + 3 × contacts")
            mats.append(a.ravel())
            nls.append(nl)
            ncs.append((a.shape[0] - nl) // 3)
        self.n_limits = np.asarray(nls, dtype=np.int64)
        self.n_contacts = np.asarray(ncs, dtype=np.int64)
        ns = self.n_limits + 3 * self.n_contacts
        self.offsets = np.concatenate([[0], np.cumsum(ns)]).astype(np.int64)
        self.a_offsets = np.concatenate([[0], np.cumsum(ns * ns)]).astype(np.int64)
        self.contact_offsets = np.concatenate([[0], np.cumsum(self.n_contacts)]).astype(np.int64)
        self.normal_offsets = np.concatenate([[0], np.cumsum(self.n_limits + self.n_contacts)]).astype(np.int64)
        self.A_flat = np.concatenate(mats) if mats else np.zeros(0)
        self.friction = _ragged("friction", friction, self.n_contacts)
        self.v_min = _ragged("v_min", v_min, self.n_limits + self.n_contacts)
        self.R = _ragged("R", R, ns)
        if np.any(self.friction < 0):
            p = int(np.searchsorted(self.contact_offsets, np.flatnonzero(self.friction < 0)[0], "right") - 1)
            raise ParameterError(f"friction[{p}]: friction coefficients must be non-negative")
        if np.any(self.R <= 0):
            p = int(np.searchsorted(self.offsets, np.flatnonzero(self.R <= 0)[0], "right") - 1)
            raise ParameterError(f"R[{p}]: regularizer entries must be positive")
        bad, code = K.check_psd_batch(self.A_flat, self.a_offsets, ns, self.R, self.offsets, 1e-10, 1e-9)
        if bad >= 0:
            what = {1: "not symmetric", 2: "not positive semidefinite",
                    3: "A + R is not positive definite"}[int(code)]
            raise ParameterError(f"A[{bad}]: {what}")

    @property
    def count(self) -> int:
        """Number of problems."""
        return int(self.n_limits.shape[0])

    @property
    def size(self) -> int:
        """Total length of the concatenated impulse vectors."""
        return int(self.offsets[-1])

    @classmethod
    def repeat(cls, A, *, friction, v_min, R, n_limits=0, count: int) -> "ContactBatch":
        """A batch of ``count`` copies of one problem (for timing)."""
        return cls([A] * count, friction=[friction] * count, v_min=[v_min] * count,
                   R=[R] * count, n_limits=[n_limits] * count)


def _ragged(name, seq, lengths):
    parts = []
    for p, (x, n) in enumerate(zip(seq, lengths)):
        parts.append(as_array(f"{name}[{p}]", x, (int(n),)))
    return np.concatenate(parts) if parts else np.zeros(0)


@dataclass(frozen=True)
class BatchSolution:
    """Concatenated results of a batch solve; :meth:`problem` extracts one."""

    batch: ContactBatch
    f: np.ndarray
    v: np.ndarray
    c: np.ndarray
    status: np.ndarray
    iterations: np.ndarray

    def problem(self, p: int) -> ContactSolution:
        """The :class:`ContactSolution` of problem ``p``."""
        s, e = self.batch.offsets[p], self.batch.offsets[p + 1]
        return ContactSolution(self.f[s:e].copy(), self.v[s:e].copy(), self.c[s:e].copy(),
                               ContactStatus(int(self.status[p])), int(self.iterations[p]))

    @property
    def all_converged(self) -> bool:
        return bool(np.all(self.status == ContactStatus.CONVERGED))
