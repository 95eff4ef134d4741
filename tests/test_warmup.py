"""``contactopt warmup`` compiles the numba kernels into the cache that later processes load.

The IDTO family is warmed into an empty cache (``NUMBA_CACHE_DIR`` in a temporary folder); a
second process then runs IDTO closed loops on tasks the warm-up does not use and must compile
nothing (numba counts every compilation as a cache miss).  The other families take minutes to
compile cold; they run once before every parallel test pass (``tests/conftest.py``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from contactopt.cli import main
from contactopt.errors import ParameterError
from contactopt.warmup import KERNEL_FAMILIES, warm_kernels

_COUNT_MISSES = r'''
import json, sys
import numba
from contactopt.mpc.task_runner import run_task
from contactopt.tasks import load_task
for name in sys.argv[1:]:
    run_task(load_task(name).task(), "idto", seed=3, seconds=0.1, lag=0.02)
misses = {}
for modname, mod in list(sys.modules.items()):
    if modname.startswith("contactopt"):
        for attr, obj in vars(mod).items():
            if isinstance(obj, numba.core.registry.CPUDispatcher) and obj.__module__ == modname:
                if sum(obj.stats.cache_misses.values()):
                    misses[f"{modname}.{attr}"] = [str(s) for s in obj.stats.cache_misses]
print(json.dumps(misses))
'''


@pytest.mark.slow
def test_a_warmed_family_is_loaded_not_compiled_by_other_runs(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    warm = "from contactopt.warmup import warm_kernels; warm_kernels(['idto'], jobs=1)"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True, timeout=600)
    assert any((tmp_path / "numba").rglob("*.nbi")), "the warm-up wrote no cache index"
    proc = subprocess.run([sys.executable, "-c", _COUNT_MISSES, "spinner", "quadruped"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    misses = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not misses, f"compiled after the warm-up: {misses}"


def test_bad_arguments_are_named():
    families = "gdd, ilqg, idto, convex"
    with pytest.raises(ParameterError, match=f"kernel family 'gpu'; choose from {families}"):
        warm_kernels(["gpu"])
    with pytest.raises(ParameterError, match="jobs must be a positive integer, got 0"):
        warm_kernels(["ilqg"], jobs=0)
    assert set(KERNEL_FAMILIES) == {"gdd", "ilqg", "idto", "convex"}


def test_cli_reports_each_family_and_errors_in_one_line(capsys):
    assert main(["warmup", "--family", "ilqg", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["families"]
    assert [r["family"] for r in rows] == ["ilqg"] and rows[0]["seconds"] > 0
    assert main(["warmup", "--family", "ilqg,nope"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == ("contactopt: error: unknown kernel family 'nope'; "
                           "choose from gdd, ilqg, idto, convex")
