"""Compile the numba kernels ahead of use: ``contactopt warmup``.

The compiled loops (:mod:`contactopt.native`, the iLQG, IDTO and goal-directed solvers, the
convex and compliant contact models) are numba kernels compiled on first use and cached on disk
(``cache=True``: next to each module, or under ``NUMBA_CACHE_DIR``).  A first use compiles for
seconds to minutes (the goal-directed solver alone takes 2–3.5 min on one core), which stalls
a first closed loop and makes a real-time run miss its deadlines.  :func:`warm_kernels` compiles
every *family* of kernels once, each family in its own child process so that several compile at
once, by running the code path that uses them on a bundled model for a few steps; afterwards
every process loads them from the cache.

Families (:data:`KERNEL_FAMILIES`):

* ``"gdd"`` — the goal-directed solver (:mod:`contactopt.solvers.gdd.kernels`): its fused step
  through a ``humanoid-reach`` closed loop, and its general path with end-effector and
  centre-of-mass terms on the humanoid;
* ``"ilqg"`` — iLQG's backward pass and the rollout / finite-difference loops of
  :class:`~contactopt.dynamics.MujocoDynamics`, through an ``acrobot`` closed loop;
* ``"idto"`` — IDTO's per-step loops and the compliant contact model, through ``hopper`` and
  ``bimanual-box`` closed loops (the latter with analytic contact derivatives);
* ``"convex"`` — the convex, invertible contact model (:mod:`contactopt.contact.convex`):
  forward, inverse and batched solves on the humanoid.

A family whose kernels are already cached takes the time its closed loop takes (about a second).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from .errors import ContactoptError, ParameterError

__all__ = ["KERNEL_FAMILIES", "WarmupError", "warm_family", "warm_kernels"]


class WarmupError(ContactoptError):
    """A warm-up child process failed; the message names the family and ends with its stderr."""


def _closed_loop(task_name: str, planner: str, seconds: float) -> None:
    """A few simulated ``seconds`` of ``task_name`` with ``planner``, sync mode at a fixed lag
    (deterministic: no wall-clock dependence)."""
    from .mpc.task_runner import run_task
    from .tasks import load_task

    task = load_task(task_name).task()
    run_task(task, planner, seed=0, seconds=seconds, lag=0.01)


def _warm_gdd() -> None:
    import mujoco

    from .model import load_model
    from .solvers.gdd import (
        CenterOfMassAcceleration,
        Cost,
        Damping,
        EndEffectorAcceleration,
        GDDSolver,
        SpringDamper,
    )

    _closed_loop("humanoid-reach", "gdd", 0.02)  # the fused step (gdd_step, gdd_fast)
    # the general path (an explicit problem: gdd_general) and the per-term kernels it calls
    model = load_model("humanoid")
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    com = data.subtree_com[1].copy()
    hand = data.site_xpos[model.site("left_hand").id] + 0.1
    cost = Cost(EndEffectorAcceleration(model, site="left_hand", target=SpringDamper(hand)),
                CenterOfMassAcceleration(model, target=SpringDamper(com)),  # all axes: one kernel
                CenterOfMassAcceleration(model, target=SpringDamper(com, axes=(1.0, 1.0, 0.0))),
                Damping())
    solver = GDDSolver(model)
    solver.solve(data, cost, problem=solver.problem(data))


def _warm_ilqg() -> None:
    _closed_loop("acrobot", "ilqg", 0.05)


def _warm_idto() -> None:
    _closed_loop("hopper", "idto", 0.05)
    _closed_loop("bimanual-box", "idto", 0.1)


def _warm_convex() -> None:
    import mujoco
    import numpy as np

    from .contact import ContactBatch, ConvexContactModel, ConvexDynamics
    from .model import load_model

    model = load_model("humanoid")
    data = mujoco.MjData(model)
    for _ in range(200):  # settle onto the floor: contacts, so the contact solvers run
        mujoco.mj_step(model, data)
    dynamics = ConvexDynamics(model)
    step = dynamics.forward(data.qpos, data.qvel)
    dynamics.inverse(data.qpos, data.qvel, step.qvel)
    contact = ConvexContactModel()
    A = np.eye(7) + 0.1
    batch = ContactBatch.repeat(A, friction=np.array([0.5, 1.0]), v_min=np.zeros(3),
                                R=np.full(7, 0.1), n_limits=1, count=2)
    for parallel in (False, True):
        forward = contact.forward_batch(batch, -np.ones(batch.size), parallel=parallel)
        contact.inverse_batch(batch, forward.v, parallel=parallel)


#: family name → the code path that compiles it (see the module docstring)
KERNEL_FAMILIES: dict[str, Callable[[], None]] = {
    "gdd": _warm_gdd,
    "ilqg": _warm_ilqg,
    "idto": _warm_idto,
    "convex": _warm_convex,
}


def _unknown_family(name) -> ParameterError:
    choices = ", ".join(KERNEL_FAMILIES)
    return ParameterError(f"unknown kernel family {name!r}; choose from {choices}")


def warm_family(name: str) -> float:
    """Compile (or load from the cache) the kernels of one family in this process.

    Args:
      name: a key of :data:`KERNEL_FAMILIES`.

    Returns:
      Wall seconds it took.
    """
    if name not in KERNEL_FAMILIES:
        raise _unknown_family(name)
    start = time.perf_counter()
    KERNEL_FAMILIES[name]()
    return time.perf_counter() - start


def warm_kernels(families: Iterable[str] | None = None, *, jobs: int | None = None,
                 report: Callable[[str, float], None] | None = None) -> dict[str, float]:
    """Compile the kernels of ``families`` (default: all), each in a child process, ``jobs`` at
    a time (default: the number of CPUs, at most the number of families).

    The children run ``python -m contactopt.warmup FAMILY`` with this process's environment
    (so ``NUMBA_CACHE_DIR`` applies), started in the order given (by default the slowest
    family, ``gdd``, first).

    Args:
      families: names from :data:`KERNEL_FAMILIES`.
      jobs: child processes at once (≥ 1).
      report: called as ``report(family, seconds)`` when a family is done.

    Returns:
      ``{family: wall seconds}``.

    Raises:
      ParameterError: an unknown family or ``jobs`` < 1.
      WarmupError: a child failed (its stderr tail is in the message).
    """
    names = list(KERNEL_FAMILIES) if families is None else list(dict.fromkeys(families))
    unknown = [n for n in names if n not in KERNEL_FAMILIES]
    if unknown:
        raise _unknown_family(unknown[0])
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not (isinstance(jobs, int) and jobs >= 1):
        raise ParameterError(f"jobs must be a positive integer, got {jobs!r}")
    jobs = min(jobs, max(1, len(names)))

    def child(name: str) -> tuple[str, float]:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "contactopt.warmup", name],
                              capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise WarmupError(f"warming the {name!r} kernels failed (exit {proc.returncode}): "
                              f"{proc.stderr.strip()[-1500:]}")
        if report is not None:
            report(name, seconds)
        return name, seconds

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(child, names))


if __name__ == "__main__":  # the child process of warm_kernels
    warm_family(sys.argv[1])
