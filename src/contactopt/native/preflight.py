"""Checks a model once before the compiled loops run on it (:func:`check_compiled_loops`).

The compiled loops (the numba kernels of :mod:`contactopt.native`, and the threaded loops of
:class:`~contactopt.dynamics.MujocoDynamics`, :class:`~contactopt.solvers.idto.IDTOProblem`
and :class:`~contactopt.solvers.gdd.GDDSolver`) call ``libmujoco`` directly.  A MuJoCo *fatal*
error there (``mju_error``) cannot become a Python exception: MuJoCo's default handler prints
``ERROR: ...``, appends it to ``MUJOCO_LOG.TXT`` in the working directory and ends the
process.  The same call made through the Python bindings raises ``mujoco.FatalError`` instead.
So the entry points call :func:`check_compiled_loops` once at construction: it runs the MuJoCo
functions their loops run, once per probe state, through the bindings on a scratch ``MjData``,
and turns a fatal error into a :class:`~contactopt.errors.ModelError` that names the model
feature and the fix.  What it catches (MuJoCo 4.0):

* an integrator ``mjd_transitionFD`` / ``mjd_inverseFD`` reject (RK4; also ``mj_inverse`` with
  ``mjENBL_INVDISCRETE``) — checked from ``opt.integrator`` before anything runs;
* a ``<size memory="...">`` too small for what the loop allocates at the probe states
  (``mj_stackAlloc: out of memory``: contacts, constraint rows, the finite-difference buffers);
* any other fatal error the probe calls raise.

Limits: the loops may later visit states with more contacts than the probe states (``qpos0``,
the keyframes and the states the caller passes).  A probe that already uses more than
:data:`MEMORY_HEADROOM` of the arena emits a :class:`~contactopt.errors.ModelNotice` (not an
error) suggesting a larger ``<size memory>``.

A check passed by a model is remembered (per model object and options fingerprint) so that
constructing many solvers on one model checks it once.
"""

from __future__ import annotations

import math
import os
import re
import warnings
import weakref
from collections.abc import Iterable

import mujoco
import numpy as np

from ..errors import ModelError, ModelNotice
from ..model import DERIVATIVE_UNSUPPORTED_INTEGRATORS, integrator_name

__all__ = [
    "COMPILED_LOOP_CALLS",
    "MAX_PROBE_KEYFRAMES",
    "MEMORY_HEADROOM",
    "check_compiled_loops",
    "check_horizon_memory",
    "memory_limit_bytes",
]

#: the MuJoCo calls a compiled loop can make, as :func:`check_compiled_loops` names them:
#: ``"position"`` (``mj_fwdPosition``: kinematics, the collision pass, the constraint rows),
#: ``"forward"`` (``mj_forward``: all stages and the constraint solver), ``"step"``
#: (``mj_step``: rollouts), ``"transition_fd"`` (``mjd_transitionFD``), ``"inverse"``
#: (``mj_inverse`` and ``mj_fullM``) and ``"inverse_fd"`` (``mjd_inverseFD``)
COMPILED_LOOP_CALLS = ("position", "forward", "step", "transition_fd", "inverse", "inverse_fd")

#: fraction of the model's arena (``<size memory>``) a probe may use before a notice says that
#: states with more contacts could overflow it
MEMORY_HEADROOM = 0.5

#: at most this many keyframes are probed besides ``qpos0``
MAX_PROBE_KEYFRAMES = 4

_CALL_FUNCTIONS = {
    "position": "mj_fwdPosition",
    "step": "mj_step",
    "forward": "mj_forward",
    "transition_fd": "mjd_transitionFD",
    "inverse": "mj_inverse",
    "inverse_fd": "mjd_inverseFD",
}

# model -> {fingerprint of the options a check depends on: calls checked}
_PASSED: weakref.WeakKeyDictionary[mujoco.MjModel, dict] = weakref.WeakKeyDictionary()


def _fingerprint(model: mujoco.MjModel) -> tuple:
    o = model.opt
    return (int(o.integrator), int(o.enableflags), int(o.disableflags), float(o.timestep), int(o.cone),
            int(o.jacobian), int(model.narena), model.nq, model.nv, model.nu, model.na, model.ngeom)


def _probe_states(model: mujoco.MjModel, qpos: Iterable | None):
    """``(label, setter)`` pairs: ``setter(d)`` puts a reset ``MjData`` in the probe state."""
    states = [("qpos0", lambda d: None)]
    for k in range(min(int(model.nkey), MAX_PROBE_KEYFRAMES)):
        states.append((f"keyframe {k}", lambda d, k=k: mujoco.mj_resetDataKeyframe(model, d, k)))
    for i, q in enumerate(qpos or ()):
        q = np.asarray(q, dtype=float)
        if q.shape != (model.nq,) or not np.all(np.isfinite(q)):
            continue  # the caller validates its own states; a probe only skips a bad one

        def put(d, q=q):
            d.qpos[:] = q
        states.append((f"the given state {i}", put))
    return states


def _run(model: mujoco.MjModel, d: mujoco.MjData, call: str) -> None:
    """Run ``call`` once on ``d`` through the Python bindings (a fatal error raises)."""
    nv, nu = model.nv, model.nu
    if call == "position":
        mujoco.mj_fwdPosition(model, d)
    elif call == "step":
        mujoco.mj_step(model, d)
    elif call == "forward":
        mujoco.mj_forward(model, d)
    elif call == "transition_fd":
        nx = 2 * nv + model.na
        A = np.zeros((nx, nx))
        B = np.zeros((nx, nu)) if nu else None
        mujoco.mjd_transitionFD(model, d, 1e-6, False, A, B, None, None)
    elif call == "inverse":
        mujoco.mj_inverse(model, d)
        mujoco.mj_fullM(model, d, np.zeros((nv, nv)))
    elif call == "inverse_fd":
        mujoco.mjd_inverseFD(model, d, 1e-6, False, np.zeros((nv, nv)), np.zeros((nv, nv)),
                             None, None, None, None, None)
    else:  # pragma: no cover - guarded by check_compiled_loops
        raise ValueError(call)


def _memory_suggestion(need_bytes: int) -> str:
    """A ``<size memory="...">`` value with room to spare: twice ``need_bytes`` (at least 1 MiB),
    rounded up to whole MiB."""
    want = max(2 * int(need_bytes), 1 << 20)
    return f"{math.ceil(want / (1 << 20))}M"


def _arena_text(model: mujoco.MjModel) -> str:
    n = int(model.narena)
    return f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n / 1024:.3g} KiB"


def _memory_error(model, what, call, state, msg) -> ModelError:
    """The :class:`ModelError` of an ``out of memory`` fatal error (``msg`` is MuJoCo's text)."""
    nums = {k: int(v) for k, v in re.findall(r"(max|available|requested)\s*=\s*(\d+)", msg)}
    used = nums.get("max", int(model.narena)) - nums.get("available", 0)
    need = used + nums.get("requested", 0)
    at = re.search(r"at (\w+)", msg)
    where = f" (in {at.group(1)})" if at else ""
    return ModelError(
        f"{what}: the model's <size memory> ({_arena_text(model)}) is too small for "
        f"{_CALL_FUNCTIONS[call]} at {state}{where}: MuJoCo ran out of its arena, which would end the "
        f"process inside the compiled loop; set <size memory=\"{_memory_suggestion(need)}\"/> "
        "(or more) in the model's MJCF")


def check_compiled_loops(model: mujoco.MjModel, calls: Iterable[str], *, what: str = "planner",
                         qpos: Iterable | None = None) -> None:
    """Check that the compiled loops can run ``calls`` on ``model`` without a MuJoCo fatal error.

    Cheap (one run of each call per probe state, on a scratch ``MjData``; the model's arena is
    allocated once more meanwhile), meant to be called once per planner build.  A model that
    passed for some calls is not probed again for them while its options are unchanged.

    Args:
      model: the ``MjModel`` the loops will run on (not modified).
      calls: names from :data:`COMPILED_LOOP_CALLS` (e.g. ``("step", "transition_fd")`` for
        :class:`~contactopt.dynamics.MujocoDynamics`).
      what: who asks, the start of the error message (e.g. ``"MujocoDynamics"``).
      qpos: optional extra probe configurations, each ``(nq,)`` (e.g. IDTO's ``q_init``); the
        probes are always ``qpos0`` at rest and the model's first :data:`MAX_PROBE_KEYFRAMES`
        keyframes.  Entries of the wrong shape or not finite are skipped.

    Raises:
      ModelError: the integrator is one ``mjd_transitionFD`` / ``mjd_inverseFD`` reject (RK4)
        and ``calls`` needs them (or ``"inverse"`` with ``mjENBL_INVDISCRETE``); the arena
        (``<size memory>``) overflowed at a probe state; any other MuJoCo fatal error of a probe
        call.  The message names the model feature and the fix.
      ValueError: an unknown call name.

    Warns:
      ModelNotice: a probe used more than :data:`MEMORY_HEADROOM` of the arena (states with
        more contacts could overflow it).
    """
    if not isinstance(model, mujoco.MjModel):
        raise ModelError(f"{what}: expected a mujoco.MjModel, got {type(model).__name__}")
    calls = tuple(dict.fromkeys(calls))
    unknown = [c for c in calls if c not in _CALL_FUNCTIONS]
    if unknown:
        raise ValueError(f"check_compiled_loops: unknown call(s) {unknown}; known: {COMPILED_LOOP_CALLS}")
    key = _fingerprint(model)
    done = _PASSED.get(model, {}).get(key, ())
    todo = tuple(c for c in calls if c not in done)
    if not todo and qpos is None:
        return

    # 1. integrators the derivatives reject (named before anything runs)
    integ = int(model.opt.integrator)
    if integ in DERIVATIVE_UNSUPPORTED_INTEGRATORS:
        discrete = bool(int(model.opt.enableflags) & int(mujoco.mjtEnableBit.mjENBL_INVDISCRETE))
        bad = [_CALL_FUNCTIONS[c] for c in calls
               if c in ("transition_fd", "inverse_fd") or (c == "inverse" and discrete)]
        if bad:
            name = integrator_name(integ)
            raise ModelError(
                f"{what}: the model's integrator {name} is not supported by {' and '.join(bad)} "
                f"(MuJoCo would end the process inside the compiled loop); plan on "
                f"contactopt.model.planner_model_copy(model), which switches {name} to implicitfast in "
                "the planner's copy, or set <option integrator=\"implicitfast\"/> in the model")

    # 2. run every call once per probe state through the bindings, where a fatal error raises
    try:
        d = mujoco.MjData(model)
    except (mujoco.FatalError, ValueError) as exc:
        msg = " ".join(str(exc).split())
        if "memory" in msg:
            raise ModelError(f"{what}: the model's <size memory> ({_arena_text(model)}) is too small for "
                             f"its own MjData ({msg}); set a larger <size memory=\"...\"/> in the "
                             "model's MJCF") from None
        raise ModelError(f"{what}: MuJoCo could not allocate an MjData for the model: {msg}") from None
    peak = 0
    for label, put in _probe_states(model, qpos):
        for call in calls:
            mujoco.mj_resetData(model, d)
            put(d)
            d.maxuse_stack = 0
            d.maxuse_arena = 0
            try:
                _run(model, d, call)
            except mujoco.FatalError as exc:
                msg = " ".join(str(exc).split())
                if "out of memory" in msg or "stack overflow" in msg or "arena" in msg:
                    raise _memory_error(model, what, call, label, msg) from None
                raise ModelError(
                    f"{what}: {_CALL_FUNCTIONS[call]} at {label} raised MuJoCo's fatal error \"{msg}\", "
                    "which would end the process inside the compiled loop; fix the model feature it "
                    "names") from None
            # MuJoCo 4.0's maxuse_arena counts the stack as well (both share the arena)
            peak = max(peak, int(d.maxuse_arena), int(d.maxuse_stack))
    if model.narena and peak > MEMORY_HEADROOM * model.narena:
        warnings.warn(
            f"{what}: the probe states already use {100 * peak / model.narena:.0f} % of the model's "
            f"<size memory> ({_arena_text(model)}); states with more contacts could overflow it and end "
            f"the process inside a compiled loop; set <size memory=\"{_memory_suggestion(peak)}\"/>",
            ModelNotice, stacklevel=3)
    _PASSED.setdefault(model, {})[key] = tuple(dict.fromkeys(done + calls))


def memory_limit_bytes() -> int | None:
    """The memory this process may use [bytes]: the machine's physical memory, or the cgroup
    (container) limit where one is set and smaller; None where neither can be read."""
    limit = None
    try:
        limit = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):
            limit = int(text) if limit is None else min(limit, int(text))
        break
    return limit


def check_horizon_memory(what: str, num_steps: int, bytes_per_step: float, *, fix: str,
                         limit_bytes: int | None = None) -> None:
    """Refuse a horizon whose per-step arrays would not fit in memory, before they are allocated.

    (A solve that asks for more than the machine has ends in ``MemoryError`` at best and in the
    kernel's out-of-memory killer at worst.)

    Args:
      what: who asks, the start of the message (e.g. ``"IDTOProblem"``).
      num_steps: ``T``, the steps of the horizon.
      bytes_per_step: an upper estimate of the bytes a solve holds per step [bytes].
      fix: how to make it fit, the end of the message (e.g. ``"shorten the horizon ..."``).
      limit_bytes: the memory available [bytes] (default :func:`memory_limit_bytes`; None
        there: no check).

    Raises:
      ModelError: ``num_steps · bytes_per_step`` exceeds the limit; the message gives both in GiB.
    """
    limit = memory_limit_bytes() if limit_bytes is None else int(limit_bytes)
    need = float(num_steps) * float(bytes_per_step)
    if limit is not None and need > limit:
        raise ModelError(f"{what}: a horizon of {int(num_steps)} steps needs about {need / 2**30:.3g} GiB "
                         f"({float(bytes_per_step) / 2**20:.3g} MiB per step), more than the "
                         f"{limit / 2**30:.3g} GiB of memory here; {fix}")
