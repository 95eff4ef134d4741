"""Exceptions raised by contactopt, and small input validators shared by all modules.

Every error a user can cause by bad input derives from :class:`ContactoptError`,
so a caller (or the CLI) can catch one class.  The subclasses also derive from
the matching builtin (``ValueError``, ``FileNotFoundError``, ...), so code that
already catches those keeps working.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = [
    "ContactoptError",
    "ModelNotFoundError",
    "ModelLoadError",
    "ModelError",
    "ModelNotice",
    "ShapeError",
    "NonFiniteError",
    "ParameterError",
    "RenderError",
    "as_array",
    "check_positive",
    "check_nonnegative",
    "check_instance",
    "check_finite",
]


class ContactoptError(Exception):
    """Base class of every error contactopt raises for bad input or a failed step."""


class ModelNotFoundError(ContactoptError, FileNotFoundError):
    """A model name that is not bundled, or a model file that does not exist."""


class ModelLoadError(ContactoptError, ValueError):
    """A model file exists but MuJoCo could not compile it (malformed XML, bad attribute, ...)."""


class ModelError(ContactoptError, ValueError):
    """A compiled model has a feature a planner (or the compiled loops under it) cannot handle.

    Raised before planning starts, by :func:`contactopt.native.check_compiled_loops` (an
    integrator that ``mjd_transitionFD`` / ``mjd_inverseFD`` do not support: RK4; a
    ``<size memory="...">`` too small for what the loops allocate) and
    :func:`contactopt.native.check_horizon_memory` (a horizon whose arrays would not fit in
    memory).  The message names the model feature and the fix.
    """


class ModelNotice(UserWarning):
    """Warning category of the changes contactopt makes to a planner's *copy* of a model on the
    user's behalf (e.g. RK4 → implicitfast in :func:`contactopt.model.planner_model_copy`); the
    plant is never changed.  Silence with ``warnings.simplefilter("ignore", ModelNotice)``."""


class ShapeError(ContactoptError, ValueError):
    """An array argument has the wrong shape."""


class NonFiniteError(ContactoptError, ValueError):
    """An array or scalar argument contains NaN or infinity."""


class ParameterError(ContactoptError, ValueError):
    """A scalar parameter is outside its allowed range (negative duration, zero time step, ...)."""


class RenderError(ContactoptError, RuntimeError):
    """Offscreen rendering is not possible on this machine (no EGL / OSMesa)."""


def as_array(
    name: str,
    value,
    shape: Sequence[int | None] | None = None,
    *,
    finite: bool = True,
    dtype=np.float64,
    max_abs: float | None = None,
) -> np.ndarray:
    """Convert ``value`` to a C-contiguous array and validate it.

    Args:
      name: argument name used in error messages (e.g. ``"qpos"``).
      value: array-like input.
      shape: expected shape; ``None`` entries match any length.  ``None`` skips the check.
      finite: if true, NaN or infinite entries raise :class:`NonFiniteError`.
      dtype: dtype of the returned array.
      max_abs: if given, an entry with ``|x| > max_abs`` raises :class:`ParameterError` (e.g.
        MuJoCo's ``mjMAXVAL`` = 1e10 for states: MuJoCo silently resets a larger qpos/qvel).

    Returns:
      ``np.ascontiguousarray(value, dtype)`` with the requested shape.

    Raises:
      ShapeError: wrong number of dimensions or wrong length along an axis.
      NonFiniteError: NaN or infinity where ``finite`` is true (the message gives the first index).
      ParameterError: an entry larger in magnitude than ``max_abs``.
    """
    try:
        # numpy would drop the imaginary part of complex input with only a warning
        complex_in = np.iscomplexobj(value) and not np.issubdtype(np.dtype(dtype), np.complexfloating)
        arr = None if complex_in else np.ascontiguousarray(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{name}: cannot convert to a numeric array ({exc})") from None
    if complex_in:
        raise ShapeError(f"{name}: expected real numbers, got complex values")
    if shape is not None:
        want = tuple(shape)
        if arr.ndim != len(want) or any(w is not None and w != g for w, g in zip(want, arr.shape)):
            pretty = "(" + ", ".join("*" if w is None else str(w) for w in want) + ("," if len(want) == 1 else "") + ")"
            raise ShapeError(f"{name}: expected shape {pretty}, got {arr.shape}")
    if finite and arr.size and not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        where = tuple(int(i) for i in bad)
        raise NonFiniteError(
            f"{name}: contains a non-finite value ({arr[tuple(bad)]}) at index {where if len(where) != 1 else where[0]}"
        )
    if max_abs is not None and arr.size and np.nanmax(np.abs(arr)) > max_abs:
        bad = np.argwhere(np.abs(arr) > max_abs)[0]
        where = tuple(int(i) for i in bad)
        raise ParameterError(
            f"{name}: value {arr[tuple(bad)]:.6g} at index {where if len(where) != 1 else where[0]} "
            f"exceeds the largest magnitude allowed ({max_abs:g})"
        )
    return arr


def check_instance(name: str, value, cls: type, default=None):
    """``value`` if it is a ``cls`` (``default()`` first when ``value`` is None and a ``default``
    factory is given); else :class:`ParameterError` naming ``name``, the expected and the given type."""
    if value is None and default is not None:
        value = default()
    if not isinstance(value, cls):
        label = f"mujoco.{cls.__name__}" if cls.__module__.startswith("mujoco") else cls.__name__
        raise ParameterError(f"{name} must be a {label}, got {type(value).__name__}")
    return value


def check_positive(name: str, value: float) -> float:
    """Return ``float(value)`` or raise :class:`ParameterError` unless it is finite and > 0."""
    v = _as_scalar(name, value)
    if not v > 0:
        raise ParameterError(f"{name} must be positive, got {value!r}")
    return v


def check_finite(name: str, value: float) -> float:
    """Return ``float(value)``; :class:`ParameterError` if it is not a number, :class:`NonFiniteError`
    if it is NaN or infinite."""
    return _as_scalar(name, value)


def check_nonnegative(name: str, value: float) -> float:
    """Return ``float(value)`` or raise :class:`ParameterError` unless it is finite and >= 0."""
    v = _as_scalar(name, value)
    if not v >= 0:
        raise ParameterError(f"{name} must be non-negative, got {value!r}")
    return v


def _as_scalar(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise NonFiniteError(f"{name} must be finite, got {value!r}")
    return v
