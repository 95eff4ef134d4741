"""Active joint limits and contacts of one state, in contact coordinates.

:func:`contact_space` turns a MuJoCo state into the contact-space quantities of
the convex contact model (Todorov 2014, Sec. II): the contact Jacobian ``J``,
the signed normal distances ``w``, the friction coefficients ``μ`` and the
contact frames.  The unknown impulse ``f ∈ Rⁿ`` has ``n = n_l + 3 n_c``
components: the ``n_l`` active joint limits first (one scalar each), then one
``(t1, t2, normal)`` triple per contact, so that the contact velocity is
``v = J · qvel`` and the generalized contact force is ``Jᵀ f``.

Sign conventions
----------------
* Every *normal* row is oriented so that a positive normal velocity separates
  (``d w / dt = (J · qvel)_normal``) and a positive normal impulse pushes apart.
* Contact ``i`` between geoms ``(g1, g2)``: with MuJoCo's contact frame ``F``
  (rows ``t1, t2, n``; ``n`` points from ``g1`` to ``g2``) and the
  translational Jacobians ``Jp(b, p) (3, nv)`` of the geoms' bodies at the
  contact point ``p`` (``∂/∂qvel`` of the velocity of the point of body ``b``
  currently at ``p``)::

      J_i = F · (Jp(body(g2), p) − Jp(body(g1), p))            (3, nv)

  i.e. rows ``t1·Δv, t2·Δv, n·Δv`` of the velocity of ``g2`` relative to ``g1``.
  For smooth convex geometry ``n · Δv`` is exactly the rate of change of
  MuJoCo's contact distance (``p`` is the midpoint of the two witness points,
  and ``p − witness`` is parallel to ``n``, so rotation terms drop out).
* Joint limit of a hinge or slide joint with range ``[lo, hi]`` and coordinate
  ``q`` (dof ``k``): lower ``w = q − lo`` with row ``+e_k``; upper
  ``w = hi − q`` with row ``−e_k``.  ``w`` is in the joint's own units (rad for
  hinges, m for slides) and is compared against ``w_max`` in those units.

What counts as active
---------------------
* Contacts: MuJoCo's own collision detection (``mj_collision``, honouring
  ``contype``/``conaffinity``, ``<exclude>``, ``<pair>``, parent filtering and
  the friction/priority/solmix mixing rules) run with every margin raised to at
  least ``w_max``; contacts with ``dist < w_max`` are kept.  Contacts MuJoCo
  would not instantiate are dropped: ``exclude`` set, or no relative degree of
  freedom (both geoms on the same welded body, e.g. a ``<pair>`` of two static
  geoms, or a mocap body against the world — all-zero Jacobian rows).
* ``condim`` (the contact's, combined by MuJoCo from its two geoms: max, or the
  higher-priority geom's): 1 → frictionless (``μ = 0``); 3, 4, 6 → ``μ = contact.friction[0]``
  (the combined coefficient MuJoCo uses); torsional and rolling friction of
  condim 4/6 are ignored.  The contact still has three rows; with ``μ = 0`` the
  friction cone confines the tangential impulse to zero.
* Joint limits: hinge and slide joints with ``jnt_limited``; a side of the range
  is active when its ``w < w_max`` (both sides can be active for a range
  narrower than ``w_max``: lower row first).  MuJoCo's ``jnt_margin`` is not used
  (``w_max`` replaces it).  Limits of ball and free joints (a cone on the
  rotation angle) and tendon limits are ignored.
* ``opt.disableflags``: ``mjDSBL_CONSTRAINT`` gives an empty contact space;
  ``mjDSBL_CONTACT`` drops the contacts, ``mjDSBL_LIMIT`` the joint limits.
* Flex objects (deformables) are not supported (:class:`ParameterError`).

How margins are handled
-----------------------
The user's model is never modified.  Collision runs on a private copy of the
model and a scratch ``MjData``, cached per thread and keyed weakly on the user's
``MjModel`` object (freed with it; each thread's first call for a model pays
the copy and a scratch ``MjData``).  Mutating one model's arrays from one thread
while another thread calls :func:`contact_space` on it is as unsafe as it is for
MuJoCo itself.  On *every* call the collision- and
kinematics-relevant parameters are re-copied from the user's model
(:data:`SYNCED_FIELDS`: geom friction/margin/gap/condim/contype/conaffinity/
priority/solmix/size/rbound/aabb/pos/quat, body and joint pos/quat/axis,
``qpos0``, ``<pair>`` parameters, the option flags and overrides), so run-time
edits of those fields (e.g. friction randomization) are honoured; edits of any
other field of an already-seen model (mesh data, the kinematic tree, ...) need
:func:`clear_cache`.  Then the copy gets ``geom_margin = max(geom_margin,
w_max)``, ``geom_gap = 0`` (likewise ``pair_margin``/``pair_gap``, and
``opt.o_margin`` under ``mjENBL_OVERRIDE``), and the midphase is disabled (its
per-body bounding boxes are compiled with the original margins).  MuJoCo 4 adds the two geoms'
margins of a pair, so a pair is detected out to ``≥ w_max`` (up to
``2 w_max``); the ``dist < w_max`` filter keeps exactly the contacts closer than
``w_max``.

Only ``data.qpos`` (and ``mocap_pos``/``mocap_quat``) are read; ``data`` is not
modified and need not be up to date (no ``mj_forward`` required).  Positions
are re-evaluated with ``mj_kinematics`` + ``mj_comPos`` + ``mj_collision`` on the
scratch data.

Cost
----
Measured on one core (MuJoCo 4.0, numpy 2): humanoid lying on the floor
(25 contacts) ~110 µs per call; humanoid standing (2 limits, 4 contacts) ~95 µs;
ball with one contact ~65 µs, with none ~25 µs.  Of that, ~12 µs is the field
sync, ~5 µs MuJoCo kinematics + collision, the rest numpy bookkeeping on small
arrays.  The first call per model and thread adds 1-6 ms (model copy and scratch
``MjData``).  Jacobians are vectorized: one ``mj_jacBody`` per distinct body in
contact (not per contact), then the point shift
``Jp(b, p) = Jp(b, x_b) − [p − x_b]ₓ Jr(b)`` and the projection on the frames
are batched matrix products.  The rows equal MuJoCo's own elliptic-cone
``efc_J`` rows of the same contacts (reordered ``n, t1, t2 → t1, t2, n``).
"""

from __future__ import annotations

import copy
import math
import threading
import weakref
from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import NonFiniteError, ParameterError, ShapeError

__all__ = ["ContactSpace", "contact_space", "clear_cache", "SYNCED_FIELDS"]


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class ContactSpace:
    """Active joint limits and contacts of one state, in contact coordinates.

    Row layout of ``J`` (and of the impulse ``f`` and contact velocity
    ``v = J · qvel``): ``n_limits`` limit rows, then ``(t1, t2, normal)`` for each
    contact, ``n = n_limits + 3 n_contacts``.  All arrays are read-only.

    Attributes:
      J: ``(n, nv)`` contact Jacobian (dimensionless for limits; m/rad or m/m for
        contact rows, i.e. maps ``qvel`` to m/s).  Normal rows give the rate of
        change of ``distance`` (positive = separating).
      n_limits: number of active joint limits ``n_l``.
      n_contacts: number of active contacts ``n_c``.
      distance: ``(n_l + n_c,)`` signed normal distance ``w``: limits first (rad for
        hinges, m for slides), then contacts (m); negative = penetration.
      friction: ``(n_c,)`` Coulomb coefficient ``μ`` (MuJoCo's combined
        ``contact.friction[0]``; 0 for condim-1 contacts).
      frames: ``(n_c, 3, 3)`` contact frames, rows ``t1, t2, n`` (world frame,
        orthonormal, right-handed); ``n`` points from ``geoms[i, 0]`` to ``geoms[i, 1]``.
      positions: ``(n_c, 3)`` contact points in world coordinates (m), the midpoint
        between the two geoms' nearest points.
      limit_dofs: ``(n_l,)`` dof index of each limit row (``J[k, limit_dofs[k]] = ±1``).
      geoms: ``(n_c, 2)`` geom ids of each contact.
    """

    J: np.ndarray
    n_limits: int
    n_contacts: int
    distance: np.ndarray
    friction: np.ndarray
    frames: np.ndarray
    positions: np.ndarray
    limit_dofs: np.ndarray
    geoms: np.ndarray

    def __post_init__(self):
        nl, nc = int(self.n_limits), int(self.n_contacts)
        if nl < 0 or nc < 0:
            raise ParameterError(f"ContactSpace: negative counts n_limits={nl}, n_contacts={nc}")
        object.__setattr__(self, "n_limits", nl)
        object.__setattr__(self, "n_contacts", nc)
        n = nl + 3 * nc
        expected = {
            "J": (n, None),
            "distance": (nl + nc,),
            "friction": (nc,),
            "frames": (nc, 3, 3),
            "positions": (nc, 3),
            "limit_dofs": (nl,),
            "geoms": (nc, 2),
        }
        for name, shape in expected.items():
            arr = np.asarray(getattr(self, name))
            if arr.ndim != len(shape) or any(s is not None and s != g for s, g in zip(shape, arr.shape)):
                raise ShapeError(f"ContactSpace.{name}: expected shape {shape}, got {arr.shape}")
            if arr.flags.writeable:
                arr = arr.view()
                arr.flags.writeable = False
            object.__setattr__(self, name, arr)

    @classmethod
    def _trusted(cls, J, n_limits, n_contacts, distance, friction, frames, positions, limit_dofs, geoms):
        """Build from freshly allocated, correctly shaped arrays (no validation, no copies)."""
        self = object.__new__(cls)
        for name, value in (
            ("J", J), ("distance", distance), ("friction", friction), ("frames", frames),
            ("positions", positions), ("limit_dofs", limit_dofs), ("geoms", geoms),
        ):
            value.flags.writeable = False
            object.__setattr__(self, name, value)
        object.__setattr__(self, "n_limits", int(n_limits))
        object.__setattr__(self, "n_contacts", int(n_contacts))
        return self

    @property
    def n(self) -> int:
        """Length of the impulse / contact-velocity vector: ``n_limits + 3 n_contacts``."""
        return self.n_limits + 3 * self.n_contacts

    @property
    def nv(self) -> int:
        """Number of generalized velocities (columns of ``J``)."""
        return self.J.shape[1]

    def normal_rows(self) -> np.ndarray:
        """``(n_l + n_c,)`` indices into ``f`` of the normal components.

        ``[0, …, n_l − 1, n_l + 2, n_l + 5, …, n_l + 3 n_c − 1]`` — the rows the
        selection matrix ``N`` of eq. (10) extracts; aligned with ``distance``.
        """
        return np.concatenate(
            [np.arange(self.n_limits), self.n_limits + 3 * np.arange(self.n_contacts) + 2]
        )

    def tangent_rows(self) -> np.ndarray:
        """``(n_c, 2)`` indices into ``f`` of the two tangent components of each contact."""
        base = self.n_limits + 3 * np.arange(self.n_contacts)
        return np.stack([base, base + 1], axis=1)


# --------------------------------------------------------------------------- cache

#: Model fields re-copied from the user's model into the private collision copy
#: on every call (fields of size zero are skipped).
SYNCED_FIELDS: tuple[str, ...] = (
    "geom_friction", "geom_margin", "geom_gap", "geom_condim", "geom_contype",
    "geom_conaffinity", "geom_priority", "geom_solmix", "geom_size", "geom_rbound",
    "geom_aabb", "geom_pos", "geom_quat",
    "body_pos", "body_quat", "jnt_pos", "jnt_axis", "qpos0",
    "pair_friction", "pair_margin", "pair_gap",
)

_OPT_FIELDS = ("disableflags", "enableflags", "o_margin", "o_friction")

_DSBL_CONSTRAINT = int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
_DSBL_CONTACT = int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
_DSBL_LIMIT = int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
_DSBL_MIDPHASE = int(mujoco.mjtDisableBit.mjDSBL_MIDPHASE)
_ENBL_SLEEP = int(getattr(mujoco.mjtEnableBit, "mjENBL_SLEEP", 0))

# Levi-Civita tensor as a (3, 9) map: (r @ _SKEW).reshape(3, 3) = [r]ₓ, with [r]ₓ w = r × w.
_SKEW = np.zeros((3, 9))
for _i, _j, _k, _sgn in ((0, 1, 2, 1), (1, 2, 0, 1), (2, 0, 1, 1), (0, 2, 1, -1), (2, 1, 0, -1), (1, 0, 2, -1)):
    _SKEW[_j, 3 * _i + _k] = _sgn  # ([r]ₓ)_ik = Σ_j ε_ijk r_j
del _i, _j, _k, _sgn


class _Scratch:
    """Private collision copy of one model, its scratch data, and per-model tables."""

    __slots__ = (
        "model", "data", "opt", "synced", "lim_jnt", "lim_qadr", "lim_dof",
        "geom_bodyid", "body_weldid", "jacp", "jacr",
    )

    def __init__(self, model: mujoco.MjModel):
        self.model = copy.deepcopy(model)
        self.data = mujoco.MjData(self.model)
        self.opt = self.model.opt
        # (name, destination array in the private copy); the user's arrays are fetched
        # per call so that the cache holds no reference to the user's model.
        self.synced = tuple(
            (f, getattr(self.model, f)) for f in SYNCED_FIELDS if getattr(model, f).size
        )
        jt = model.jnt_type
        limited = np.asarray(model.jnt_limited, dtype=bool) & (
            (jt == int(mujoco.mjtJoint.mjJNT_HINGE)) | (jt == int(mujoco.mjtJoint.mjJNT_SLIDE))
        )
        self.lim_jnt = np.flatnonzero(limited)
        self.lim_qadr = model.jnt_qposadr[self.lim_jnt].astype(np.intp)
        self.lim_dof = model.jnt_dofadr[self.lim_jnt].astype(np.intp)
        self.geom_bodyid = model.geom_bodyid.astype(np.intp)
        self.body_weldid = model.body_weldid.astype(np.intp)
        # Per-body Jacobians at the body origin; rows of bodies not in contact are stale
        # and never read; the world body's rows stay zero.
        self.jacp = np.zeros((model.nbody, 3, model.nv))
        self.jacr = np.zeros((model.nbody, 3, model.nv))


_local = threading.local()


def _cache() -> "weakref.WeakKeyDictionary[mujoco.MjModel, _Scratch]":
    c = getattr(_local, "cache", None)
    if c is None:
        c = _local.cache = weakref.WeakKeyDictionary()
    return c


def clear_cache(model: mujoco.MjModel | None = None) -> None:
    """Drop this thread's cached collision copy of ``model`` (of every model if None).

    Needed only after editing a field of an already-used model that is not in
    :data:`SYNCED_FIELDS` (e.g. mesh vertices); other threads keep their copies.
    """
    c = _cache()
    if model is None:
        c.clear()
    else:
        c.pop(model, None)


def _scratch_for(model: mujoco.MjModel, w_max: float) -> _Scratch:
    """The cached private copy of ``model``, re-synced and with margins inflated to ``w_max``."""
    cache = _cache()
    s = cache.get(model)
    if s is None:
        if model.nflex:
            raise ParameterError(
                f"contact_space: the model has {model.nflex} flex object(s); flex contacts are not supported"
            )
        s = _Scratch(model)
        cache[model] = s
    m2 = s.model
    for name, dst in s.synced:
        np.copyto(dst, getattr(model, name))
    opt, opt2 = model.opt, s.opt
    for name in _OPT_FIELDS:
        setattr(opt2, name, getattr(opt, name))
    opt2.enableflags = opt2.enableflags & ~_ENBL_SLEEP  # the scratch data keeps every body awake
    # The midphase tests a body's geoms against bounding boxes precomputed at compile time
    # with the model's own margins, so with inflated margins it would drop the geoms of
    # multi-geom bodies lying within w_max but outside their compiled boxes.
    opt2.disableflags = opt2.disableflags | _DSBL_MIDPHASE
    # Every pair closer than w_max must be reported, and no contact may fall in a gap band.
    np.maximum(m2.geom_margin, w_max, out=m2.geom_margin)
    m2.geom_gap[:] = 0.0
    if m2.npair:
        np.maximum(m2.pair_margin, w_max, out=m2.pair_margin)
        m2.pair_gap[:] = 0.0
    opt2.o_margin = max(opt2.o_margin, w_max)
    return s


# --------------------------------------------------------------------------- main


def _check_inputs(model, data, w_max) -> float:
    if not isinstance(model, mujoco.MjModel):
        raise ParameterError(f"contact_space: model must be a mujoco.MjModel, got {type(model).__name__}")
    if not isinstance(data, mujoco.MjData):
        raise ParameterError(f"contact_space: data must be a mujoco.MjData, got {type(data).__name__}")
    dm = getattr(data, "model", None)
    if dm is not model:
        if dm is not None:
            for attr in ("nq", "nv", "nbody", "ngeom", "njnt", "nmocap"):
                a, b = getattr(dm, attr), getattr(model, attr)
                if a != b:
                    raise ParameterError(
                        f"contact_space: data was made for a different model "
                        f"({attr} = {a} in data's model, {b} in model)"
                    )
        elif data.qpos.shape != (model.nq,) or data.mocap_pos.shape != (model.nmocap, 3):
            raise ParameterError(
                f"contact_space: data does not match model (qpos {data.qpos.shape}, model nq = {model.nq})"
            )
    if isinstance(w_max, (bool, np.bool_)):
        raise ParameterError(f"w_max must be a positive finite number, got {w_max!r}")
    try:
        w = float(w_max)
    except (TypeError, ValueError):
        raise ParameterError(f"w_max must be a positive finite number, got {w_max!r}") from None
    if not (math.isfinite(w) and w > 0):
        raise ParameterError(f"w_max must be a positive finite number, got {w_max!r}")
    return w


def contact_space(model: mujoco.MjModel, data: mujoco.MjData, w_max: float) -> ContactSpace:
    """Active joint limits and contacts at ``data.qpos``, in contact coordinates.

    Args:
      model: the ``MjModel`` (never modified).
      data: an ``MjData`` of ``model`` (or of a model with the same sizes); only
        ``qpos`` and ``mocap_pos``/``mocap_quat`` are read, ``data`` is not modified
        and need not have had ``mj_forward`` run.
      w_max: activation distance (> 0, finite): contacts with signed distance
        ``dist < w_max`` [m] and limit sides with ``w < w_max`` [joint units: rad
        for hinges, m for slides] are active.  Normally the ``w_max`` of the
        regularization schedule (eq. 24).

    Returns:
      :class:`ContactSpace` with ``J (n, nv)``, ``n = n_l + 3 n_c``; rows: limits
      (``±e_dof``), then per contact ``F_i (Jp(b2, p_i) − Jp(b1, p_i))`` with
      ``F_i`` rows ``(t1, t2, n)``.

    Raises:
      ParameterError: ``w_max`` not positive and finite; ``model``/``data`` of the
        wrong type or not matching; a model with flex objects.
      NonFiniteError: ``data.qpos`` contains NaN or infinity.
    """
    w_max = _check_inputs(model, data, w_max)
    qpos = data.qpos
    if not np.isfinite(qpos).all():
        bad = int(np.flatnonzero(~np.isfinite(qpos))[0])
        raise NonFiniteError(f"contact_space: data.qpos contains a non-finite value at index {bad}")
    s = _scratch_for(model, w_max)
    m2, d2 = s.model, s.data
    nv = model.nv
    flags = int(model.opt.disableflags)
    no_constraint = bool(flags & _DSBL_CONSTRAINT)
    use_limits = not no_constraint and not flags & _DSBL_LIMIT
    use_contacts = not no_constraint and not flags & _DSBL_CONTACT

    # ---- joint limits: lower side w = q - lo (row +e_dof), upper side w = hi - q (row -e_dof)
    nl = 0
    if use_limits and s.lim_jnt.size:
        q = qpos[s.lim_qadr]
        rng = model.jnt_range[s.lim_jnt]
        w_pair = np.empty((q.size, 2))
        np.subtract(q, rng[:, 0], out=w_pair[:, 0])
        np.subtract(rng[:, 1], q, out=w_pair[:, 1])
        jj, side = np.nonzero(w_pair < w_max)  # row-major: joint order, lower side first
        nl = jj.size
    if nl:
        lim_dist = w_pair[jj, side]
        lim_dofs = s.lim_dof[jj]
        lim_sign = 1.0 - 2.0 * side
    else:
        lim_dist = np.zeros(0)
        lim_dofs = np.zeros(0, dtype=np.intp)

    # ---- contacts: MuJoCo collision on the private copy with inflated margins
    nc = 0
    if use_contacts:
        np.copyto(d2.qpos, qpos)
        if model.nmocap:
            np.copyto(d2.mocap_pos, data.mocap_pos)
            np.copyto(d2.mocap_quat, data.mocap_quat)
        mujoco.mj_kinematics(m2, d2)
        mujoco.mj_comPos(m2, d2)  # cdof and subtree_com, needed by mj_jacBody
        mujoco.mj_collision(m2, d2)
        if d2.ncon:
            con = d2.contact
            bid = s.geom_bodyid[con.geom]  # (ncon, 2)
            wid = s.body_weldid[bid]
            keep = (con.dist < w_max) & (con.exclude == 0) & (wid[:, 0] != wid[:, 1])
            idx = np.flatnonzero(keep)
            nc = idx.size
    if nc:
        dist = con.dist[idx]
        geoms = con.geom[idx].astype(np.intp)
        pos = con.pos[idx]
        frames = con.frame[idx].reshape(nc, 3, 3)[:, (1, 2, 0), :]  # MuJoCo (n, t1, t2) -> (t1, t2, n)
        mu = con.friction[idx, 0]
        mu[con.dim[idx] == 1] = 0.0
        b = bid[idx]  # (nc, 2) bodies of geom1, geom2

        # One mj_jacBody per distinct body in contact: translational Jacobian at the
        # body origin x_b and rotational Jacobian Jr_b.
        jp, jr = s.jacp, s.jacr
        for body in np.flatnonzero(np.bincount(b.ravel(), minlength=model.nbody)[1:]) + 1:
            mujoco.mj_jacBody(m2, d2, jp[body], jr[body], int(body))
        # Point shift: Jp(b, p) = Jp(b, x_b) - [p - x_b]ₓ Jr_b  (velocity v_b + ω × r).
        r = pos[:, None, :] - d2.xpos[b]  # (nc, 2, 3)
        skew = (r @ _SKEW).reshape(nc, 2, 3, 3)
        jpt = jp[b] - skew @ jr[b]  # (nc, 2, 3, nv)
        Jc = frames @ (jpt[:, 1] - jpt[:, 0])  # (nc, 3, nv): F (Jp(b2, p) - Jp(b1, p))
        # MuJoCo's "no dofs" exclusion (e.g. a mocap body against the world).
        live = Jc.reshape(nc, -1).any(axis=1)
        if not live.all():
            dist, geoms, pos, frames, mu, Jc = (a[live] for a in (dist, geoms, pos, frames, mu, Jc))
            nc = dist.size
    if not nc:
        dist = np.zeros(0)
        geoms = np.zeros((0, 2), dtype=np.intp)
        pos = np.zeros((0, 3))
        frames = np.zeros((0, 3, 3))
        mu = np.zeros(0)
        Jc = np.zeros((0, 3, nv))

    J = np.zeros((nl + 3 * nc, nv)) if nl else np.empty((3 * nc, nv))
    if nl:
        J[np.arange(nl), lim_dofs] = lim_sign
    J[nl:] = Jc.reshape(3 * nc, nv)
    return ContactSpace._trusted(
        J, nl, nc, np.concatenate([lim_dist, dist]) if nl else dist, mu, frames, pos, lim_dofs, geoms
    )
