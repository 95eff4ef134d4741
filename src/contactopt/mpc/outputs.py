"""Outputs of a closed-loop run: an MP4 of the plant and a PNG of the metric, controls and timing."""

from __future__ import annotations

import mujoco
import numpy as np

__all__ = ["plot_mpc", "write_video"]


def write_video(model: mujoco.MjModel, result, path, *, fps: float = 30.0, width: int = 640,
                height: int = 480, camera: str | None = "video") -> int:
    """Render the recorded states of an :class:`~contactopt.mpc.MPCResult` into an MP4 at ``fps``
    frames per simulated second, ``width × height`` pixels, from ``camera`` (a camera name of the
    model; an automatic tracking camera when the model has none of that name); returns frames."""
    from ..render import OffscreenRenderer, VideoWriter

    data = mujoco.MjData(model)
    if result.mocap_pos is not None:
        data.mocap_pos[:] = result.mocap_pos
        data.mocap_quat[:] = result.mocap_quat
    t = result.time
    if t.size == 0:
        return 0
    frame_times = np.arange(t[0], t[-1] + 1e-9, 1.0 / fps)
    idx = np.minimum(np.searchsorted(t, frame_times), t.size - 1)
    n = 0
    with OffscreenRenderer(model, width, height, camera=camera) as renderer, VideoWriter(path, fps) as video:
        for i in idx:
            data.qpos[:] = result.qpos[i]
            data.qvel[:] = result.qvel[i]
            mujoco.mj_forward(model, data)
            video.append(renderer.render(data))
            n += 1
    return n


def plot_mpc(task_name: str, result, path, *, metric_label: str = "task cost") -> None:
    """PNG of a closed-loop run: the task metric, the controls, and the planner's update time
    and policy lag against simulated time."""
    from ..plots import new_figure, save_figure

    fig, axes = new_figure(3)
    ax = axes[0, 0]
    ax.plot(result.time, result.metric, color="k", lw=1.3)
    if result.time_to_success is not None:
        ax.axvline(result.time_to_success, color="tab:green", ls="--", lw=1, label="success")
    if result.time_of_failure is not None:
        ax.axvline(result.time_of_failure, color="tab:red", ls="--", lw=1, label="failure")
    for push in result.pushes:
        ax.axvspan(push.time, push.time + push.duration, color="tab:orange", alpha=0.3, label=f"push on {push.body}")
    if result.time_to_success is not None or result.time_of_failure is not None or result.pushes:
        ax.legend(loc="best", fontsize=8)
    ax.set_ylabel(metric_label)
    ax.set_title(f"{task_name}: {result.mode} MPC, slowdown {result.slowdown:g}, "
                 f"{'success' if result.success else 'no success'}")
    ax = axes[1, 0]
    ax.plot(result.time, result.ctrl, lw=0.8)
    ax.set_ylabel("controls")
    ax = axes[2, 0]
    ups = [u for u in result.updates]
    ax.plot([u.t_state for u in ups], [u.compute_time * 1e3 for u in ups], ".", ms=2,
            label="update wall time [ms]")
    applied = [u for u in ups if u.t_apply is not None]
    ax.plot([u.t_state for u in applied], [(u.t_apply - u.t_state) * 1e3 for u in applied], ".", ms=2,
            label="policy lag [ms sim]")
    ax.set_ylabel("ms")
    ax.set_xlabel("simulated time [s]")
    ax.legend(loc="best", fontsize=8)
    for row in axes[:, 0]:
        row.grid(alpha=0.3)
    save_figure(fig, path)
