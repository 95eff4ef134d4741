"""The compiled per-step MuJoCo loops of the IDTO problem equal the Python loops bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from contactopt import native
from contactopt.bench.idto_bench import idto_tasks, open_loop_problem
from contactopt.solvers.idto import problem as problem_module


def _evaluate(problem, q, rng):
    """Residual, trajectory, linearization and a retraction of ``q`` on ``problem``."""
    lin = problem.linearize(q)
    tr = problem.trajectory(q)
    dq = rng.normal(scale=1e-2, size=(problem.T, problem.nv))
    return {"r": lin.r, "Jq": lin.Jq, "Jv": lin.Jv, "Jtau": lin.Jtau, "tau": tr.tau, "v": tr.v,
            "retract": problem.retract(q, dq)}


@pytest.mark.skipif(not native.NATIVE, reason="no native MuJoCo calls in this installation")
@pytest.mark.parametrize("name", ["acrobot", "spinner", "hand-ball"])
def test_native_rigid_terms_and_retraction_match_the_python_loops(name, monkeypatch):
    """``mj_inverse``/``mj_fullM``/``mjd_inverseFD`` per step and ``mj_integratePos`` per knot run
    as compiled loops (threads included); the results are those of the Python loops exactly —
    a hinge-only model, one with contact, and one with a free (quaternion) body."""
    task = idto_tasks([name])[0]
    planner, q_guess = open_loop_problem(task, workers=2, horizon=12)
    problem = planner.problem
    rng = np.random.default_rng(3)
    q = problem.retract(q_guess, rng.normal(scale=0.05, size=(problem.T, problem.nv)))
    native = _evaluate(problem, q, np.random.default_rng(4))
    monkeypatch.setattr(problem_module, "NATIVE_STEPS", False)
    python = _evaluate(problem, q, np.random.default_rng(4))
    problem.close()
    for key, value in native.items():
        assert np.array_equal(value, python[key]), key


def test_retract_checks_the_trajectory_it_writes_through_pointers():
    """A trajectory of the wrong shape is refused (the compiled loop would write past its end);
    any float dtype is converted."""
    from contactopt.errors import ShapeError

    task = idto_tasks(["spinner"])[0]
    planner, q_guess = open_loop_problem(task, workers=1, horizon=8)
    problem = planner.problem
    dq = np.zeros((problem.T, problem.nv))
    with pytest.raises(ShapeError):
        problem.retract(q_guess[:-1], dq)
    out = problem.retract(q_guess.astype(np.float32), dq)
    assert out.dtype == np.float64 and np.array_equal(out, q_guess.astype(np.float32).astype(float))
    problem.close()
