"""Terrain under a floating base: the height of the static terrain under points (ray casts
on the world body's geoms), a free base's height above it and its tilt from the vertical.

The base is a free joint at the start of ``qpos`` (position ``qpos[0:3]``, quaternion
``qpos[3:7]``), as in the bundled quadrupeds.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from .errors import as_array

__all__ = ["terrain_height", "base_tilt", "base_height"]

_RAY_TOP = 5.0  # m: terrain rays start this high
# geom types terrain_height does not ray-cast
_UNRAYED = (mujoco.mjtGeom.mjGEOM_MESH, mujoco.mjtGeom.mjGEOM_HFIELD, mujoco.mjtGeom.mjGEOM_SDF)


def terrain_height(model: mujoco.MjModel, data: mujoco.MjData, x, y) -> np.ndarray:
    """Height [m] of the static terrain (the world body's geoms) under points ``(x, y)``.

    Each point casts a ray straight down from ``_RAY_TOP`` m onto every world-body geom
    (planes and primitive shapes, MuJoCo's ``mju_rayGeom``); robot geoms are never hit.

    Args:
      model, data: ``data`` forward-computed at least to the kinematics (``geom_xpos``).
      x, y: scalars or arrays broadcastable to one shape [m].

    Returns:
      array of the broadcast shape: the highest terrain surface under each point, 0 where
      nothing is hit.
    """
    xs, ys = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    out = np.zeros(xs.shape)
    geoms = [g for g in range(model.ngeom)
             if model.geom_bodyid[g] == 0 and model.geom_type[g] not in _UNRAYED]
    down = np.array([0.0, 0.0, -1.0])
    pnt = np.zeros(3)
    for idx in np.ndindex(xs.shape):
        pnt[:] = xs[idx], ys[idx], _RAY_TOP
        best = -1.0
        for g in geoms:
            dist = mujoco.mju_rayGeom(data.geom_xpos[g], data.geom_xmat[g], model.geom_size[g], pnt, down,
                                      int(model.geom_type[g]))
            if dist >= 0 and (best < 0 or dist < best):
                best = dist
        out[idx] = _RAY_TOP - best if best >= 0 else 0.0
    return out


def base_tilt(qpos) -> float:
    """Angle [rad] between the trunk's z axis and the world's vertical (``qpos[3:7]`` quaternion)."""
    w, x, y, z = as_array("qpos", qpos, (None,))[3:7]
    n = w * w + x * x + y * y + z * z
    # z-component of the body z axis: 1 − 2(x² + y²)/|q|²
    cz = 1.0 - 2.0 * (x * x + y * y) / n
    return float(math.acos(max(-1.0, min(1.0, cz))))


def base_height(model: mujoco.MjModel, data: mujoco.MjData) -> float:
    """Trunk centre height [m] above the terrain under it (``data`` forward-computed)."""
    return float(data.qpos[2] - terrain_height(model, data, data.qpos[0], data.qpos[1]))
