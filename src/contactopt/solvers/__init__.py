"""Trajectory optimizers.  Each has a settings dataclass, ``solve()``, a warm start and a result object.

* :mod:`contactopt.solvers.ilqg` — iterative LQG with state regularization, the
  improved value update, expected-reduction line search and control limits
  (Tassa, Erez & Todorov 2012).
* :mod:`contactopt.solvers.idto` — inverse-dynamics trajectory optimization: trust-region
  Gauss–Newton over ``q_1 … q_T``.
* :mod:`contactopt.solvers.gdd` — goal-directed dynamics (Todorov): a cost over
  accelerations in, physical controls out.

The solvers share one vocabulary: ``XSettings`` (a validated dataclass), ``XResult``
(``status`` an ``XStatus``, ``iterations`` an int, ``log`` a tuple of frozen ``XIterationLog``
records, ``timing()`` with the keys ``derivatives``, ``solve``, ``line_search`` and ``total``),
``solve()`` and — for iLQG and IDTO — ``solve_from_warm_start()`` (GDD warm-starts internally).

The iLQG names are imported here directly; the IDTO and GDD solver names are re-exported
lazily (on first access), so that ``import contactopt.solvers`` loads neither.  GDD's cost
terms are only in their subpackage.
"""

from importlib import import_module as _import_module

from . import ilqg as _ilqg
from .ilqg import *  # noqa: F403  (the iLQG names, listed in ilqg.__all__)

_IDTO_NAMES = ("BandedHessian", "ConvergenceCriteria", "IDTOIterationLog", "IDTOProblem", "IDTOResult",
               "IDTOSettings", "IDTOSolver", "IDTOStatus", "Linearization", "Trajectory", "gauss_newton_system")
_GDD_NAMES = ("ActuationArrays", "ActuationModel", "DualUpdate", "GDDIterationLog", "GDDProblem", "GDDResult",
              "GDDSettings", "GDDSolver", "GDDStatus", "LineSearch", "build_problem", "gdd_step")
#: lazily re-exported names → the subpackage that defines them
_LAZY = {**dict.fromkeys(_IDTO_NAMES, "idto"), **dict.fromkeys(_GDD_NAMES, "gdd")}
_SUBPACKAGES = ("gdd", "idto", "ilqg")

__all__ = sorted([*_ilqg.__all__, *_LAZY])


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(_import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:
        return _import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBPACKAGES))
