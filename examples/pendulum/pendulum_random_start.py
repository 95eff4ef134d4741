"""The pendulum swing-up of pendulum_task.py from seeded random states: the angle uniform in
±π and the velocity in ±2 rad/s (``contactopt run examples/pendulum/pendulum_random_start.py
--planner ilqg --seed N``)."""
import dataclasses
import runpy
from pathlib import Path

import numpy as np


def random_state(model, data, rng):
    data.qpos[0] = rng.uniform(-np.pi, np.pi)
    data.qvel[0] = rng.uniform(-2.0, 2.0)


_base = runpy.run_path(str(Path(__file__).with_name("pendulum_task.py")))["TASK"]
TASK = dataclasses.replace(_base, name="pendulum-swingup-random", initial_state=random_state)
