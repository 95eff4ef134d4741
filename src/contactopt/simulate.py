"""Simulation with recording: the plant every planner is tested against.

:func:`simulate` steps a model with MuJoCo's own contact model (``contact="mujoco"``)
or with the convex invertible contact model in place of MuJoCo's constraint solver
(``contact="convex"``, :class:`contactopt.contact.ConvexDynamics`), optionally
under a controller, records states, energy, contact count and total normal
contact force at every step, and can render a video at the same time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import mujoco
import numpy as np

from .errors import ContactoptError, ParameterError, as_array
from .model import (
    MAX_STATE_VALUE,
    model_name,
    new_reset_warnings,
    num_steps,
    reset_to_keyframe,
    reset_warnings,
)
from .progress import progress_bar

__all__ = ["SimulationResult", "SimulationError", "simulate", "total_normal_force", "frame_stride"]

Controller = Callable[[mujoco.MjModel, mujoco.MjData], "np.ndarray | None"]


class SimulationError(ContactoptError, RuntimeError):
    """The simulation diverged (NaN, or MuJoCo's instability reset); ``result`` holds the steps before."""

    def __init__(self, message: str, result: "SimulationResult | None" = None):
        super().__init__(message)
        self.result = result


@dataclass
class SimulationResult:
    """Recorded trajectory of :func:`simulate`.  ``N`` steps give ``N + 1`` samples.

    Attributes:
      model: model name.
      timestep: step size h in seconds.
      time: ``(N+1,)`` seconds.
      qpos: ``(N+1, nq)``; qvel: ``(N+1, nv)``; ctrl: ``(N, nu)`` applied controls.
      potential_energy, kinetic_energy: ``(N+1,)`` joules (MuJoCo's ``mjENBL_ENERGY``).
      contact_count: ``(N+1,)`` active contacts.
      normal_force: ``(N+1,)`` sum of contact normal forces in newtons.
      video_frames: number of frames rendered (0 without video).
      wall_time: seconds of wall-clock time spent.
    """

    model: str
    timestep: float
    time: np.ndarray
    qpos: np.ndarray
    qvel: np.ndarray
    ctrl: np.ndarray
    potential_energy: np.ndarray
    kinetic_energy: np.ndarray
    contact_count: np.ndarray
    normal_force: np.ndarray
    video_frames: int = 0
    wall_time: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def total_energy(self) -> np.ndarray:
        """``(N+1,)`` potential + kinetic energy in joules."""
        return self.potential_energy + self.kinetic_energy

    @property
    def steps(self) -> int:
        """Number of simulation steps N."""
        return len(self.time) - 1

    def summary(self) -> dict:
        """JSON-ready summary (final state, energy, contacts, timing)."""
        duration = float(self.time[-1])
        e = self.total_energy
        return {
            "model": self.model,
            "seconds": duration,
            "timestep": self.timestep,
            "steps": self.steps,
            "energy_initial": float(e[0]),
            "energy_final": float(e[-1]),
            "energy_max_rise": float(np.max(e) - e[0]),
            "contacts_max": int(self.contact_count.max(initial=0)),
            "contacts_final": int(self.contact_count[-1]),
            "normal_force_max": float(self.normal_force.max(initial=0.0)),
            "final_qpos": [float(x) for x in self.qpos[-1]],
            "video_frames": self.video_frames,
            "wall_time_s": self.wall_time,
            "realtime_factor": duration / self.wall_time if self.wall_time > 0 else math.inf,
        }


def total_normal_force(model: mujoco.MjModel, data: mujoco.MjData) -> float:
    """Sum of the normal components (N) of all active contact forces in ``data``.

    Read straight from ``efc_force`` (no per-contact call): with elliptic cones the
    normal force is the contact's first constraint row; with pyramidal cones it is
    the sum of its ``2(condim − 1)`` pyramid-edge forces (as ``mj_contactForce`` decodes it).
    """
    ncon = data.ncon
    if ncon == 0:
        return 0.0
    contact = data.contact
    adr = contact.efc_address[:ncon]
    active = adr >= 0
    if not active.any():
        return 0.0
    adr = adr[active]
    if model.opt.cone == int(mujoco.mjtCone.mjCONE_ELLIPTIC):
        return float(data.efc_force[adr].sum())
    dim = contact.dim[:ncon][active]
    rows = np.maximum(2 * (dim - 1), 1)  # frictionless contacts have one row
    idx = np.repeat(adr, rows) + (np.arange(rows.sum()) - np.repeat(np.cumsum(rows) - rows, rows))
    return float(data.efc_force[idx].sum())


def frame_stride(timestep: float, frame_rate: float) -> int:
    """Steps between rendered frames: ``max(1, round(1 / (frame_rate · timestep)))``.

    The true frame rate of the video is then ``1 / (stride · timestep)``.
    """
    return max(1, int(round(1.0 / (frame_rate * timestep))))


def simulate(
    model: mujoco.MjModel,
    seconds: float,
    *,
    qpos=None,
    qvel=None,
    keyframe: str | int | None = "home",
    controller: Controller | None = None,
    frame_callback: Callable[[mujoco.MjData], None] | None = None,
    frame_rate: float = 30.0,
    progress: bool | None = None,
    contact: str = "mujoco",
    contact_model=None,
) -> SimulationResult:
    """Simulate ``model`` for ``seconds``: MuJoCo's own dynamics (``mj_step``), the convex or the smooth contact model.

    The initial state is the keyframe ``keyframe`` (default ``"home"``, falling back
    to ``qpos0``), overridden by ``qpos``/``qvel`` when given.  Controls are zero
    unless ``controller(model, data)`` returns a ``(nu,)`` array before each step
    (clamped to the control range by MuJoCo).

    Args:
      model: the model (its ``mjENBL_ENERGY`` flag is switched on for the run and restored).
      seconds: duration, ≥ 0.
      qpos, qvel: optional ``(nq,)`` / ``(nv,)`` initial state (validated, finite).
      keyframe: keyframe name or index, or None for ``qpos0``.
      controller: optional feedback law.
      frame_callback: called with ``data`` (kinematics up to date) at ``frame_rate``; used to render video.
      frame_rate: frames per second for ``frame_callback``.
      progress: show a progress bar (None: only when stderr is a terminal).
      contact: ``"mujoco"`` (``mj_step`` with MuJoCo's soft constraints and the model's
        integrator) or ``"convex"`` (semi-implicit Euler with the convex invertible contact
        model: :class:`~contactopt.contact.ConvexDynamics`; contact count and normal force
        are then the convex model's, limits excluded), or ``"smooth"`` (semi-implicit Euler with
        the smooth diagonal contact model of the online-iLQG paper,
        :class:`~contactopt.contact.SmoothContactDynamics`; contact count and normal force are
        its active contacts and impulses / h).
      contact_model: the :class:`~contactopt.contact.ConvexContactModel` for
        ``contact="convex"``, or the :class:`~contactopt.contact.SmoothContactModel` for
        ``contact="smooth"`` (default parameters if None).

    Returns:
      :class:`SimulationResult`; with ``contact="convex"``, ``extra`` holds
      ``contact_unconverged_steps`` and ``contact_iterations_median``.

    Raises:
      ParameterError: negative/non-finite duration, unknown keyframe, a ``qpos``/``qvel``
        entry beyond 1e10 (``mjMAXVAL``: MuJoCo would silently reset the state).
      ShapeError, NonFiniteError: bad ``qpos``/``qvel``/controls.
      SimulationError: the state became non-finite, or MuJoCo flagged a bad qpos/qvel/qacc
        (and reset the state) at the start or during the run.
    """
    if contact not in ("mujoco", "convex", "smooth"):
        raise ParameterError(f"contact must be 'mujoco', 'convex' or 'smooth', got {contact!r}")
    if contact_model is not None and contact == "mujoco":
        raise ParameterError("contact_model is only used with contact='convex' or 'smooth'")
    h = float(model.opt.timestep)
    n = num_steps(seconds, h)
    data = mujoco.MjData(model)
    reset_to_keyframe(model, data, keyframe)
    if qpos is not None:
        data.qpos[:] = as_array("qpos", qpos, (model.nq,), max_abs=MAX_STATE_VALUE)
    if qvel is not None:
        data.qvel[:] = as_array("qvel", qvel, (model.nv,), max_abs=MAX_STATE_VALUE)
    stride = frame_stride(h, frame_rate) if frame_callback else 0

    name = model_name(model)
    old_flags = model.opt.enableflags
    model.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    rec = _Recorder(model, n)
    warnings_before = reset_warnings(data)
    frames = 0
    start = time.perf_counter()
    stepper = None
    unconverged = 0
    try:
        if contact == "convex":
            from .contact.convex import ContactStatus
            from .contact.convex_dynamics import ConvexDynamics

            stepper = ConvexDynamics(model, contact_model)  # copies the model with energy enabled
        elif contact == "smooth":
            from .contact.smooth import SmoothContactDynamics

            stepper = SmoothContactDynamics(model, contact_model)
        mujoco.mj_forward(model, data)
        reset = new_reset_warnings(data, warnings_before)
        if reset:  # the initial state (a keyframe, or qpos/qvel within 1e10) made MuJoCo reset it
            raise SimulationError(f"simulation of {name}: MuJoCo found the initial "
                                  f"{'/'.join(reset)} non-finite or beyond {MAX_STATE_VALUE:g} and reset it")
        with progress_bar(total=n, desc=f"simulate {name}", unit="step", enable=progress) as bar:
            for k in range(n):
                rec.reserve(k + 1)
                if stride and k % stride == 0:
                    if k:
                        mujoco.mj_forward(model, data)  # kinematics of the new state for the frame
                    frame_callback(data)
                    frames += 1
                rec.state(k, data)
                if controller is not None:
                    u = controller(model, data)
                    if u is not None:
                        data.ctrl[:] = as_array("controller output", u, (model.nu,))
                rec.ctrl[k] = data.ctrl
                if stepper is None:
                    mujoco.mj_step(model, data)
                    rec.derived(k, model, data)
                elif contact == "smooth":
                    try:
                        impulse = stepper.step_data(data)
                    except ContactoptError as e:
                        result = rec.result(name, h, k, frames, time.perf_counter() - start)
                        raise SimulationError(f"simulation of {name} diverged at t = {k * h:.4f} s ({e}); "
                                              "try a smaller time step", result) from None
                    rec.smooth(k, model, stepper, impulse)
                else:
                    step = stepper.step(data)
                    rec.convex(k, step)
                    rec.iterations[k] = step.iterations
                    unconverged += step.status != ContactStatus.CONVERGED
                reset = new_reset_warnings(data, warnings_before)
                if reset or not (np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all()):
                    rec.state(k + 1, data)
                    rec.energy[k + 1] = np.nan
                    result = rec.result(name, h, k + 1, frames, time.perf_counter() - start)
                    what = f"MuJoCo reset the state: bad {'/'.join(reset)}" if reset else "non-finite state"
                    raise SimulationError(
                        f"simulation of {name} diverged at t = {k * h:.4f} s "
                        f"({what}); try a smaller time step", result)
                bar.update(1)
        mujoco.mj_forward(model, data)
        rec.reserve(n + 1)
        rec.state(n, data)
        if stepper is None:
            rec.derived(n, model, data)
        elif contact == "smooth":  # the derived quantities of the final state, from a step not applied
            rec.smooth(n, model, stepper, stepper.step(data.qpos, data.qvel, data.ctrl).impulse)
        else:  # the derived quantities of the final state, from a step that is not applied
            rec.convex(n, stepper.forward(data.qpos, data.qvel, ctrl=data.ctrl, qfrc_applied=data.qfrc_applied,
                                          xfrc_applied=data.xfrc_applied, act=data.act if model.na else None,
                                          mocap_pos=data.mocap_pos if model.nmocap else None,
                                          mocap_quat=data.mocap_quat if model.nmocap else None))
        if stride and n % stride == 0:
            frame_callback(data)
            frames += 1
    finally:
        model.opt.enableflags = old_flags
    result = rec.result(name, h, n, frames, time.perf_counter() - start)
    if contact == "convex":
        result.extra["contact"] = "convex"
        result.extra["contact_unconverged_steps"] = int(unconverged)
        result.extra["contact_iterations_median"] = float(np.median(rec.iterations[:n])) if n else 0.0
    return result


class _Recorder:
    """Recording buffers for :func:`simulate`; ``derived`` values refer to the pre-step state.

    The buffers grow in chunks (doubling, from at most ``_FIRST_CHUNK`` samples) as the run
    proceeds, so a long duration costs memory in proportion to the steps actually taken, never
    an up-front allocation for the whole duration; call :meth:`reserve` before writing sample k.
    """

    _FIRST_CHUNK = 4096

    def __init__(self, model, n):
        self.n = n
        cap = min(n + 1, self._FIRST_CHUNK)
        self.qpos = np.empty((cap, model.nq))
        self.qvel = np.empty((cap, model.nv))
        self.ctrl = np.zeros((cap, model.nu))
        self.energy = np.empty((cap, 2))
        self.ncon = np.zeros(cap, dtype=np.int64)
        self.force = np.zeros(cap)
        self.iterations = np.zeros(cap, dtype=np.int64)

    def reserve(self, samples):
        """Make room for ``samples`` samples (indices ``0 … samples-1``)."""
        cap = len(self.qpos)
        if samples <= cap:
            return
        cap = min(max(samples, 2 * cap), self.n + 1)
        for name in ("qpos", "qvel", "ctrl", "energy", "ncon", "force", "iterations"):
            old = getattr(self, name)
            new = np.zeros((cap,) + old.shape[1:], dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def state(self, k, data):
        self.qpos[k] = data.qpos
        self.qvel[k] = data.qvel

    def derived(self, k, model, data):
        # After mj_step, energy/contacts/forces describe the state before integration (sample k);
        # after the final mj_forward they describe sample n.
        self.energy[k] = data.energy
        self.ncon[k] = data.ncon
        self.force[k] = total_normal_force(model, data)

    def convex(self, k, step):
        """Derived quantities of sample k from a convex-model :class:`ForwardStep` taken from it."""
        self.energy[k] = step.energy
        space = step.problem.space
        self.ncon[k] = space.n_contacts
        self.force[k] = float(step.f[space.normal_rows()[space.n_limits:]].sum()) / step.problem.timestep

    def smooth(self, k, model, stepper, impulse):
        """Derived quantities of sample k from a smooth-model step taken from it: energy of the
        evaluated state (the stepper's scratch data), active contacts, normal impulses / h."""
        d = stepper._smooth.data
        mujoco.mj_energyPos(stepper._smooth.smooth_model, d)
        mujoco.mj_energyVel(stepper._smooth.smooth_model, d)
        self.energy[k] = d.energy
        space = impulse.space
        self.ncon[k] = space.n_contacts
        self.force[k] = float(impulse.normal[space.n_limits:].sum()) / stepper.timestep

    def result(self, name, h, n, frames, wall):
        return SimulationResult(
            model=name, timestep=h, time=np.arange(n + 1) * h,
            qpos=self.qpos[: n + 1].copy(), qvel=self.qvel[: n + 1].copy(), ctrl=self.ctrl[:n].copy(),
            potential_energy=self.energy[: n + 1, 0].copy(), kinetic_energy=self.energy[: n + 1, 1].copy(),
            contact_count=self.ncon[: n + 1].copy(), normal_force=self.force[: n + 1].copy(),
            video_frames=frames, wall_time=wall,
        )
