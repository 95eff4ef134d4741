"""Derivatives of the iLQG paper's smooth contact model on a humanoid lying on the floor.

Compares :meth:`SmoothContactDynamics.linearize` (analytic in velocity and control, first order
in position) with finite differences of the whole step, and times one step, the analytic and
the finite-difference Jacobians against MuJoCo's own ``mj_step``::

    python examples/smooth_contact_derivatives.py

Timings depend on the machine's load; the relative errors do not.
"""

import time

import mujoco
import numpy as np

import contactopt
from contactopt.contact import SmoothContactDynamics, SmoothContactModel


def per_call_ms(fn, n: int) -> float:
    """Milliseconds per call of ``fn`` over ``n`` calls after one warm-up call."""
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e3


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """``‖a − b‖ / ‖b‖`` (Frobenius)."""
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main() -> None:
    plant = contactopt.load_model("humanoid")
    data = mujoco.MjData(plant)
    for _ in range(600):  # 3 s of MuJoCo: the humanoid falls and lies on the floor
        mujoco.mj_step(plant, data)
    model = contactopt.load_model("humanoid", timestep=0.008)  # the paper's planner step
    dyn = SmoothContactDynamics(model, SmoothContactModel(eta=0.4), nthread=1)
    rng = np.random.default_rng(0)
    x = np.concatenate([data.qpos, data.qvel + 0.3 * rng.standard_normal(model.nv)])
    u = rng.uniform(-0.5, 0.5, model.nu)
    q, v = x[:model.nq], x[model.nq:]

    A, B = dyn.linearize(x, u)
    A_fd, B_fd = dyn.linearize(x, u, mode="fd")
    nv = model.nv
    print(f"contacts within w_max: {dyn.step(q, v, u).impulse.space.n_contacts}")
    print(f"relative error against finite differences: position columns {relative_error(A[:, :nv], A_fd[:, :nv]):.1e}, "
          f"velocity columns {relative_error(A[:, nv:], A_fd[:, nv:]):.1e}, controls {relative_error(B, B_fd):.1e}")
    print(f"one step {per_call_ms(lambda: dyn.step(q, v, u), 50):.2f} ms, "
          f"analytic Jacobian {per_call_ms(lambda: dyn.linearize(x, u), 20):.2f} ms, "
          f"finite differences {per_call_ms(lambda: dyn.linearize(x, u, mode='fd'), 5):.1f} ms, "
          f"mj_step {per_call_ms(lambda: mujoco.mj_step(plant, data), 200) * 1e3:.0f} µs")


if __name__ == "__main__":
    main()
