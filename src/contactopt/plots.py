"""PNG plots written with matplotlib's Agg canvas (no global backend switch, no display)."""

from __future__ import annotations

import os

import numpy as np

from .render import atomic_output

__all__ = ["plot_simulation", "save_figure", "new_figure"]


def new_figure(rows: int, cols: int = 1, *, width: float = 8.0, row_height: float = 2.4):
    """A matplotlib ``Figure`` with an Agg canvas and a ``(rows, cols)`` array of axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, row_height * rows), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False)
    return fig, axes


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """Save ``fig`` as PNG atomically (a partial file never replaces ``path``)."""
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")


def plot_simulation(result, path: str | os.PathLike) -> None:
    """Plot a :class:`~contactopt.simulate.SimulationResult`: energy, contact count and
    total normal contact force against time, one panel each, into a PNG at ``path``."""
    fig, axes = new_figure(3)
    t = result.time
    ax = axes[0, 0]
    ax.plot(t, result.potential_energy, label="potential", lw=1.2)
    ax.plot(t, result.kinetic_energy, label="kinetic", lw=1.2)
    ax.plot(t, result.total_energy, label="total", lw=1.6, color="k")
    ax.set_ylabel("energy [J]")
    ax.legend(loc="best", fontsize=8)
    ax.set_title(f"{result.model}: passive simulation, h = {result.timestep * 1e3:g} ms")
    ax = axes[1, 0]
    ax.step(t, result.contact_count, where="post", color="tab:purple", lw=1.2)
    ax.set_ylabel("contacts")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax = axes[2, 0]
    ax.plot(t, result.normal_force, color="tab:red", lw=1.2)
    ax.set_ylabel("total normal force [N]")
    ax.set_xlabel("time [s]")
    for row in axes[:, 0]:
        row.grid(alpha=0.3)
    ymax = float(np.max(result.normal_force, initial=0.0))
    if ymax <= 0:
        axes[2, 0].set_ylim(-0.05, 1.0)
    save_figure(fig, path)
