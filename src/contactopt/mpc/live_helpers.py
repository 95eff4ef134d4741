"""Helpers of :class:`~contactopt.mpc.live.LiveRun` that stand on their own: the drag-to-push
arithmetic (:func:`drag_impulse` and its constants), the plant's own keys (:data:`PLANT_KEYS`),
the safe ranges values are clamped to (:data:`SAFE_RANGES`), the change record (:class:`Change`),
the TOML export of settings (:func:`format_toml`) and the telemetry ring buffer."""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError

#: Drag-to-push: impulse [N·s] = DRAG_GAIN × mass [kg] × drag displacement [m] / DRAG_TIME_SCALE [s],
#: i.e. a free body's centre of mass would take about ``displacement / DRAG_TIME_SCALE`` [m/s] …
DRAG_GAIN = 1.0
#: … [s]: a 0.5 m drag gives a free body about 1 m/s.
DRAG_TIME_SCALE = 0.5
#: … and the impulse is clamped to ``mass × DRAG_MAX_SPEED`` [m/s] (a safe maximum).
DRAG_MAX_SPEED = 5.0
#: Goal targets [m] are clamped to ``[-GOAL_LIMIT, GOAL_LIMIT]`` on every axis.
GOAL_LIMIT = 100.0


def drag_impulse(mass: float, displacement, *, gain: float = DRAG_GAIN, time_scale: float = DRAG_TIME_SCALE,
                 max_speed: float = DRAG_MAX_SPEED) -> tuple[np.ndarray, bool]:
    """The impulse of a drag: ``gain × mass × displacement / time_scale`` [N·s], its length
    clamped to ``mass × max_speed``.  Returns ``(impulse (3,), clamped)``.

    Raises:
      ParameterError: a displacement that is not 3 finite numbers, a non-positive mass,
        gain, time scale or maximum speed.
    """
    d = np.asarray(displacement, dtype=float).reshape(-1)
    if d.shape != (3,) or not np.isfinite(d).all():
        raise ParameterError(f"drag push: displacement must be 3 finite numbers, got {displacement!r}")
    for name, v in (("mass", mass), ("gain", gain), ("time_scale", time_scale), ("max_speed", max_speed)):
        if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) and v > 0):
            raise ParameterError(f"drag push: {name} must be a positive finite number, got {v!r}")
    p = float(gain) * float(mass) * d / float(time_scale)
    cap = float(mass) * float(max_speed)
    n = float(np.linalg.norm(p))
    if n > cap:
        return p * (cap / n), True
    return p, False

#: The plant's own dynamics parameters: key → (default, meaning); None keeps the model's value.
PLANT_KEYS: dict[str, tuple] = {
    "plant.timestep": (None, "plant time step [s] (default: the model's)"),
    "plant.mass_scale": (1.0, "plant: every body's mass and inertia × this"),
    "plant.friction_scale": (1.0, "plant: every geom's friction coefficients × this"),
    "plant.contact_timeconst": (None, "plant contact stiffness: solref time constant [s]"),
    "plant.contact_dampratio": (None, "plant contact damping: solref damping ratio"),
}

#: Safe ranges ``(low, high)`` that numeric values are clamped to, by key or key prefix
#: (a key matches its own entry first, then the longest prefix).  Weights are never negative,
#: time steps never zero.
SAFE_RANGES: dict[str, tuple[float, float]] = {
    "weight.": (0.0, 1e6),
    "terminal.weight.": (0.0, 1e6),
    "horizon": (1e-3, 10.0),
    "timestep": (1e-4, 0.1),
    "iterations": (1, 100),
    "initial_iterations": (0, 1000),
    "derivative_stride": (1, 64),
    "samples": (0, 4096),
    "model.": (1e-3, 1e3),
    "model.mass_scale": (0.05, 20.0),
    "model.friction_scale": (0.0, 20.0),
    "plant.": (1e-3, 1e3),
    "plant.timestep": (1e-4, 0.05),
    "plant.mass_scale": (0.05, 20.0),
    "plant.friction_scale": (0.0, 20.0),
    "slowdown": (0.05, 100.0),
}


def _safe_range(key: str):
    if key in SAFE_RANGES:
        return SAFE_RANGES[key]
    best = None
    for prefix, rng in SAFE_RANGES.items():
        if prefix.endswith(".") and key.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, rng)
    return None if best is None else best[1]


def _clamp(key: str, value):
    """``value`` clamped to the key's safe range when it is a finite number (else unchanged).

    Returns ``(value, clamped)``.
    """
    rng = _safe_range(key)
    if rng is None or isinstance(value, bool):
        return value, False
    try:
        v = float(value)
    except (TypeError, ValueError):
        return value, False  # not a number: the checker names the key
    if not math.isfinite(v):
        return value, False
    lo, hi = rng
    c = min(max(v, lo), hi)
    if c == v:
        return value, False
    if isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("+-").isdigit()):
        c = round(c)
    return c, True

@dataclass(frozen=True)
class Change:
    """One accepted change: ``wall`` (Unix time [s]), ``sim_time`` (plant time [s]), ``what``
    (e.g. ``"set weight.qvel = 0.1"``)."""

    wall: float
    sim_time: float
    what: str


def format_toml(values: dict) -> str:
    """``values`` (``--set`` key → value) as top-level TOML lines ``"key" = value``.

    Numbers and booleans are written as TOML numbers and booleans, tuples/lists as arrays,
    everything else as a quoted string; None values are left out.
    """
    lines = []
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                continue
            text = repr(value)
        elif isinstance(value, (tuple, list)):
            text = "[" + ", ".join(repr(float(v)) for v in value) + "]"
        else:
            text = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        lines.append(f'"{key}" = {text}')
    return "\n".join(lines) + "\n"


class _Ring:
    """Bounded columns of floats: ``append(**row)``; ``arrays()`` → dict of ``(n,)`` arrays."""

    def __init__(self, maxlen: int):
        self.maxlen = maxlen
        self.cols: dict[str, collections.deque] = {}

    def append(self, **row) -> None:
        # every column holds the same rows, so a new one is padded to the length of any other
        rows = len(next(iter(self.cols.values()))) if self.cols else 0
        for k, v in row.items():
            col = self.cols.get(k)
            if col is None:
                col = self.cols[k] = collections.deque([math.nan] * rows, maxlen=self.maxlen)
            col.append(float(v))
        for k, col in self.cols.items():
            if k not in row:
                col.append(math.nan)

    def clear(self) -> None:
        self.cols.clear()

    def arrays(self) -> dict:
        return {k: np.array(c) for k, c in self.cols.items()}
