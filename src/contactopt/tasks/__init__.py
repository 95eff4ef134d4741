"""Task registry: ``contactopt run TASK --planner P`` finds its runner here.

A task is a named scenario on a bundled model (``acrobot-swingup``, ``humanoid-reach``,
...) with its own success test.  Each planner that can run it registers a *runner*:

.. code-block:: python

    def run(*, seconds=None, seed=0, video=None, plot=None, **options) -> dict:
        ...

A runner simulates the task closed-loop (``seconds`` of simulated time, default the
task's own; ``seed`` picks the initial state), writes the optional MP4 ``video`` and PNG
``plot`` paths, and returns a JSON-ready report that has at least the keys
``task``, ``planner``, ``success`` (bool) and ``time_to_success`` (seconds or None).

Task modules register themselves on import; the built-in ones are imported lazily by
:func:`available_tasks` / :func:`load_task` (listing tasks must stay cheap: runners import
their heavy dependencies inside the function).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from ..errors import ContactoptError

__all__ = ["TaskSpec", "register_task", "load_task", "available_tasks", "UnknownTaskError",
           "TaskRunner"]

TaskRunner = Callable[..., dict]

#: Modules that register the built-in tasks (imported on first use of the registry), in
#: registration order (the order of :func:`available_tasks`).
_BUILTIN_MODULES = (
    "contactopt.tasks.spinner",
    "contactopt.tasks.hopper",
    "contactopt.tasks.acrobot",
    "contactopt.tasks.swimmer_reach",
    "contactopt.tasks.hopper_hop",
    "contactopt.tasks.gdd_tasks",
    "contactopt.tasks.humanoid_getup",
    "contactopt.tasks.humanoid_push",
    "contactopt.tasks.quadruped",
    "contactopt.tasks.hand_ball",
    "contactopt.tasks.bimanual_box",
)


class UnknownTaskError(ContactoptError, KeyError):
    """No task of that name is registered (or it has no runner for the planner asked)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


@dataclass(frozen=True)
class TaskSpec:
    """A registered task.

    Attributes:
      name: CLI name, e.g. ``"acrobot-swingup"``.
      model: bundled model name the task runs on.
      description: one line for listings.
      runners: planner name → runner (see the module docstring).
      default_seconds: simulated time of a run when ``--seconds`` is not given.
      task_factory: optional ``() -> contactopt.Task``: the scenario as a planner-independent
        task, which lets every registered planner run it (:meth:`task`).
    """

    name: str
    model: str
    description: str
    runners: dict = field(compare=False)
    default_seconds: float = 5.0
    task_factory: Callable | None = field(default=None, compare=False)

    def task(self):
        """The scenario as a :class:`contactopt.Task`, or None when it has no planner-independent form."""
        return None if self.task_factory is None else self.task_factory()

    @property
    def target_slowdown(self) -> float:
        """Wall seconds per simulated second at which the task is meant to run: the largest
        ``target_slowdown`` of its runners' task definitions (1 = real time when none has one)."""
        return max((float(getattr(getattr(r, "task", None), "target_slowdown", 1.0))
                    for r in self.runners.values()), default=1.0)

    @property
    def planners(self) -> tuple[str, ...]:
        """Names of the planners that can run this task, sorted."""
        return tuple(sorted(self.runners))

    def runner(self, planner: str | None) -> TaskRunner:
        """The runner of ``planner`` (the only one when ``planner`` is None and there is one)."""
        if planner is None:
            if len(self.runners) == 1:
                return next(iter(self.runners.values()))
            raise UnknownTaskError(f"task {self.name!r} runs with several planners; pick one with "
                                   f"--planner ({', '.join(self.planners)})")
        try:
            return self.runners[planner]
        except KeyError:
            raise UnknownTaskError(f"task {self.name!r} has no {planner!r} planner (it runs with: "
                                   f"{', '.join(self.planners)})") from None


_TASKS: dict[str, TaskSpec] = {}
_builtins_loaded = False


def register_task(name: str, planner: str, runner: TaskRunner, *, model: str, description: str,
                  default_seconds: float = 5.0, task_factory: Callable | None = None) -> TaskSpec:
    """Register ``runner`` as the way ``planner`` runs task ``name``.

    A task may be registered once per planner; the model must agree between planners.

    Returns:
      the (possibly extended) :class:`TaskSpec`.
    """
    if not callable(runner):
        raise TypeError(f"runner of task {name!r} must be callable")
    old = _TASKS.get(name)
    if old is not None:
        if planner in old.runners:
            raise ValueError(f"task {name!r} already has a {planner!r} runner")
        if old.model != model:
            raise ValueError(f"task {name!r} runs on model {old.model!r}, not {model!r}")
        runners = {**old.runners, planner: runner}
        spec = TaskSpec(name, model, old.description, runners, old.default_seconds,
                        old.task_factory or task_factory)
    else:
        spec = TaskSpec(name, model, description, {planner: runner}, float(default_seconds), task_factory)
    _TASKS[name] = spec
    return spec


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    for module in _BUILTIN_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a planner module that has not landed yet
            if exc.name != module:
                raise


def available_tasks() -> dict[str, TaskSpec]:
    """All registered tasks by name (a copy)."""
    _load_builtins()
    return dict(_TASKS)


def load_task(name: str) -> TaskSpec:
    """The registered task ``name``; :class:`UnknownTaskError` lists the ones that exist."""
    _load_builtins()
    try:
        return _TASKS[name]
    except KeyError:
        known = ", ".join(sorted(_TASKS)) or "none yet: the planners have not landed"
        raise UnknownTaskError(f"unknown task {name!r} (available tasks: {known})") from None
