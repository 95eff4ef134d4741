"""The plant's geometry as viser scene nodes, posed from MuJoCo body frames.

Each body with visible geoms gets a frame node ``/<prefix>/b<id>``; its geoms are meshes
under it at their fixed local poses, so a frame update is one position and one orientation
per body (sent together in one ``server.atomic()`` block).  Geoms of the world body are
static.  Supported geom types: plane, sphere, capsule, ellipsoid, cylinder, box and mesh
(height fields and SDFs are skipped).
"""

from __future__ import annotations

import mujoco
import numpy as np

__all__ = ["BodyScene", "geom_mesh", "visible_geoms"]

_G = mujoco.mjtGeom


def geom_mesh(model: mujoco.MjModel, g: int):
    """``(vertices (V, 3), faces (F, 3))`` of geom ``g`` in its own frame [m], or None for a
    type that is not drawn.  An infinite plane is drawn 20 m × 20 m, 1 cm thick."""
    import trimesh

    t = int(model.geom_type[g])
    s = model.geom_size[g]
    if t == _G.mjGEOM_PLANE:
        hx = s[0] if s[0] > 0 else 10.0
        hy = s[1] if s[1] > 0 else 10.0
        m = trimesh.creation.box(extents=(2 * hx, 2 * hy, 0.01))
        m.apply_translation((0, 0, -0.005))
    elif t == _G.mjGEOM_SPHERE:
        m = trimesh.creation.icosphere(subdivisions=2, radius=s[0])
    elif t == _G.mjGEOM_CAPSULE:
        m = trimesh.creation.capsule(height=2 * s[1], radius=s[0], count=(12, 12))
    elif t == _G.mjGEOM_ELLIPSOID:
        m = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
        m.apply_scale(s[:3])
    elif t == _G.mjGEOM_CYLINDER:
        m = trimesh.creation.cylinder(radius=s[0], height=2 * s[1], sections=16)
    elif t == _G.mjGEOM_BOX:
        m = trimesh.creation.box(extents=2 * s[:3])
    elif t == _G.mjGEOM_MESH:
        mid = int(model.geom_dataid[g])
        if mid < 0:
            return None
        v0, nv = int(model.mesh_vertadr[mid]), int(model.mesh_vertnum[mid])
        f0, nf = int(model.mesh_faceadr[mid]), int(model.mesh_facenum[mid])
        return (np.array(model.mesh_vert[v0:v0 + nv], dtype=np.float32),
                np.array(model.mesh_face[f0:f0 + nf], dtype=np.int32))
    else:
        return None
    return np.asarray(m.vertices, dtype=np.float32), np.asarray(m.faces, dtype=np.int32)


def visible_geoms(model: mujoco.MjModel) -> list[int]:
    """Geoms MuJoCo's viewer shows by default: groups 0–2, not fully transparent."""
    out = []
    for g in range(model.ngeom):
        rgba = _rgba(model, g)
        if model.geom_group[g] <= 2 and rgba[3] > 0:
            out.append(g)
    return out


def _rgba(model, g) -> np.ndarray:
    mat = int(model.geom_matid[g])
    return np.array(model.mat_rgba[mat] if mat >= 0 else model.geom_rgba[g], dtype=float)


class BodyScene:
    """The model's visible geoms under body frames at ``/<prefix>``.

    Args:
      scene: a viser ``SceneApi`` (``server.scene``).
      model: the plant's ``MjModel``.
      prefix: node path prefix (``"plant"``, ``"ghost"``).
      opacity: None for opaque, else 0..1 (a ghost).
      color: one RGB color (0–255) for every geom instead of the model's.
      static_world: draw the world body's geoms (the floor) as well.
    """

    def __init__(self, scene, model: mujoco.MjModel, prefix: str, *, opacity: float | None = None,
                 color=None, static_world: bool = True):
        self.prefix = prefix
        self.frames: dict[int, object] = {}
        #: body id → the mesh handles of its geoms (e.g. to make them clickable)
        self.meshes: dict[int, list] = {}
        self.bodies: list[int] = []
        for g in visible_geoms(model):
            b = int(model.geom_bodyid[g])
            if b == 0 and not static_world:
                continue
            mesh = geom_mesh(model, g)
            if mesh is None:
                continue
            if b not in self.frames:
                self.frames[b] = scene.add_frame(f"/{prefix}/b{b}", show_axes=False)
                if b != 0:
                    self.bodies.append(b)
            rgba = _rgba(model, g)
            rgb = tuple(int(c) for c in (np.clip(rgba[:3], 0, 1) * 255)) if color is None else tuple(color)
            op = opacity if opacity is not None else (float(rgba[3]) if rgba[3] < 1 else None)
            self.meshes.setdefault(b, []).append(scene.add_mesh_simple(
                                  f"/{prefix}/b{b}/g{g}", mesh[0], mesh[1], color=rgb, opacity=op,
                                  position=tuple(model.geom_pos[g]), wxyz=tuple(model.geom_quat[g]),
                                  flat_shading=False, cast_shadow=opacity is None,
                                  receive_shadow=opacity is None))
        self.bodies.sort()
        self._index = np.array(self.bodies, dtype=int)
        self._sent: tuple | None = None  # (positions, quaternions) of the bodies as last sent

    def update(self, xpos: np.ndarray, xquat: np.ndarray, *, tolerance: float = 1e-5) -> int:
        """Pose the moving bodies from ``xpos (nbody, 3)`` [m] and ``xquat (nbody, 4)`` (w, x, y, z).

        Only bodies that moved since the pose last sent — a position component by more than
        ``tolerance`` [m] or a quaternion component by more than ``tolerance`` — get a message
        (each pose property set is one websocket message serialized under the GIL, which the
        planner thread shares).  Returns the number of bodies sent."""
        idx = self._index
        if idx.size == 0:
            return 0
        pos, quat = xpos[idx], xquat[idx]
        if self._sent is None:
            moved = np.ones(idx.size, dtype=bool)
        else:
            # written as "not within": a NaN (never within) counts as moved
            moved = ~((np.abs(pos - self._sent[0]) <= tolerance).all(axis=1)
                      & (np.abs(quat - self._sent[1]) <= tolerance).all(axis=1))
            self._sent[0][moved], self._sent[1][moved] = pos[moved], quat[moved]
        if self._sent is None:
            self._sent = (pos.copy(), quat.copy())
        for k in np.flatnonzero(moved):
            f = self.frames[int(idx[k])]
            f.position = pos[k]
            f.wxyz = quat[k]
        return int(moved.sum())

    def resend(self) -> None:
        """Forget the poses sent: the next :meth:`update` sends every body."""
        self._sent = None

    def set_visible(self, visible: bool) -> None:
        """Show or hide every node."""
        for f in self.frames.values():
            f.visible = visible
