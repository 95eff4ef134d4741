"""Compliant contact model of inverse-dynamics trajectory optimization (IDTO).

Per contact pair with signed distance ``φ`` [m], normal ``n̂`` (from geom 1 to
geom 2) and relative velocity ``v`` of geom 2 w.r.t. geom 1 at the contact
point, split into ``v_n = n̂·v`` and ``v_t = v − v_n n̂``:

* compliant normal force (softplus, smoothing ``σ`` [m], stiffness ``k`` [N/m])::

      f_c(φ) = σ k log(1 + exp(−φ/σ))          (→ k·max(0, −φ) as σ → 0)

  evaluated through its exact asymptote ``−k φ + σ k log(1 + exp(φ/σ))``, which
  is the same function written without overflow (for ``−φ/σ ≥ 37`` the
  correction is below double precision and ``f_c = −k φ``);
* smoothed Hunt–Crossley dissipation with ``s = v_n / v_d``::

      d(s) = 1 − s          (s < 0, approaching)
             (s − 2)² / 4   (0 ≤ s < 2)
             0              (s ≥ 2)

  and ``f_n = f_c · d``;
* regularized Coulomb friction with stiction velocity ``v_s`` [m/s]::

      f_t = −μ f_n v_t / sqrt(v_s² + ‖v_t‖²).

The force ``n̂ f_n + f_t`` acts on geom 2's body, the opposite on geom 1's.  In
the ``(t1, t2, n)`` contact coordinates of
:func:`contactopt.contact.geometry.contact_space` (rows of ``J`` give exactly
that relative velocity), the generalized force is ``Σ_i J_iᵀ γ_i`` with
``γ_i = (f_t1, f_t2, f_n)``.

Pairs are found with MuJoCo's own collision (through ``contact_space``), out to
the distance where the softplus force is below ``√ε`` [N]::

    φ_max = −σ log(exp(√ε/(σk)) − 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
from numba import njit

from ..errors import ParameterError, as_array, check_instance, check_positive
from .geometry import ContactSpace, contact_space

__all__ = [
    "ContactParameters",
    "CompliantContactModel",
    "ContactForces",
    "softplus_normal_force",
    "hunt_crossley_factor",
    "regularized_friction",
]

_ASYMPTOTE = 37.0  # for −φ/σ beyond this, log1p(exp(φ/σ)) < 1e-16 relative to −φ/σ


@dataclass(frozen=True)
class ContactParameters:
    """Parameters of the compliant contact model (validated on construction).

    Attributes:
      stiffness: ``k`` [N/m], > 0.
      smoothing: ``σ`` [m], > 0 — width of the softplus transition.
      dissipation_velocity: ``v_d`` [m/s], > 0 — Hunt–Crossley velocity scale
        (the normal force vanishes at a separation speed ``2 v_d``).
      stiction_velocity: ``v_s`` [m/s], > 0 — friction regularization.
      friction: ``μ`` (≥ 0), or ``None`` to use MuJoCo's combined coefficient of
        each pair (``contact.friction[0]``).
      force_threshold: force [N] below which a pair is ignored; defines
        ``φ_max``.  Default ``√ε ≈ 1.5e-8``.
    """

    stiffness: float = 1000.0
    smoothing: float = 0.01
    dissipation_velocity: float = 0.1
    stiction_velocity: float = 0.05
    friction: float | None = None
    force_threshold: float = math.sqrt(np.finfo(float).eps)

    def __post_init__(self):
        for name in ("stiffness", "smoothing", "dissipation_velocity", "stiction_velocity", "force_threshold"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)):
                raise ParameterError(f"ContactParameters.{name} must be a positive number, got {v!r}")
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise ParameterError(f"ContactParameters.{name} must be a positive number, got {v!r}") from None
            if not (math.isfinite(f) and f > 0):
                raise ParameterError(f"ContactParameters.{name} must be positive and finite, got {v!r}")
            object.__setattr__(self, name, f)
        if self.friction is not None:
            try:
                mu = float(self.friction)
            except (TypeError, ValueError):
                raise ParameterError(f"ContactParameters.friction must be a number or None, got {self.friction!r}") from None
            if not (math.isfinite(mu) and mu >= 0):
                raise ParameterError(f"ContactParameters.friction must be >= 0 and finite, got {self.friction!r}")
            object.__setattr__(self, "friction", mu)

    @classmethod
    def from_model(cls, model: mujoco.MjModel, time_step: float) -> "ContactParameters":
        """Parameters derived from ``model`` and the planner's time step ``h`` [s].

        With ``g = ‖opt.gravity‖`` [m/s²] (9.81 when the model has no gravity: then only a force
        scale):

        * supported mass ``m`` [kg]: the mass of the kinematic trees (bodies below one child of
          the world) that have an unactuated degree of freedom — a floating base, a free object,
          a passive joint: what actuators alone cannot hold up, so contact may have to.  When
          every tree is fully actuated, the mass of all bodies that move.  ``W = m g`` [N];
        * contact size ``ℓ`` [m]: the thinnest geom on a moving body that can collide (radius of a
          sphere, capsule or cylinder, smallest half-size of a box or ellipsoid, of the bounding
          box of a mesh; planes and height fields excluded); ``stat.meansize`` when there is none;
        * smoothing ``σ = ℓ/4`` [m]: the softplus force falls to 5 % of its value at contact
          3σ = ¾ℓ away from the surface;
        * penetration target ``δ = min(g h², ℓ/2)`` [m]: ``g h²`` is the sag at which a linear
          spring carrying ``W`` has the natural frequency ``√(k/m) = 1/h`` (the finest the
          time step resolves); capped at half the contact size;
        * stiffness ``k = W / (σ log(1 + exp(δ/σ)))`` [N/m]: the softplus force at penetration
          ``δ`` carries ``W`` (``≈ W/δ`` when ``δ ≫ σ``), so the supported mass rests ``δ``
          deep;
        * dissipation velocity ``v_d = g h`` [m/s]: under the weight the Hunt–Crossley damping
          ``c = W/v_d`` gives the supported mass the velocity time constant ``m/c = h``;
        * stiction velocity ``v_s = g h`` [m/s]: regularized friction under the weight is viscous
          with coefficient ``μW/v_s``, time constant ``h/μ``;
        * friction ``None``: each pair's own coefficient, MuJoCo's combination of the geoms'
          ``friction[0]`` (``geom_friction``, or the ``<pair>``'s).

        Args:
          model: the ``MjModel`` (read only).
          time_step: ``h`` [s], > 0.

        Returns:
          :class:`ContactParameters`.

        Raises:
          ParameterError / NonFiniteError: a non-positive or non-finite ``time_step``.
        """
        from ..model import actuation_map

        h = check_positive("ContactParameters.from_model: time_step", time_step)
        g = float(np.linalg.norm(model.opt.gravity))
        if not g > 0:
            g = 9.81
        mass = _supported_mass(model, actuation_map(model).unactuated_dofs)
        if not mass > 0:
            mass = 1.0
        size = _contact_size(model)
        sigma = 0.25 * size
        delta = min(g * h * h, 0.5 * size)
        x = delta / sigma
        softplus = x + math.log1p(math.exp(-x))
        return cls(stiffness=mass * g / (sigma * softplus), smoothing=sigma, dissipation_velocity=g * h,
                   stiction_velocity=g * h, friction=None)

    @property
    def max_distance(self) -> float:
        """``φ_max = −σ log(exp(f_min/(σk)) − 1)`` [m]: beyond it ``f_c < f_min``."""
        x = self.force_threshold / (self.smoothing * self.stiffness)
        return -self.smoothing * math.log(math.expm1(x))


def _supported_mass(model: mujoco.MjModel, unactuated_dofs) -> float:
    """Mass [kg] of the kinematic trees with an unactuated dof, else of every moving body
    (:meth:`ContactParameters.from_model`)."""
    moving = model.body_weldid != 0
    trees = {int(model.body_rootid[model.dof_bodyid[d]]) for d in np.asarray(unactuated_dofs).tolist()}
    if trees:
        mask = np.isin(model.body_rootid, sorted(trees))
        return float(model.body_mass[mask & moving].sum())
    return float(model.body_mass[moving].sum())


def _contact_size(model: mujoco.MjModel) -> float:
    """The thinnest collidable geom on a moving body [m] (:meth:`ContactParameters.from_model`)."""
    T = mujoco.mjtGeom
    out = []
    for g in range(model.ngeom):
        if not (model.geom_contype[g] or model.geom_conaffinity[g]) or model.body_weldid[model.geom_bodyid[g]] == 0:
            continue
        t, s = int(model.geom_type[g]), model.geom_size[g]
        if t in (int(T.mjGEOM_PLANE), int(T.mjGEOM_HFIELD)):
            continue
        if t in (int(T.mjGEOM_SPHERE), int(T.mjGEOM_CAPSULE)):
            out.append(s[0])
        elif t == int(T.mjGEOM_CYLINDER):
            out.append(min(s[0], s[1]))
        elif t in (int(T.mjGEOM_BOX), int(T.mjGEOM_ELLIPSOID)):
            out.append(min(s[:3]))
        else:  # mesh, SDF: the geom's bounding box
            out.append(min(model.geom_aabb[g, 3:]))
    out = [float(x) for x in out if x > 0]
    return min(out) if out else max(float(model.stat.meansize), 1e-3)


# --------------------------------------------------------------------------- scalar laws


def softplus_normal_force(phi, stiffness: float, smoothing: float):
    """Compliant normal force ``f_c(φ) = σ k log(1 + exp(−φ/σ))`` and ``df_c/dφ``.

    Args:
      phi: signed distance(s) [m], any shape (negative = penetration).
      stiffness: ``k`` [N/m]; smoothing: ``σ`` [m].

    Returns:
      ``(f_c, df_c/dφ)`` arrays shaped like ``phi``; ``f_c ≥ 0`` [N] and
      ``df_c/dφ = −k / (1 + exp(φ/σ)) ∈ (−k, 0)`` [N/m].  For ``−φ/σ ≥ 37`` the
      exact asymptote ``f_c = −k φ`` is returned (identical in double precision).
    """
    phi = np.asarray(phi, dtype=float)
    x = -phi / smoothing
    # softplus(x) = max(x, 0) + log1p(exp(−|x|)) — stable for any x.
    sp = np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))
    sp = np.where(x >= _ASYMPTOTE, x, sp)
    f = smoothing * stiffness * sp
    # sigmoid(x) computed stably
    ex = np.exp(-np.abs(x))
    sig = np.where(x >= 0, 1.0 / (1.0 + ex), ex / (1.0 + ex))
    return f, -stiffness * sig


def hunt_crossley_factor(vn, dissipation_velocity: float):
    """Smoothed Hunt–Crossley factor ``d(s)``, ``s = v_n / v_d``, and ``dd/dv_n``.

    ``d = 1 − s`` for ``s < 0``; ``(s − 2)²/4`` for ``0 ≤ s < 2``; ``0`` for
    ``s ≥ 2``.  ``d`` is C¹ (slope ``−1/v_d`` at ``s = 0``, 0 at ``s = 2``).

    Returns:
      ``(d, dd/dv_n)`` shaped like ``vn`` (``d`` dimensionless, derivative in s/m).
    """
    s = np.asarray(vn, dtype=float) / dissipation_velocity
    d = np.where(s < 0, 1.0 - s, np.where(s < 2.0, 0.25 * (s - 2.0) ** 2, 0.0))
    dd = np.where(s < 0, -1.0, np.where(s < 2.0, 0.5 * (s - 2.0), 0.0)) / dissipation_velocity
    return d, dd


def regularized_friction(vt, fn, mu, stiction_velocity: float):
    """Regularized Coulomb friction ``f_t = −μ f_n v_t / sqrt(v_s² + ‖v_t‖²)``.

    Args:
      vt: ``(m, 2)`` tangential slip velocities [m/s] (contact-frame components).
      fn: ``(m,)`` normal forces [N]; mu: ``(m,)`` or scalar friction coefficients.
      stiction_velocity: ``v_s`` [m/s].

    Returns:
      ``(f_t (m, 2), ∂f_t/∂v_t (m, 2, 2), ∂f_t/∂f_n (m, 2))``.  ``‖f_t‖ < μ f_n``;
      ``f_t · v_t ≤ 0`` (opposes sliding).
    """
    vt = np.asarray(vt, dtype=float)
    fn = np.asarray(fn, dtype=float)
    mu = np.broadcast_to(np.asarray(mu, dtype=float), fn.shape)
    den = np.sqrt(stiction_velocity ** 2 + np.sum(vt * vt, axis=-1))  # (m,)
    c = mu / den  # (m,)
    ft = -(c * fn)[:, None] * vt
    # d/dv_t [v_t / den] = I/den − v_t v_tᵀ/den³
    eye = np.eye(2)[None]
    dvt = -(c * fn)[:, None, None] * (eye - vt[:, :, None] * vt[:, None, :] / (den ** 2)[:, None, None])
    dfn = -c[:, None] * vt
    return ft, dvt, dfn


# Scalar versions of the three laws for compiled loops (:func:`contactopt.contact.compliant_batch._forces_kernel`):
# the same formulas, operation for operation, as the array functions above.


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def softplus_normal_force_scalar(phi, stiffness, smoothing):
    """:func:`softplus_normal_force` of one signed distance: ``(f_c, df_c/dφ)``."""
    x = -phi / smoothing
    ax = abs(x)
    ex = math.exp(-ax)
    if x >= _ASYMPTOTE:
        sp = x
    else:
        sp = max(x, 0.0) + math.log1p(ex)
    sig = 1.0 / (1.0 + ex) if x >= 0 else ex / (1.0 + ex)
    return smoothing * stiffness * sp, -stiffness * sig


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def hunt_crossley_factor_scalar(vn, dissipation_velocity):
    """:func:`hunt_crossley_factor` of one normal velocity: ``(d, dd/dv_n)``."""
    s = vn / dissipation_velocity
    if s < 0:
        return 1.0 - s, -1.0 / dissipation_velocity
    if s < 2.0:
        return 0.25 * (s - 2.0) ** 2, 0.5 * (s - 2.0) / dissipation_velocity
    return 0.0, 0.0 / dissipation_velocity


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ContactForces:
    """Compliant contact forces at one state ``(q, v)``.

    Attributes:
      generalized: ``(nv,)`` generalized contact force ``Σ J_iᵀ γ_i`` [N or N·m].
      gamma: ``(n_c, 3)`` contact forces ``(f_t1, f_t2, f_n)`` [N] in each frame.
      space: the :class:`ContactSpace` the forces were computed on (its limit rows unused).
      dforce_dv: ``(nv, nv)`` ``∂generalized/∂v`` at fixed ``q`` (exact), or None if not requested.
    """

    generalized: np.ndarray
    gamma: np.ndarray
    space: ContactSpace
    dforce_dv: np.ndarray | None = None


class CompliantContactModel:
    """The compliant contact model of one task: parameters plus an optional body filter.

    Args:
      model: the ``MjModel`` whose geoms collide (MuJoCo collision filtering —
        contype/conaffinity, exclude, pairs — applies).
      params: :class:`ContactParameters` (defaults if None).
      bodies: optional body names; when given, only pairs with at least one geom
        on one of these bodies produce a force.

    Raises:
      ParameterError: ``params`` not a ContactParameters, or an unknown body name.
    """

    def __init__(self, model: mujoco.MjModel, params: ContactParameters | None = None,
                 *, bodies=None):
        self.model = check_instance("CompliantContactModel: model", model, mujoco.MjModel)
        self.params = check_instance("CompliantContactModel: params", params, ContactParameters, ContactParameters)
        self._body_mask = None
        if bodies is not None:
            if isinstance(bodies, str):
                bodies = [bodies]
            mask = np.zeros(model.nbody, dtype=bool)
            for name in bodies:
                bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, str(name))
                if bid < 0:
                    known = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, i) for i in range(model.nbody)]
                    raise ParameterError(f"CompliantContactModel: unknown body {name!r} (bodies: {known})")
                mask[bid] = True
            self._body_mask = mask
        self._geom_body = model.geom_bodyid.astype(np.intp)

    @property
    def max_distance(self) -> float:
        """Query distance ``φ_max`` [m] (see :attr:`ContactParameters.max_distance`)."""
        return self.params.max_distance

    def forces(self, data: mujoco.MjData, qvel=None, *, derivative: bool = False) -> ContactForces:
        """Compliant contact forces at configuration ``data.qpos`` and velocity ``qvel``.

        Args:
          data: ``MjData`` of :attr:`model`; only ``qpos`` (and mocap poses) are read.
          qvel: ``(nv,)`` generalized velocity (default ``data.qvel``).
          derivative: also return ``∂F/∂v (nv, nv) = Σ J_iᵀ (∂γ_i/∂v_c) J_i``.

        Returns:
          :class:`ContactForces`.
        """
        p = self.params
        model = self.model
        nv = model.nv
        v = data.qvel if qvel is None else as_array("qvel", qvel, (nv,))
        cs = contact_space(model, data, p.max_distance)
        nl, nc = cs.n_limits, cs.n_contacts
        keep = slice(None)
        if nc and self._body_mask is not None:
            b = self._geom_body[cs.geoms]
            keep = np.flatnonzero(self._body_mask[b].any(axis=1))
        Jc = cs.J[nl:].reshape(nc, 3, nv)[keep]
        phi = cs.distance[nl:][keep]
        mu = cs.friction[keep] if p.friction is None else np.full(phi.shape, p.friction)
        m = phi.size
        if m == 0:
            return ContactForces(np.zeros(nv), np.zeros((0, 3)), cs, np.zeros((nv, nv)) if derivative else None)
        vc = Jc @ v  # (m, 3): t1, t2, n
        fc, _ = softplus_normal_force(phi, p.stiffness, p.smoothing)
        d, dd = hunt_crossley_factor(vc[:, 2], p.dissipation_velocity)
        fn = fc * d
        ft, dft_dvt, dft_dfn = regularized_friction(vc[:, :2], fn, mu, p.stiction_velocity)
        gamma = np.concatenate([ft, fn[:, None]], axis=1)
        F = np.einsum("mkv,mk->v", Jc, gamma)
        dF = None
        if derivative:
            G = np.zeros((m, 3, 3))  # ∂γ/∂v_c
            dfn_dvn = fc * dd
            G[:, 2, 2] = dfn_dvn
            G[:, :2, :2] = dft_dvt
            G[:, :2, 2] = dft_dfn * dfn_dvn[:, None]
            dF = np.einsum("mkv,mkl,mlw->vw", Jc, G, Jc)
        return ContactForces(F, gamma, cs, dF)

    def generalized_force(self, data: mujoco.MjData, qvel=None) -> np.ndarray:
        """``(nv,)`` generalized contact force at ``(data.qpos, qvel)``; see :meth:`forces`."""
        return self.forces(data, qvel).generalized
