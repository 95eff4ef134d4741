"""The smooth diagonal contact model's parameters and impulse law (Tassa, Erez & Todorov 2012,
eqs. 16–17): the smooth functions :func:`smax` / :func:`smin`, the regularized inverse of the
diagonal and the activation fade, and :class:`SmoothContactModel` (impulses, row scale and their
derivatives).  The time stepping that uses them is :mod:`contactopt.contact.smooth`, whose module
docstring describes the model."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError
from .geometry import ContactSpace

# --------------------------------------------------------------------------- smooth functions


def smax(x, beta):
    """The paper's smooth ``max(x, 0)``: ``(√(x² + β²) + x) / 2`` (Fig. 1).

    ``> max(x, 0)`` everywhere, ``= β/2`` at 0, error ``≤ β/2`` and ``→ 0`` as
    ``β → 0``; C∞ for ``β > 0``; derivative ``(x/√(x² + β²) + 1)/2 ∈ (0, 1)``.
    Evaluated without cancellation for ``x ≪ −β`` (``β² / (2(√(x²+β²) − x))``).
    """
    x = np.asarray(x, dtype=float)
    beta = np.asarray(beta, dtype=float)
    s = np.hypot(x, beta)
    with np.errstate(divide="ignore", invalid="ignore"):
        neg = 0.5 * beta * beta / (s - x)
    return np.where(x >= 0, 0.5 * (s + x), np.where(s - x > 0, neg, 0.0))


def smin(x, beta):
    """The paper's ``smin(x, β) = β − smax(−x, β)``, a smooth min (Sec. III-D).

    As written in the paper: ``→ min(x, 0) + β`` as ``|x|/β → ∞``, i.e. it
    approximates ``min(x, β)`` for ``x ≫ β`` and ``x + β`` for ``x ≪ −β``; it tends to
    ``min(x, 0)`` as ``β → 0``.  Not used by the friction clamp (module docstring).
    """
    return np.asarray(beta, dtype=float) - smax(-np.asarray(x, dtype=float), beta)


#: regularization of the diagonal: ``1/(A_ii + r)`` with ``r = MOBILITY_FLOOR · max_j A_jj``.  A row
#: whose point barely moves along it (``J_i`` near rounding noise, e.g. two thighs side by side)
#: would otherwise get an impulse ``∝ 1/A_ii`` whose generalized force ``J_iᵀλ ∝ 1/‖J_i‖`` is
#: unbounded even when the row is separating (``smax > 0`` everywhere).  Mass ratios up to 1e6
#: between bodies in contact are unaffected.
MOBILITY_FLOOR = 1e-6


def regularized_inverse(A_diag: np.ndarray) -> np.ndarray:
    """``1 / (A_ii + r)`` per row, ``r = MOBILITY_FLOOR · max A`` (a smooth floor on the mobility)."""
    A_diag = np.asarray(A_diag, dtype=float)
    if not A_diag.size:
        return A_diag.copy()
    return 1.0 / (A_diag + MOBILITY_FLOOR * max(float(A_diag.max()), 0.0) + 1e-300)


def _fade(phi, w0, w1):
    """``a(φ)``: 1 for φ ≤ w0, 0 for φ ≥ w1, quintic smoothstep (C²) in between."""
    t = np.clip((phi - w0) / (w1 - w0), 0.0, 1.0)
    return 1.0 - t * t * t * (10.0 + t * (-15.0 + 6.0 * t))


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class SmoothContactModel:
    """Parameters of the smooth diagonal contact model (module docstring).

    Attributes:
      eta: η ∈ (0, 1], fraction of the diagonal LCP impulse applied (eq. 17).  Paper:
        0.7 for its simulator, 0.4 for its MPC controller's model; default 0.7 (the
        stiffer, more physical value; use 0.4 for a softer planning model).
      beta: β > 0 [m/s], smoothing of smax in velocity units (β/A_ii as an impulse).
        The paper's β = 1 is unit-less and far too large for SI models; default 0.01.
      friction_sharpness: p ≥ 1 of the friction clamp ``c/(c^p + ‖ν̄‖^p)^(1/p)``;
        larger is closer to the hard clamp ``min(‖ν̄‖, μλ)``.  Not in the paper
        (which uses smin, see module docstring); default 2 (C∞).
      friction_scale: multiplies every contact's MuJoCo friction coefficient μ (≥ 0);
        0 gives frictionless contacts.  Default 1.
      w_max: activation distance > 0 [m; rad for hinge limits] passed to
        :func:`contact_space`.  Default 0.1 (as :class:`ConvexContactModel`).
      fade: fraction ∈ (0, 1] of ``[0, w_max]`` over which impulses fade out (C²):
        full impulse for ``φ ≤ (1 − fade)·w_max``.  Default 0.5.
      scaling: the per-row scale ``D_ii`` that turns a velocity error into an impulse
        (:meth:`row_scale`): ``"diagonal"`` is the paper's ``A_ii``; ``"row-sum"`` (default) adds
        the row's coupling to the other active rows, ``Σ_{j≠i} a_j |A_ij|``, which keeps the
        diagonal approximation stable when several contacts push on the same bodies.
    """

    eta: float = 0.7
    beta: float = 0.01
    friction_sharpness: float = 2.0
    friction_scale: float = 1.0
    w_max: float = 0.1
    fade: float = 0.5
    scaling: str = "row-sum"

    def __post_init__(self):
        if self.scaling not in ("row-sum", "diagonal"):
            raise ParameterError(f"SmoothContactModel.scaling must be 'row-sum' or 'diagonal', got {self.scaling!r}")
        for name in ("eta", "beta", "friction_sharpness", "friction_scale", "w_max", "fade"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ParameterError(f"SmoothContactModel.{name} must be a number, got {value!r}")
            v = float(value)
            if not math.isfinite(v):
                raise ParameterError(f"SmoothContactModel.{name} must be finite, got {value!r}")
            object.__setattr__(self, name, v)
        if not 0.0 < self.eta <= 1.0:
            raise ParameterError(f"SmoothContactModel.eta must be in (0, 1], got {self.eta}")
        if not self.beta > 0.0:
            raise ParameterError(f"SmoothContactModel.beta must be positive, got {self.beta}")
        if not self.friction_sharpness >= 1.0:
            raise ParameterError(f"SmoothContactModel.friction_sharpness must be >= 1, got {self.friction_sharpness}")
        if not self.friction_scale >= 0.0:
            raise ParameterError(f"SmoothContactModel.friction_scale must be >= 0, got {self.friction_scale}")
        if not self.w_max > 0.0:
            raise ParameterError(f"SmoothContactModel.w_max must be positive, got {self.w_max}")
        if not 0.0 < self.fade <= 1.0:
            raise ParameterError(f"SmoothContactModel.fade must be in (0, 1], got {self.fade}")

    def activation(self, distance) -> np.ndarray:
        """``a(φ)`` for normal distances ``φ`` (1 near contact, 0 at ``w_max``)."""
        return _fade(np.asarray(distance, dtype=float), (1.0 - self.fade) * self.w_max, self.w_max)

    def impulses(self, space: ContactSpace, b: np.ndarray, A_diag: np.ndarray) -> np.ndarray:
        """``(n,)`` impulses ``f`` (limits, then ``(t1, t2, n)`` per contact) from ``b`` and ``diag(A)``.

        ``b``: ``(n,)`` eq. 15b per row (normal rows with ``φ/h``, tangent rows without).
        """
        f = np.zeros(space.n)
        if not space.n:
            return f
        nrm = space.normal_rows()
        a = self.activation(space.distance)
        inv_A = regularized_inverse(A_diag)
        lam = a * smax(-self.eta * b[nrm], self.beta) * inv_A[nrm]
        f[nrm] = lam
        nc = space.n_contacts
        if nc:
            tan = space.tangent_rows()
            nu_bar = -b[tan] * inv_A[tan]                      # (nc, 2)
            c = self.friction_scale * space.friction * lam[space.n_limits:]
            r = np.hypot(nu_bar[:, 0], nu_bar[:, 1])
            p = self.friction_sharpness
            with np.errstate(divide="ignore", invalid="ignore"):
                if p == 2.0:
                    den = np.hypot(c, r)
                else:
                    big = np.maximum(c, r)
                    den = big * ((c / big) ** p + (r / big) ** p) ** (1.0 / p)
                g = np.where(den > 0, c / den, 0.0)
            f[tan] = nu_bar * g[:, None]
        return f

    def row_scale(self, space: ContactSpace, A: np.ndarray) -> np.ndarray:
        """``(n,)`` scale ``D_ii`` of each row of ``A = J M⁻¹ Jᵀ (n, n)`` (the ``A_diag`` of :meth:`impulses`).

        ``"diagonal"``: ``D_ii = A_ii`` (eq. 16: each row corrects its own error as if alone).
        ``"row-sum"``: ``D_ii = A_ii + Σ_{j≠i} a_j |A_ij|`` with ``a_j`` the activation of row j's
        contact.  Why: the rows' velocity errors after the step are ``b' = (I − η A D⁻¹) b`` for
        the linear part of eq. 17, and with ``D`` the absolute row sums of ``A`` (symmetric,
        positive semidefinite) every eigenvalue of ``A D⁻¹`` lies in ``[0, 1]`` (Gershgorin on its
        columns), so ``b'`` never overshoots, however many coupled contacts there are.  With
        ``A_ii`` alone, two contacts on one body each correct the whole error and together
        overshoot (``2η``): a lying humanoid's arm on the floor oscillated and diverged in eight
        steps.  A contact that shares no body with another keeps ``D_ii = A_ii`` (up to its own
        normal–tangent coupling).
        """
        diag = np.diagonal(A).copy()
        if self.scaling == "diagonal" or not diag.size:
            return diag
        a = self.activation(space.distance)
        nl = space.n_limits
        w = np.concatenate([a[:nl], np.repeat(a[nl:], 3)])
        absA = np.abs(A)
        return diag + absA @ w - np.diagonal(absA) * w

    def activation_derivative(self, distance) -> np.ndarray:
        """``a'(φ)`` [1/m] of :meth:`activation`: ``−30 t²(1 − t)² / (fade · w_max)`` on the fade band."""
        w1 = self.w_max
        w0 = (1.0 - self.fade) * w1
        t = np.clip((np.asarray(distance, dtype=float) - w0) / (w1 - w0), 0.0, 1.0)
        return -30.0 * t * t * (1.0 - t) ** 2 / (w1 - w0)

    def impulse_jacobian(self, space: ContactSpace, b: np.ndarray, A_diag: np.ndarray, A: np.ndarray | None = None):
        """Derivatives of :meth:`impulses` with ``J``, ``A`` and the frames held fixed.

        Normal rows: ``λ = a(φ) smax(−η b_n, β) / A_nn``, so ``∂λ/∂b_n = −η a smax'(−η b_n) / A_nn``
        and ``∂λ/∂φ|_b = a'(φ) smax(−η b_n, β) / A_nn`` (the activation only; ``b_n`` holds
        ``φ/h`` as well, which the caller chains through ``∂b/∂φ``).  Tangent rows of a contact:
        ``ν = ν̄ g``, ``ν̄ = −b_t / A_t``, ``g = c / (c^p + r^p)^{1/p}``, ``r = ‖ν̄‖``, ``c = s μ λ``::

            ∂ν/∂ν̄ = g I − c r^{p−2} / ((c^p + r^p) (c^p + r^p)^{1/p}) ν̄ ν̄ᵀ
            ∂ν/∂c = ν̄ r^p / ((c^p + r^p) (c^p + r^p)^{1/p})

        With ``scaling="row-sum"`` and ``A`` given, ``F_phi`` also holds the path through the row
        scale: ``∂D_ii/∂φ_k = a'(φ_k) Σ_{j ∈ rows(k), j ≠ i} |A_ij|`` (:meth:`row_scale`), and
        ``f`` depends on ``D`` through ``1/D`` in ``λ`` and ``ν̄``.

        Args:
          space: the :class:`ContactSpace` (``n`` rows); b: ``(n,)``; A_diag: ``(n,)`` as in
            :meth:`impulses`; A: ``(n, n)`` ``J M⁻¹ Jᵀ`` (optional, see above).

        Returns:
          ``(F_b, F_phi)``: ``F_b (n, n) = ∂f/∂b`` and ``F_phi (n, n_normal) = ∂f/∂φ`` at fixed
          ``b``, with columns in the order of ``space.normal_rows()`` (= ``space.distance``).
        """
        n = space.n
        nrm = space.normal_rows()
        F_b = np.zeros((n, n))
        F_phi = np.zeros((n, nrm.size))
        if not n:
            return F_b, F_phi
        a = self.activation(space.distance)
        da = self.activation_derivative(space.distance)
        inv_A = regularized_inverse(A_diag)
        x = -self.eta * b[nrm]
        sm = smax(x, self.beta)
        dsm = 0.5 * (x / np.hypot(x, self.beta) + 1.0)
        lam = a * sm * inv_A[nrm]
        dlam_db = -self.eta * a * dsm * inv_A[nrm]
        dlam_dphi = da * sm * inv_A[nrm]
        F_b[nrm, nrm] = dlam_db
        cols = np.arange(nrm.size)
        F_phi[nrm, cols] = dlam_dphi
        through_scale = A is not None and self.scaling == "row-sum"
        if through_scale:
            F_inv = np.zeros((n, n))                  # ∂f/∂(1/D), the same pattern as F_b
            F_inv[nrm, nrm] = a * sm
        nc = space.n_contacts
        if nc:
            nl = space.n_limits
            tan = space.tangent_rows()                                   # (nc, 2)
            inv_A_t = inv_A[tan]
            nu_bar = -b[tan] * inv_A_t                                   # (nc, 2)
            mu = self.friction_scale * space.friction                    # (nc,)
            c = mu * lam[nl:]
            r = np.hypot(nu_bar[:, 0], nu_bar[:, 1])
            p = self.friction_sharpness
            S = c ** p + r ** p                                          # (c^p + r^p)
            den = S ** (1.0 / p)
            ok = den > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                g = np.where(ok, c / den, 0.0)
                dg_dc = np.where(ok, r ** p / (S * den), 0.0)
                if p == 2.0:
                    rp2 = np.ones_like(r)
                else:
                    rp2 = np.where(r > 0, r ** (p - 2.0), 0.0)
                coef = np.where(ok, c * rp2 / (S * den), 0.0)
            # per contact, batched: ∂ν/∂ν̄ (nc, 2, 2) and ∂ν/∂λ (nc, 2), scattered into the blocks
            dnu_dnubar = g[:, None, None] * np.eye(2) - coef[:, None, None] * nu_bar[:, :, None] * nu_bar[:, None, :]
            dnu_dlam = nu_bar * (dg_dc * mu)[:, None]
            j = nl + np.arange(nc)                                       # each contact's normal
            rows, cols = tan[:, :, None], tan[:, None, :]
            F_b[rows, cols] = dnu_dnubar * (-inv_A_t)[:, None, :]
            F_b[tan, nrm[j][:, None]] = dnu_dlam * dlam_db[j][:, None]
            F_phi[tan, j[:, None]] = dnu_dlam * dlam_dphi[j][:, None]
            if through_scale:
                F_inv[rows, cols] = dnu_dnubar * (-b[tan])[:, None, :]
                F_inv[tan, nrm[j][:, None]] = dnu_dlam * (a[j] * sm[j])[:, None]
        if through_scale:
            # ∂D_ii/∂φ_k = a'(φ_k) Σ_{j in rows of k, j ≠ i} |A_ij|; ∂(1/D)/∂D = −1/D²
            nl = space.n_limits
            absA = np.abs(A)
            sums = np.empty((n, nrm.size))
            sums[:, :nl] = absA[:, :nl]
            if space.n_contacts:
                sums[:, nl:] = absA[:, nl:].reshape(n, space.n_contacts, 3).sum(axis=2)
            owner = np.concatenate([np.arange(nl), nl + np.repeat(np.arange(space.n_contacts), 3)])
            sums[np.arange(n), owner] -= absA[np.arange(n), np.arange(n)]   # j ≠ i
            dD_dphi = sums * da[None, :]
            F_phi += (F_inv * (-inv_A * inv_A)[None, :]) @ dD_dphi
        return F_b, F_phi
