"""Headless rendering and video output.

The OpenGL backend is chosen at the first render, not at import:

1. ``MUJOCO_GL`` set by the user (``egl``, ``osmesa``, ``glfw``) is honoured as is;
2. otherwise EGL, then OSMesa, are each probed in a short subprocess (PyOpenGL can
   bind only one platform per process, so a failed in-process attempt could not
   fall back), and the first that creates a context is used.

If neither works, :class:`~contactopt.errors.RenderError` names the packages to install.

Videos are H.264 MP4 files written through imageio-ffmpeg (whose wheel ships an
ffmpeg binary).  A video is written to a temporary file beside the target and
renamed into place only when complete, so an interrupted run leaves no
truncated file behind.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np

from .errors import ParameterError, RenderError

__all__ = ["gl_backend", "OffscreenRenderer", "VideoWriter", "atomic_output"]

_PROBE = (
    "import os, sys; os.environ['MUJOCO_GL'] = sys.argv[1]; "
    "os.environ.setdefault('PYOPENGL_PLATFORM', sys.argv[1]); "
    "import mujoco; c = mujoco.GLContext(16, 16); c.make_current(); c.free()"
)

_INSTALL_HINT = (
    "install a headless OpenGL library: Mesa's EGL (Debian/Ubuntu: apt-get install libegl1 "
    "libgl1-mesa-dri) or OSMesa (apt-get install libosmesa6), or set MUJOCO_GL to a backend "
    "that works on this machine"
)


@functools.lru_cache(maxsize=1)
def gl_backend() -> str:
    """Name of the OpenGL backend used for offscreen rendering: ``"egl"``, ``"osmesa"`` or ``"glfw"``.

    Raises:
      RenderError: ``MUJOCO_GL`` holds a value MuJoCo rejects, or no backend can create a
        context; the message says what to set or install.
    """
    from ._gl_env import invalid_mujoco_gl

    bad = invalid_mujoco_gl()
    if bad is not None:
        raise RenderError(bad)
    chosen = os.environ.get("MUJOCO_GL", "").strip().lower()
    if chosen:
        return chosen
    errors = []
    for backend in ("egl", "osmesa"):
        env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _PROBE, backend],
                env=env, capture_output=True, text=True, timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{backend}: {exc}")
            continue
        if proc.returncode == 0:
            return backend
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        errors.append(f"{backend}: {last}")
    raise RenderError("no headless OpenGL backend works (" + "; ".join(errors) + "); " + _INSTALL_HINT)


def _gl_context_class():
    backend = gl_backend()
    try:
        if backend == "egl":
            from mujoco.egl import GLContext
        elif backend == "osmesa":
            from mujoco.osmesa import GLContext
        else:
            from mujoco import GLContext  # chosen by MUJOCO_GL at mujoco's import
    except Exception as exc:  # ImportError, or PyOpenGL bound to another platform
        raise RenderError(f"cannot use OpenGL backend {backend!r}: {exc}; {_INSTALL_HINT}") from None
    return GLContext


class OffscreenRenderer:
    """Renders RGB frames of a model without a display.

    Camera choice: the model's camera named ``camera`` (default ``"video"``) if it
    exists; otherwise a free camera that looks at the centre of mass of the first
    moving body tree from an oblique angle at a distance scaled to the model's extent,
    and follows it.

    Args:
      model: the ``MjModel``; its offscreen buffer is enlarged if smaller than the frame.
      width, height: frame size in pixels (both positive, even for H.264).
      camera: camera name, or None for the automatic camera.

    Use :meth:`render` per frame and :meth:`close` (or a ``with`` block) at the end.
    """

    def __init__(self, model: mujoco.MjModel, width: int = 640, height: int = 480,
                 camera: str | None = "video"):
        if width <= 0 or height <= 0:
            raise ParameterError(f"frame size must be positive, got {width}x{height}")
        self.model = model
        self.width, self.height = int(width), int(height)
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, self.width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, self.height)
        GLContext = _gl_context_class()
        try:
            self._gl = GLContext(self.width, self.height)
            self._gl.make_current()
        except Exception as exc:
            raise RenderError(f"could not create an OpenGL context ({gl_backend()}): {exc}; {_INSTALL_HINT}") from None
        self._scene = mujoco.MjvScene(model, maxgeom=10_000)
        self._context = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
        self._option = mujoco.MjvOption()
        self._viewport = mujoco.MjrRect(0, 0, self.width, self.height)
        self._rgb = np.zeros((self.height, self.width, 3), dtype=np.uint8)
        self.camera = mujoco.MjvCamera()
        cam_id = -1 if camera is None else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam_id >= 0:
            self.camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
            self.camera.fixedcamid = cam_id
            self._track_body = -1
        else:
            self.camera.type = mujoco.mjtCamera.mjCAMERA_FREE
            self.camera.distance = 2.2 * float(model.stat.extent)
            self.camera.azimuth = 135.0
            self.camera.elevation = -20.0
            self.camera.lookat[:] = model.stat.center
            self._track_body = _first_moving_root(model)

    def render(self, data: mujoco.MjData) -> np.ndarray:
        """Render the current state of ``data``; returns a ``(height, width, 3)`` uint8 array (a copy)."""
        self._gl.make_current()
        if self._track_body >= 0:
            self.camera.lookat[:] = data.subtree_com[self._track_body]
        mujoco.mjv_updateScene(self.model, data, self._option, None, self.camera,
                               mujoco.mjtCatBit.mjCAT_ALL, self._scene)
        mujoco.mjr_render(self._viewport, self._scene, self._context)
        mujoco.mjr_readPixels(self._rgb, None, self._viewport, self._context)
        return np.flipud(self._rgb).copy()

    def close(self) -> None:
        """Release the OpenGL context."""
        if getattr(self, "_gl", None) is not None:
            self._context.free()
            self._gl.free()
            self._gl = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _first_moving_root(model: mujoco.MjModel) -> int:
    for body in range(1, model.nbody):
        if model.body_parentid[body] == 0 and model.body_jntnum[body] > 0:
            return body
    return 1 if model.nbody > 1 else -1


class atomic_output:
    """Context manager giving a temporary path that is renamed to ``path`` only on success.

    On any exception (including ``KeyboardInterrupt``) the temporary file is deleted and
    ``path`` is left as it was, so no truncated file ever claims success.

    Example::

        with atomic_output("plot.png") as tmp:
            fig.savefig(tmp)
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.is_dir():
            raise ParameterError(f"output path {self.path} is a directory")
        parent = self.path.parent
        if not parent.exists():
            raise ParameterError(f"output directory {parent} does not exist")
        self.tmp = parent / f".{self.path.stem}.partial-{os.getpid()}{self.path.suffix}"

    def __enter__(self) -> Path:
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self.tmp.exists():
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
        return False


class VideoWriter:
    """Write RGB frames to an H.264 MP4 (yuv420p, playable everywhere), atomically.

    Args:
      path: target ``.mp4`` path; its directory must exist.
      fps: frames per second (> 0).

    Use as a context manager; frames go to a temporary file that becomes ``path``
    only when the block exits without an exception.
    """

    def __init__(self, path: str | os.PathLike, fps: float = 30.0):
        if fps <= 0:
            raise ParameterError(f"fps must be positive, got {fps}")
        self.path = Path(path)
        if self.path.suffix.lower() != ".mp4":
            raise ParameterError(f"video path must end in .mp4, got {self.path}")
        self.fps = float(fps)
        self._atomic = atomic_output(self.path)
        self._writer = None
        self.frames = 0

    def __enter__(self) -> "VideoWriter":
        import imageio.v2 as imageio

        tmp = self._atomic.__enter__()
        self._writer = imageio.get_writer(
            str(tmp), format="FFMPEG", mode="I", fps=self.fps, codec="libx264",
            pixelformat="yuv420p", quality=7, macro_block_size=2,
            ffmpeg_log_level="error",
        )
        return self

    def append(self, frame: np.ndarray) -> None:
        """Append one ``(H, W, 3)`` uint8 frame."""
        self._writer.append_data(frame)
        self.frames += 1

    def __exit__(self, exc_type, exc, tb):
        try:
            if self._writer is not None:
                self._writer.close()
        except BaseException:
            self._atomic.__exit__(RuntimeError, None, None)  # discard the partial file
            raise
        self._atomic.__exit__(exc_type, exc, tb)
        return False
