"""``contactopt sweep`` on a real two-node Ray cluster (``ray.cluster_utils.Cluster``, one CPU per node)."""

import json
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from contactopt.sweep import RayEngine, SweepOutput, plan_sweep, run_sweep
from contactopt.sweep.engines import THREAD_ENV
from contactopt.sweep.units import CRASH_ONCE_ENV

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = str(ROOT / "examples" / "pendulum" / "pendulum_task.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two nodes of one CPU; this process is the driver.  The fault hook's folder is in the nodes'
    environment (set before they start); a test arms it."""
    from ray.cluster_utils import Cluster

    crash = tmp_path_factory.mktemp("crash")
    saved = os.environ.get(CRASH_ONCE_ENV)
    os.environ[CRASH_ONCE_ENV] = str(crash)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": dict(THREAD_ENV)})
        yield c, crash
    finally:
        ray.shutdown()
        c.shutdown()
        if saved is None:
            os.environ.pop(CRASH_ONCE_ENV, None)
        else:
            os.environ[CRASH_ONCE_ENV] = saved


def _run(tmp_path, name, seeds):
    plan = plan_sweep(PENDULUM, seeds=seeds, seconds=0.3, lag=0.02)
    out = SweepOutput(tmp_path / name)
    with RayEngine() as engine:  # joins the running cluster and leaves it running
        assert engine.workers == 2
        result = run_sweep(plan, out, engine)
    return plan, result, [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]


def test_units_run_on_both_nodes(cluster, tmp_path):
    plan, result, lines = _run(tmp_path, "two.jsonl", range(4))
    assert [r["id"] for r in lines] == [u.id for u in plan.units]
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2 and {r["node"] for r in lines} == nodes
    assert all(r["failure"] in (None, "timeout") for r in lines) and result["engine"] == "ray"


def test_a_killed_worker_is_retried_and_each_unit_appears_once(cluster, tmp_path):
    _, crash = cluster
    (crash / "arm").touch()
    _, result, lines = _run(tmp_path, "kill.jsonl", range(10, 14))
    assert (crash / "crashed").exists()  # a worker did die mid-sweep
    assert sorted(r["seed"] for r in lines) == [10, 11, 12, 13] and result["ran"] == 4
    assert all(r["failure"] in (None, "timeout") for r in lines)


def test_address_check_passes_the_head_and_refuses_a_port_without_one(cluster):
    """The fast pre-check of ``--address`` (:func:`check_ray_address`) lets a real GCS through
    (Ray's token authentication answers UNAUTHENTICATED to the unauthenticated probe: still a GCS)."""
    import socket
    import time

    from contactopt.errors import ParameterError
    from contactopt.sweep.engines import check_ray_address

    c, _ = cluster
    t0 = time.monotonic()
    check_ray_address(c.address, 3.0)
    assert time.monotonic() - t0 < 3.0
    srv = socket.socket()  # a listener that is not a Ray head
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        with pytest.raises(ParameterError, match="no Ray cluster reachable there"):
            check_ray_address(f"127.0.0.1:{srv.getsockname()[1]}", 0.5)
    finally:
        srv.close()


def test_offline_solves_from_many_initial_states_run_on_both_nodes_and_survive_a_killed_worker(cluster, tmp_path):
    """``contactopt optimize --seeds --ray``: the same engine, one row per initial state."""
    from contactopt.offline import offline_lost_row, plan_offline_units, run_offline_unit

    _, crash = cluster
    for f in ("arm", "crashed"):
        (crash / f).unlink(missing_ok=True)
    (crash / "arm").touch()
    units = plan_offline_units(PENDULUM, range(4), backend="compliant", iterations=3)
    out = SweepOutput(tmp_path / "offline.jsonl")
    with RayEngine() as engine:
        result = run_sweep(type("Plan", (), {"units": units}), out, engine, run=run_offline_unit,
                           lost_row=offline_lost_row)
    lines = [json.loads(x) for x in (tmp_path / "offline.jsonl").read_text().splitlines()]
    assert (crash / "crashed").exists() and result["ran"] == 4
    assert [r["seed"] for r in lines] == [0, 1, 2, 3] and all(r["error"] is None and r["finite"] for r in lines)
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert {r["node"] for r in lines} <= nodes  # which nodes ran them depends on the retry's timing
