"""Task registry: a task is a model name, a cost, a success test and defaults.

Planner issues add one module per task and call :func:`register_task`;
``contactopt run TASK`` finds tasks here by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import ContactoptError

__all__ = ["TaskSpec", "register_task", "load_task", "available_tasks", "UnknownTaskError"]


class UnknownTaskError(ContactoptError, KeyError):
    """No task of that name is registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


@dataclass(frozen=True)
class TaskSpec:
    """A registered task.

    Attributes:
      name: CLI name, e.g. ``"acrobot-swingup"``.
      model: bundled model name the task runs on.
      description: one line for listings.
      planners: planner names that can run it (e.g. ``("ilqg", "idto")``).
      factory: callable building the task object from keyword overrides.
    """

    name: str
    model: str
    description: str
    planners: tuple[str, ...]
    factory: Callable[..., object] = field(compare=False)


_TASKS: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add ``spec`` to the registry (a name can be registered once)."""
    if spec.name in _TASKS:
        raise ValueError(f"task {spec.name!r} is already registered")
    _TASKS[spec.name] = spec
    return spec


def available_tasks() -> dict[str, TaskSpec]:
    """All registered tasks by name (a copy)."""
    return dict(_TASKS)


def load_task(name: str) -> TaskSpec:
    """The registered task ``name``; :class:`UnknownTaskError` lists the ones that exist."""
    try:
        return _TASKS[name]
    except KeyError:
        known = ", ".join(sorted(_TASKS)) or "none yet: the planners have not landed"
        raise UnknownTaskError(f"unknown task {name!r} (available tasks: {known})") from None
