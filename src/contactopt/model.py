"""Loading MuJoCo models and the model helpers every solver shares.

* :func:`load_model` — a bundled name, an MJCF/URDF/MJB file, or an ``MjModel``.
* State packing — ``x = [qpos (nq), qvel (nv), act (na)]`` and its tangent-space
  difference ``dx = [dq (nv), dv (nv), dact (na)]`` (the convention of
  ``mjd_transitionFD``).
* Configuration-manifold arithmetic through MuJoCo's ``mj_integratePos`` and
  ``mj_differentiatePos`` (quaternions of free and ball joints handled exactly).
* The actuation map ``B`` from MuJoCo's actuator transmission and its
  unactuated complement.
* Time-step handling (``with_timestep``, ``num_steps``) and the planner's copy of a model
  (``planner_model_copy``: a time step and an integrator MuJoCo's derivatives support).
"""

from __future__ import annotations

import copy
import os
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Union

import mujoco
import numpy as np

from .errors import (
    ModelLoadError,
    ModelNotFoundError,
    ModelNotice,
    ParameterError,
    as_array,
    check_nonnegative,
    check_positive,
)
from .models import BUNDLED_MODELS

__all__ = [
    "ModelLike",
    "load_model",
    "model_name",
    "reset_to_keyframe",
    "State",
    "state_size",
    "tangent_size",
    "pack_state",
    "unpack_state",
    "get_state",
    "set_state",
    "integrate_position",
    "position_difference",
    "state_integrate",
    "state_difference",
    "ActuationMap",
    "actuator_moment_matrix",
    "actuation_map",
    "actuator_force_ranges",
    "with_timestep",
    "planner_model_copy",
    "PLANNER_INTEGRATOR",
    "DERIVATIVE_UNSUPPORTED_INTEGRATORS",
    "integrator_name",
    "num_steps",
    "total_mass",
    "MAX_STATE_VALUE",
    "reset_warnings",
    "new_reset_warnings",
    "check_state_range",
]

ModelLike = Union[str, os.PathLike, mujoco.MjModel]

_SUFFIXES = (".xml", ".mjcf", ".urdf", ".mjb")


# --------------------------------------------------------------------------- loading


def load_model(name_or_path: ModelLike, *, timestep: float | None = None) -> mujoco.MjModel:
    """Load a MuJoCo model.

    Args:
      name_or_path: a bundled model name (see ``contactopt models``), a path to
        an MJCF (``.xml``/``.mjcf``), URDF (``.urdf``) or compiled (``.mjb``) file,
        or an existing ``mujoco.MjModel`` (returned as a copy).
      timestep: optional override of ``model.opt.timestep`` in seconds (> 0).

    Returns:
      A freshly compiled ``mujoco.MjModel``; the model's name is recorded so that
      :func:`model_name` can report where it came from.

    Raises:
      ModelNotFoundError: unknown bundled name, the file does not exist, an empty name, or
        ``name_or_path`` is not a str, path or ``MjModel`` (e.g. None).
      ModelLoadError: MuJoCo could not parse or compile the file (its message is included), or
        the compiled time step is not positive (``<option timestep="nan"/>``) and no ``timestep`` is given.
      ParameterError: ``timestep`` is not positive.
    """
    if isinstance(name_or_path, mujoco.MjModel):
        model = copy.deepcopy(name_or_path)
        label = model_name(name_or_path)
    else:
        path, label = _resolve(name_or_path)
        try:
            if path.suffix.lower() == ".mjb":
                model = mujoco.MjModel.from_binary_path(str(path))
            else:
                model = mujoco.MjModel.from_xml_path(str(path))
        except ValueError as exc:
            msg = str(exc).strip().replace("\n", " ")
            raise ModelLoadError(f"could not load model file {path}: {msg}") from None
    if timestep is not None:
        model.opt.timestep = check_positive("timestep", timestep)
    elif not (np.isfinite(model.opt.timestep) and model.opt.timestep > 0):  # MuJoCo compiles nan or -1
        raise ModelLoadError(f"model {label}: timestep must be a positive number, got {model.opt.timestep!r} "
                             "(fix <option timestep> or pass timestep=...)")
    _MODEL_LABELS[model] = label
    return model


# Names of loaded models; MjModel has no free-form attribute to carry one.
_MODEL_LABELS: "weakref.WeakKeyDictionary[mujoco.MjModel, str]" = weakref.WeakKeyDictionary()


def model_name(model: mujoco.MjModel) -> str:
    """Bundled name or file stem that ``model`` was loaded from, else the MJCF ``model`` attribute."""
    label = _MODEL_LABELS.get(model)
    if label:
        return label
    raw = bytes(model.names[: 64])
    return raw.split(b"\0", 1)[0].decode(errors="replace") or "model"


def _resolve(name_or_path) -> tuple[Path, str]:
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ModelNotFoundError(
            f"model must be a bundled name, a path or a mujoco.MjModel, got {type(name_or_path).__name__} "
            f"{name_or_path!r:.80}")
    text = os.fspath(name_or_path)
    if not isinstance(text, str):
        raise ModelNotFoundError(f"model must be a name or a path, got {name_or_path!r}")
    if not text.strip():
        raise ModelNotFoundError(f"model name is empty (got {text!r}); bundled models: {', '.join(BUNDLED_MODELS)}")
    if text in BUNDLED_MODELS:
        return BUNDLED_MODELS[text].path, text
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "~user" of a user that does not exist: no home directory to expand
        path = Path(text)
    if path.is_file():
        return path, path.stem
    if path.is_dir():
        raise ModelNotFoundError(f"model path {path} is a directory, not an MJCF/URDF file")
    looks_like_path = os.sep in text or "/" in text or path.suffix.lower() in _SUFFIXES
    if looks_like_path:
        raise ModelNotFoundError(f"model file not found: {path}")
    names = ", ".join(BUNDLED_MODELS)
    raise ModelNotFoundError(
        f"unknown model {text!r}: not a bundled model ({names}) and no such file"
    )


def reset_to_keyframe(model: mujoco.MjModel, data: mujoco.MjData, keyframe: str | int | None = "home") -> None:
    """Reset ``data`` to a keyframe (by name or index), or to ``qpos0`` if ``keyframe`` is None.

    A missing keyframe name falls back to ``qpos0`` only when it is the default
    ``"home"``; any other missing name raises :class:`ParameterError`.
    """
    if keyframe is None:
        mujoco.mj_resetData(model, data)
        return
    if isinstance(keyframe, (int, np.integer)):
        if not 0 <= keyframe < model.nkey:
            raise ParameterError(f"keyframe index {keyframe} out of range (model has {model.nkey})")
        mujoco.mj_resetDataKeyframe(model, data, int(keyframe))
        return
    key_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, keyframe)
    if key_id < 0:
        if keyframe == "home":
            mujoco.mj_resetData(model, data)
            return
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_KEY, i) for i in range(model.nkey)]
        raise ParameterError(f"model has no keyframe {keyframe!r} (keyframes: {names or 'none'})")
    mujoco.mj_resetDataKeyframe(model, data, key_id)


def total_mass(model: mujoco.MjModel) -> float:
    """Total mass of all bodies in kg."""
    return float(model.body_subtreemass[0])


# --------------------------------------------------------------------------- states


class State(NamedTuple):
    """A physical state split into its parts: ``qpos (nq,)``, ``qvel (nv,)``, ``act (na,)``."""

    qpos: np.ndarray
    qvel: np.ndarray
    act: np.ndarray


def state_size(model: mujoco.MjModel) -> int:
    """Length of a packed state: ``nq + nv + na``."""
    return model.nq + model.nv + model.na


def tangent_size(model: mujoco.MjModel) -> int:
    """Length of a tangent-space state difference: ``2 nv + na`` (as in ``mjd_transitionFD``)."""
    return 2 * model.nv + model.na


def pack_state(model: mujoco.MjModel, qpos, qvel=None, act=None) -> np.ndarray:
    """Pack ``x = [qpos; qvel; act]``.

    Args:
      qpos: ``(nq,)`` generalized positions (quaternions are normalized).
      qvel: ``(nv,)`` generalized velocities; zeros if None.
      act: ``(na,)`` actuator activations; zeros if None.

    Returns:
      ``(nq + nv + na,)`` state vector.
    """
    q = as_array("qpos", qpos, (model.nq,)).copy()
    mujoco.mj_normalizeQuat(model, q)
    v = np.zeros(model.nv) if qvel is None else as_array("qvel", qvel, (model.nv,))
    a = np.zeros(model.na) if act is None else as_array("act", act, (model.na,))
    return np.concatenate([q, v, a])


def unpack_state(model: mujoco.MjModel, x) -> State:
    """Split ``x (nq + nv + na,)`` into a :class:`State` (views into a validated copy)."""
    x = as_array("state", x, (state_size(model),))
    nq, nv = model.nq, model.nv
    return State(x[:nq], x[nq:nq + nv], x[nq + nv:])


def get_state(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """Packed state ``[qpos; qvel; act]`` of ``data`` (a copy)."""
    return np.concatenate([data.qpos, data.qvel, data.act])


def set_state(model: mujoco.MjModel, data: mujoco.MjData, x) -> None:
    """Write a packed state into ``data`` (validated: shape ``(nq+nv+na,)``, finite)."""
    s = unpack_state(model, x)
    data.qpos[:] = s.qpos
    data.qvel[:] = s.qvel
    data.act[:] = s.act


# --------------------------------------------------------------------------- manifold


def integrate_position(model: mujoco.MjModel, qpos, qvel, dt: float = 1.0) -> np.ndarray:
    """Integrate positions on the configuration manifold: ``q' = q ⊕ (v·dt)``.

    Hinge and slide coordinates add ``v·dt``; free-joint translations add the
    world-frame velocity; quaternions (free and ball joints) are rotated by
    ``exp(ω·dt/2)`` with ω in the joint's local frame (``mj_integratePos``).

    Args:
      qpos: ``(nq,)`` or ``(T, nq)``.
      qvel: ``(nv,)`` or ``(T, nv)`` (same leading shape as ``qpos``).
      dt: time step in seconds (any finite number; negative integrates backwards).

    Returns:
      Array shaped like ``qpos``.
    """
    q, v, batch = _paired("qpos", qpos, model.nq, "qvel", qvel, model.nv)
    dt = float(dt)
    out = q.copy()
    for i in range(out.shape[0]):
        mujoco.mj_integratePos(model, out[i], v[i], dt)
    return out if batch else out[0]


def position_difference(model: mujoco.MjModel, qpos0, qpos1, dt: float = 1.0) -> np.ndarray:
    """Velocity that takes ``qpos0`` to ``qpos1`` in time ``dt``: ``v = (q1 ⊖ q0) / dt``.

    Exact inverse of :func:`integrate_position`:
    ``integrate_position(q0, position_difference(q0, q1, dt), dt) == q1``.
    Quaternion parts use the rotation ``conj(q0)·q1`` as an axis-angle vector
    (``mj_differentiatePos``).

    Args:
      qpos0, qpos1: ``(nq,)`` or ``(T, nq)``.
      dt: positive time in seconds.

    Returns:
      ``(nv,)`` or ``(T, nv)`` velocities.
    """
    q0, q1, batch = _paired("qpos0", qpos0, model.nq, "qpos1", qpos1, model.nq)
    dt = check_positive("dt", dt)
    out = np.empty((q0.shape[0], model.nv))
    for i in range(q0.shape[0]):
        mujoco.mj_differentiatePos(model, out[i], dt, q0[i], q1[i])
    return out if batch else out[0]


def state_integrate(model: mujoco.MjModel, x, dx) -> np.ndarray:
    """``x ⊕ dx`` for a packed state and a tangent vector ``dx = [dq; dv; dact]`` (2nv+na)."""
    s = unpack_state(model, x)
    dx = as_array("dx", dx, (tangent_size(model),))
    nv = model.nv
    q = integrate_position(model, s.qpos, dx[:nv], 1.0)
    return np.concatenate([q, s.qvel + dx[nv:2 * nv], s.act + dx[2 * nv:]])


def state_difference(model: mujoco.MjModel, x0, x1) -> np.ndarray:
    """Tangent vector ``dx = x1 ⊖ x0`` of length ``2nv + na``, the inverse of :func:`state_integrate`."""
    s0, s1 = unpack_state(model, x0), unpack_state(model, x1)
    dq = position_difference(model, s0.qpos, s1.qpos, 1.0)
    return np.concatenate([dq, s1.qvel - s0.qvel, s1.act - s0.act])


def _paired(name_a, a, na, name_b, b, nb):
    a = np.asarray(a, dtype=np.float64)
    batch = a.ndim == 2
    if batch:
        a = as_array(name_a, a, (None, na))
        b = as_array(name_b, b, (a.shape[0], nb))
    else:
        a = as_array(name_a, a, (na,))[None]
        b = as_array(name_b, b, (nb,))[None]
    return a, b, batch


# --------------------------------------------------------------------------- actuation


def actuator_moment_matrix(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """Dense actuator moment matrix ``(nu, nv)`` from ``data`` (after ``mj_forward`` or ``mj_fwdPosition``).

    Row ``i`` maps actuator ``i``'s scalar force to generalized forces:
    ``qfrc_actuator = momentᵀ · actuator_force``.
    """
    moment = np.zeros((model.nu, model.nv))
    if model.nu:
        mujoco.mju_sparse2dense(
            moment, data.actuator_moment, data.moment_rownnz, data.moment_rowadr, data.moment_colind
        )
    return moment


@dataclass(frozen=True)
class ActuationMap:
    """The actuation map of a model at a configuration.

    Attributes:
      B: ``(nv, nu)`` with ``qfrc_actuator = B · actuator_force`` (the transposed
        moment matrix: gears, joint and tendon transmissions included).  For
        plain motors (gain 1, no bias, no activation dynamics)
        ``actuator_force = ctrl`` so ``τ = B u``.
      control_gain: ``(nv, nu)`` ``∂qfrc_actuator/∂ctrl`` for actuators whose force is
        affine in ctrl without dynamics: ``B · diag(gainprm[:, 0])``; columns of
        actuators with activation dynamics are zero (their force depends on ``act``).
      unactuated_basis: ``(nv, nv - rank B)`` orthonormal basis ``Z`` of the null space
        of ``Bᵀ``; ``Zᵀ τ`` is the part of a generalized force no actuator can produce.
      actuated_dofs: DoF indices with a nonzero row in ``B``.
      unactuated_dofs: DoF indices whose row of ``B`` is zero (e.g. a floating base, a free object).
      is_selection: True when ``Z`` spans exactly the coordinate axes of
        ``unactuated_dofs`` (true for joint transmissions), so ``τ[unactuated_dofs]``
        is the unactuated force.
    """

    B: np.ndarray
    control_gain: np.ndarray
    unactuated_basis: np.ndarray
    actuated_dofs: np.ndarray
    unactuated_dofs: np.ndarray
    is_selection: bool

    @property
    def rank(self) -> int:
        """Rank of ``B`` (number of independently actuated directions)."""
        return self.B.shape[0] - self.unactuated_basis.shape[1]


def actuator_force_ranges(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
    """Force range ``(lo (nu,), hi (nu,))`` of each actuator [N or N·m] (±∞ where it has none).

    ``actuator_forcerange`` for force-limited actuators; for ctrl-limited actuators whose force
    is ``gain · ctrl`` (fixed gain, no bias, no activation dynamics) also ``gain ·
    actuator_ctrlrange`` (the intersection where both apply).
    """
    nu = model.nu
    lo, hi = np.full(nu, -np.inf), np.full(nu, np.inf)
    for i in range(nu):
        if model.actuator_forcelimited[i]:
            lo[i], hi[i] = model.actuator_forcerange[i]
        affine = (int(model.actuator_gaintype[i]) == int(mujoco.mjtGain.mjGAIN_FIXED)
                  and int(model.actuator_biastype[i]) == int(mujoco.mjtBias.mjBIAS_NONE)
                  and int(model.actuator_dyntype[i]) == int(mujoco.mjtDyn.mjDYN_NONE))
        if model.actuator_ctrllimited[i] and affine:
            c = model.actuator_gainprm[i, 0] * model.actuator_ctrlrange[i]
            lo[i], hi[i] = max(lo[i], float(c.min())), min(hi[i], float(c.max()))
    return lo, hi


def actuation_map(model: mujoco.MjModel, qpos=None, data: mujoco.MjData | None = None,
                  *, tol: float = 1e-9) -> ActuationMap:
    """Compute the :class:`ActuationMap` at configuration ``qpos`` (default: ``qpos0``).

    Uses MuJoCo's transmission (``mj_fwdPosition`` + ``mj_transmission`` are run
    by ``mj_fwdPosition``), so gears, site and tendon transmissions are honoured;
    for joint transmissions the map does not depend on ``qpos``.

    Args:
      qpos: ``(nq,)`` configuration; ignored when ``data`` is given.
      data: an ``MjData`` on which position-dependent quantities are already computed.
      tol: singular-value threshold (relative to the largest) for the rank of ``B``.
    """
    if data is None:
        data = mujoco.MjData(model)
        if qpos is not None:
            data.qpos[:] = as_array("qpos", qpos, (model.nq,))
        mujoco.mj_fwdPosition(model, data)
    B = actuator_moment_matrix(model, data).T.copy()
    gain = np.where(
        (model.actuator_gaintype == int(mujoco.mjtGain.mjGAIN_FIXED))
        & (model.actuator_dyntype == int(mujoco.mjtDyn.mjDYN_NONE)),
        model.actuator_gainprm[:, 0],
        0.0,
    )
    control_gain = B * gain[None, :]
    nv = model.nv
    if model.nu:
        u, s, _ = np.linalg.svd(B, full_matrices=True)
        rank = int(np.sum(s > tol * max(s.max(initial=0.0), 1e-300))) if s.size else 0
        Z = u[:, rank:].copy()
    else:
        Z = np.eye(nv)
    row_norm = np.abs(B).sum(axis=1) if model.nu else np.zeros(nv)
    scale = max(np.abs(B).max(initial=0.0), 1.0)
    unact = np.flatnonzero(row_norm <= tol * scale)
    act = np.flatnonzero(row_norm > tol * scale)
    is_selection = Z.shape[1] == unact.size and (
        unact.size == 0 or np.allclose(np.abs(Z[unact, :].T @ Z[unact, :]), np.eye(unact.size), atol=1e-8)
    )
    if is_selection and unact.size:
        Z = np.zeros((nv, unact.size))
        Z[unact, np.arange(unact.size)] = 1.0
    return ActuationMap(B, control_gain, Z, act, unact, bool(is_selection))


# --------------------------------------------------------------------------- time


def with_timestep(model: mujoco.MjModel, timestep: float) -> mujoco.MjModel:
    """A copy of ``model`` with ``opt.timestep = timestep`` (seconds, > 0); ``model`` is untouched.

    Used to give a planner a coarser step than the plant (e.g. plant 2 ms, planner 8 ms).
    """
    h = check_positive("timestep", timestep)
    out = copy.deepcopy(model)
    out.opt.timestep = h
    _MODEL_LABELS[out] = model_name(model)
    return out


#: the integrator of a planner's copy of a model whose own integrator MuJoCo's derivatives reject
#: (see :func:`planner_model_copy`)
PLANNER_INTEGRATOR = int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST)

#: integrators that ``mjd_transitionFD`` and ``mjd_inverseFD`` end with a fatal error ("RK4
#: integrator is not supported", MuJoCo 4.0), as ``mj_inverse`` does with ``mjENBL_INVDISCRETE``;
#: Euler, implicit and implicitfast are supported by all three
DERIVATIVE_UNSUPPORTED_INTEGRATORS = (int(mujoco.mjtIntegrator.mjINT_RK4),)

_INTEGRATOR_NAMES = {int(mujoco.mjtIntegrator.mjINT_EULER): "Euler", int(mujoco.mjtIntegrator.mjINT_RK4): "RK4",
                     int(mujoco.mjtIntegrator.mjINT_IMPLICIT): "implicit",
                     int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST): "implicitfast"}


def integrator_name(model_or_code) -> str:
    """``"Euler"``, ``"RK4"``, ``"implicit"`` or ``"implicitfast"`` (the spelling of MJCF's
    ``<option integrator="...">``) for an ``MjModel`` or an ``mjtIntegrator`` code."""
    code = int(model_or_code.opt.integrator) if isinstance(model_or_code, mujoco.MjModel) else int(model_or_code)
    return _INTEGRATOR_NAMES.get(code, f"integrator {code}")


def planner_model_copy(model: mujoco.MjModel, timestep: float | None = None, *,
                       notice: bool = True) -> mujoco.MjModel:
    """The copy of a plant model a planner plans on: optionally a new time step, and always an
    integrator that MuJoCo's derivatives support.  ``model`` (the plant) is untouched.

    MuJoCo's ``mjd_transitionFD`` (iLQG's derivatives) and ``mjd_inverseFD`` (IDTO's) end with a
    fatal error on the RK4 integrator, as ``mj_inverse`` does with ``mjENBL_INVDISCRETE``;
    inside the compiled loops that ends the process.  The copy of an RK4 model therefore
    integrates with :data:`PLANNER_INTEGRATOR`, ``implicitfast``.  Of the integrators all three
    accept (Euler, implicit, implicitfast; checked on MuJoCo 4.0, as is ``mj_step2`` of
    goal-directed dynamics) it is the most stable at a planner's coarse step (≥ 10 ms by
    default, against a plant's 1–5 ms), which matters more there than RK4's accuracy: it treats
    every velocity-dependent force but the Coriolis and centrifugal terms implicitly (joint and
    actuator damping, velocity actuators, fluid drag), where Euler does so only for joint
    damping, at about Euler's cost (``implicit`` adds the Coriolis terms and an LU factorization
    per step; MuJoCo recommends implicitfast for most models).  A one-line
    :class:`~contactopt.errors.ModelNotice` warning says so (``notice=False`` for none); the
    plant keeps RK4, so the plan is made on a slightly different discretization of the same
    dynamics than the one simulated.  Other integrators are kept.

    Args:
      model: the plant model (not modified).
      timestep: the planner's ``opt.timestep`` in seconds (> 0); None keeps the model's.
      notice: emit the :class:`~contactopt.errors.ModelNotice` when the integrator is switched.

    Returns:
      A new ``MjModel`` (a deep copy) with the same name for :func:`model_name`.

    Raises:
      ParameterError: ``timestep`` is not positive and finite.
    """
    h = None if timestep is None else check_positive("timestep", timestep)
    out = copy.deepcopy(model)
    if h is not None:
        out.opt.timestep = h
    integ = int(out.opt.integrator)
    if integ in DERIVATIVE_UNSUPPORTED_INTEGRATORS:
        out.opt.integrator = PLANNER_INTEGRATOR
        if notice:
            old, new = integrator_name(integ), integrator_name(PLANNER_INTEGRATOR)
            warnings.warn(f"model {model_name(model)}: integrator {old} is not supported by MuJoCo's "
                          f"derivatives (mjd_transitionFD, mjd_inverseFD); the planner plans on a copy "
                          f"with integrator {new}, the plant keeps {old}", ModelNotice, stacklevel=2)
    _MODEL_LABELS[out] = model_name(model)
    return out


def num_steps(seconds: float, timestep: float) -> int:
    """Number of steps of length ``timestep`` in ``seconds``: ``round(seconds / timestep)``.

    Raises:
      ParameterError: negative or non-finite duration, non-positive time step, or a
        duration that is not (within 1e-6 relative) a whole number of steps when it is
        shorter than one step but positive.
    """
    s = check_nonnegative("seconds", seconds)
    h = check_positive("timestep", timestep)
    n = int(round(s / h))
    if s > 0 and n == 0:
        raise ParameterError(f"seconds={seconds} is shorter than one time step ({h} s)")
    return n


# --------------------------------------------------------------------------- MuJoCo's silent resets

#: Largest |qpos|, |qvel| (and |qacc|) MuJoCo accepts (``mjMAXVAL``): ``mj_checkPos``,
#: ``mj_checkVel`` and ``mj_checkAcc`` reset ``data`` to ``qpos0`` beyond it, with only a warning.
MAX_STATE_VALUE = float(mujoco.mjMAXVAL)

_RESET_WARNINGS = {
    int(mujoco.mjtWarning.mjWARN_BADQPOS): "qpos",
    int(mujoco.mjtWarning.mjWARN_BADQVEL): "qvel",
    int(mujoco.mjtWarning.mjWARN_BADQACC): "qacc",
}


def reset_warnings(data: mujoco.MjData) -> tuple[int, ...]:
    """Counters of MuJoCo's state-reset warnings (bad qpos, qvel, qacc) in ``data``: pass them to
    :func:`new_reset_warnings` after a call to learn whether MuJoCo reset the state in it."""
    return tuple(int(data.warning[i].number) for i in _RESET_WARNINGS)


def new_reset_warnings(data: mujoco.MjData, before: tuple[int, ...]) -> list[str]:
    """Which of ``qpos``/``qvel``/``qacc`` MuJoCo found bad (and reset ``data`` for) since ``before``
    (from :func:`reset_warnings`); empty when it reset nothing."""
    now = reset_warnings(data)
    return [what for (_, what), b, n in zip(_RESET_WARNINGS.items(), before, now) if n != b]


def check_state_range(model: mujoco.MjModel, data: mujoco.MjData) -> None:
    """Raise unless ``data.qpos``/``data.qvel`` are finite and within ``MAX_STATE_VALUE``.

    MuJoCo resets a state outside that range to ``qpos0`` (a stderr warning only), so a step from
    it would silently start somewhere else.

    Raises:
      NonFiniteError: NaN or infinity in qpos/qvel.
      ParameterError: an entry larger in magnitude than ``MAX_STATE_VALUE`` (1e10).
    """
    as_array("qpos", data.qpos, (model.nq,), max_abs=MAX_STATE_VALUE)
    as_array("qvel", data.qvel, (model.nv,), max_abs=MAX_STATE_VALUE)
