"""Keeps a ``MUJOCO_GL`` value that MuJoCo rejects from breaking ``import contactopt``.

MuJoCo's Python bindings read ``MUJOCO_GL`` once, when ``mujoco`` is first imported, and raise
``RuntimeError`` for a value they do not know (``MUJOCO_GL=foo``), so ``import mujoco``, and
with it every ``contactopt`` command, would end in a traceback, rendering or not.
:func:`import_mujoco_despite_bad_gl` imports ``mujoco`` with such a value hidden for the
duration of the import (it falls back to its default backend, as with ``MUJOCO_GL`` unset) and
restores it; :func:`invalid_mujoco_gl` then names the value so that rendering, the only thing
that uses it, fails with a clear :class:`~contactopt.errors.RenderError` instead
(:func:`contactopt.render.gl_backend`).  Importing this module does the import (``contactopt``
imports it before anything else); it must not import ``mujoco`` at top level.
"""

from __future__ import annotations

import os
import platform
import sys

__all__ = ["import_mujoco_despite_bad_gl", "invalid_mujoco_gl", "valid_mujoco_gl_values"]

_DISABLED = ("disable", "disabled", "off", "false", "0")


def valid_mujoco_gl_values() -> tuple[str, ...]:
    """The ``MUJOCO_GL`` values MuJoCo's bindings accept on this operating system (lower case;
    ``""`` = unset), as listed in ``mujoco/rendering/classic/gl_context.py``."""
    values = _DISABLED + ("enable", "enabled", "on", "true", "1", "glfw", "")
    system = platform.system()
    if system == "Linux":
        values += ("glx", "egl", "osmesa")
    elif system == "Windows":
        values += ("wgl",)
    elif system == "Darwin":
        values += ("cgl",)
    return values


def import_mujoco_despite_bad_gl() -> None:
    """Import ``mujoco``; a ``MUJOCO_GL`` value it would reject is hidden during the import and
    named later by :func:`invalid_mujoco_gl`.  A no-op once ``mujoco`` is imported."""
    if "mujoco" in sys.modules or invalid_mujoco_gl() is None:
        return
    value = os.environ.pop("MUJOCO_GL")
    try:
        import mujoco  # noqa: F401
    finally:
        os.environ["MUJOCO_GL"] = value


def invalid_mujoco_gl() -> str | None:
    """A one-line explanation when ``MUJOCO_GL`` holds a value MuJoCo rejects, else None."""
    value = os.environ.get("MUJOCO_GL")
    if value is None or value.strip().lower() in valid_mujoco_gl_values():
        return None
    usable = ", ".join(v for v in ("egl", "osmesa", "glfw", "glx", "wgl", "cgl")
                       if v in valid_mujoco_gl_values())
    return (f"MUJOCO_GL={value!r} is not a rendering backend MuJoCo knows; set it to one of "
            f"{usable}, or unset it to let contactopt pick one")


import_mujoco_despite_bad_gl()
