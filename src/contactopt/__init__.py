"""contactopt: optimization-based control through contact on MuJoCo models.

The foundation layer exposed here: model loading, the bundled model library,
state and configuration-manifold helpers, the actuation map, plain MuJoCo
simulation with recording, rendering and the benchmark harness.

Example::

    import contactopt
    model = contactopt.load_model("humanoid")
    result = contactopt.simulate(model, seconds=3.0)
    print(result.summary()["energy_final"])
"""

from __future__ import annotations

__version__ = "0.1.0"

# first: imports mujoco even under a MUJOCO_GL it rejects (rendering then says so, in one line)
from . import _gl_env  # noqa: F401

from .errors import (
    ContactoptError,
    ModelError,
    ModelLoadError,
    ModelNotFoundError,
    NonFiniteError,
    ParameterError,
    RenderError,
    ShapeError,
)
from .model import (
    ActuationMap,
    State,
    actuation_map,
    actuator_moment_matrix,
    get_state,
    integrate_position,
    load_model,
    model_name,
    num_steps,
    pack_state,
    position_difference,
    reset_to_keyframe,
    set_state,
    state_difference,
    state_integrate,
    state_size,
    tangent_size,
    total_mass,
    unpack_state,
    with_timestep,
)
from .models import BUNDLED_MODELS
from .simulate import SimulationError, SimulationResult, simulate
from .task import Task, load_task_file

__all__ = [
    "__version__",
    "ContactoptError", "ModelError", "ModelLoadError", "ModelNotFoundError", "NonFiniteError",
    "ParameterError", "RenderError", "ShapeError", "SimulationError",
    "ActuationMap", "State", "actuation_map", "actuator_moment_matrix", "get_state",
    "integrate_position", "load_model", "model_name", "num_steps", "pack_state",
    "position_difference", "reset_to_keyframe", "set_state", "state_difference",
    "state_integrate", "state_size", "tangent_size", "total_mass", "unpack_state",
    "with_timestep", "BUNDLED_MODELS", "Task", "load_task_file", "SimulationResult", "simulate", "list_models",
]


def list_models() -> list[str]:
    """Names of the bundled models (``contactopt models`` shows them with dimensions)."""
    return list(BUNDLED_MODELS)


def __getattr__(name):
    # ``contactopt.planners`` imports the solvers: loaded on first use, so that importing the
    # package (and listing models or tasks) stays cheap
    if name == "planners":
        import importlib

        return importlib.import_module(".planners", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
