"""``contactopt bench remote``: the policy server's round trip over loopback.

A ``contactopt serve humanoid-getup`` server runs in a separate process on 127.0.0.1; the
benchmark opens a paused session, plans once from the task's initial state (an iLQG policy
of the humanoid: ``U``, ``X``, ``K`` on the plan's grid) and then measures

* ``round_trip_ms`` (median, p99): a ``Step`` that sends the humanoid state and receives the
  whole iLQG policy — serialization on both ends included, decoding into a client-side
  policy not (that is ``decode_ms``);
* ``state_only_ms``: a ``Step`` whose reply carries no policy (the client already has it);
* ``policy_replies_per_s``: full-policy replies served per second to one client;
* ``planner_updates_per_s``: new policies per second a live session delivers to a client
  that keeps sending states (the planner's rate on this machine, through the network);
* with ``--seeds N`` (default 3: seeds ``0..N-1``) or ``--seeds A:B`` (an unseen range, e.g.
  ``1000:1016``): each closed-loop task's success rate and median time to success, in-process
  ``--mode async`` vs remote (same seeds, the task's
  first planner): by default the acrobot (iLQG) and the IDTO quadruped and hopper (their
  planner-independent forms, :mod:`contactopt.tasks.idto_form`); ``--tasks`` picks others.

Target (issue 22): round trip p99 under 2 ms.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import numpy as np

from ..errors import ContactoptError, ParameterError
from . import Benchmark, format_table, register_benchmark

__all__ = ["run", "table"]

TASK = "humanoid-getup"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(task: str, planner: str):
    """A ``contactopt serve`` subprocess on a free loopback port; returns ``(process, address)``."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "contactopt", "serve", task, "--planner", planner, "--port",
                             str(port), "--max-sessions", "8"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    line = proc.stdout.readline()
    if "listening" not in line:
        proc.kill()
        raise ContactoptError(f"bench remote: the server did not start ({line.strip() or 'no output'})")
    return proc, f"127.0.0.1:{port}"


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _stats(name: str, seconds) -> dict:
    a = 1e3 * np.asarray(seconds)
    return {f"{name}_median": float(np.median(a)), f"{name}_p99": float(np.percentile(a, 99))}


def _round_trips(address: str, min_time: float) -> dict:
    import grpc
    import mujoco

    from ..remote.client import _Connection
    from ..remote.messages import decode_policy, encode_state, pb
    from ..tasks import load_task

    task = load_task(TASK).task()
    model = task.load_plant()
    data = mujoco.MjData(model)
    task.reset(model, data, 0)
    conn = _Connection(address, paused=True, client_name="bench", timeout=60.0)
    try:
        conn.open()
        req = pb().ResetRequest(timeout_s=60.0)
        encode_state(req.state, data.time, data.qpos, data.qvel, data.act)
        reply = conn.call("Reset", req, timeout=65.0)
        policy_bytes = reply.policy.ByteSize()
        seq = reply.policy.sequence
        full = pb().StepRequest(known_sequence=0)
        encode_state(full.state, data.time, data.qpos, data.qvel, data.act)
        light = pb().StepRequest(known_sequence=seq)
        light.state.CopyFrom(full.state)
        n = max(1000, int(2000 * min_time / 0.2))
        for _ in range(50):  # warm up
            conn.call("Step", full)
        rtt, rtt_light, decode = [], [], []
        start = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            r = conn.call("Step", full)
            rtt.append(time.perf_counter() - t0)
        wall = time.perf_counter() - start
        for _ in range(n):
            t0 = time.perf_counter()
            conn.call("Step", light)
            rtt_light.append(time.perf_counter() - t0)
        for _ in range(200):
            t0 = time.perf_counter()
            decode_policy(r.policy, conn.layout)
            decode.append(time.perf_counter() - t0)
        # a live session: new policies per second while the client keeps sending states
        conn.open_args["paused"] = False
        conn.open()
        known, got, live_start = 0, 0, time.perf_counter()
        while time.perf_counter() - live_start < max(2.0, 10 * min_time):
            step = pb().StepRequest(known_sequence=known, wait_s=1.0, min_planned_from=-np.inf)
            encode_state(step.state, data.time + (time.perf_counter() - live_start), data.qpos, data.qvel, data.act)
            r = conn.call("Step", step)
            if r.has_policy:
                known, got = r.policy.sequence, got + 1
        live = time.perf_counter() - live_start
    except grpc.RpcError as exc:
        raise ContactoptError(f"bench remote: {exc.code().name}: {exc.details()}") from None
    finally:
        conn.close()
    return {"task": TASK, "nq": model.nq, "nv": model.nv, "nu": model.nu,
            "policy_kib": policy_bytes / 1024, "calls": n, **_stats("round_trip_ms", rtt),
            **_stats("state_only_ms", rtt_light), "decode_ms_median": float(np.median(decode) * 1e3),
            "policy_replies_per_s": n / wall, "planner_updates_per_s": got / live,
            "target_p99_ms": 2.0}


#: the closed-loop comparison's tasks (issue 22: acrobot, hopper, quadruped at least)
CLOSED_LOOP_TASKS = ("acrobot", "quadruped", "hopper")


def _success(seeds: range, name: str = "acrobot") -> dict:
    from ..mpc.task_runner import run_task
    from ..remote import PolicyServer
    from ..remote.cli import remote_run
    from ..tasks import load_task

    task = load_task(name).task()
    if task is None:
        raise ContactoptError(f"bench remote: task {name!r} has no planner-independent form to serve")
    planner = task.default_planner
    local = [run_task(task, planner, seed=s, mode="async", stop_on_success=True).report for s in seeds]
    with PolicyServer(task, planner=planner, port=0) as srv:
        remote = [remote_run(task, f"127.0.0.1:{srv.port}", seed=s, stop_on_success=True)[2] for s in seeds]

    def rate(reports):
        t = [r["time_to_success"] for r in reports if r["success"]]
        return {"success": sum(r["success"] for r in reports), "of": len(reports),
                "time_to_success_median": float(np.median(t)) if t else None}

    return {"task": name, "planner": planner, "seeds": f"{seeds.start}:{seeds.stop}", "in_process_async": rate(local),
            "remote": rate(remote),
            "remote_round_trip_ms_median": float(np.median([r["remote"]["round_trip_ms_median"] for r in remote])),
            "remote_transport_ms_median": float(np.median([r["remote"]["transport_ms_median"] for r in remote]))}


def run(models=None, min_time: float = 0.2, seeds: int | range = 3, tasks=None, **_) -> dict:
    """Round trip, replies/s and planner updates/s over loopback; success in-process vs remote.

    Args:
      models: not used (the benchmark's task is fixed); must be None.
      min_time: scales the number of timed calls (1,000 at the default 0.2).
      seeds: seeds of the success comparison: a ``range`` (``--seeds A:B``, e.g. an unseen
        ``1000:1016``) or a count ``N`` (seeds ``0..N-1``; 0 or an empty range skips it).
      tasks: bundled tasks of the success comparison (default :data:`CLOSED_LOOP_TASKS`).

    Returns:
      ``{"benchmark", "transport", "rows": [round-trip row], "closed_loop": [{"task", "planner",
      "seeds", "in_process_async": {"success", "of", "time_to_success_median"}, "remote": {...},
      "remote_round_trip_ms_median", "remote_transport_ms_median"}, ...]}``.
    """
    if models:
        raise ContactoptError("bench remote uses the humanoid-getup task; --model does not apply")
    try:
        import grpc  # noqa: F401
    except ImportError:
        raise ContactoptError("bench remote needs grpcio: pip install contactopt[server]") from None
    proc, address = _serve(TASK, "ilqg")
    try:
        rows = [_round_trips(address, min_time)]
    finally:
        _stop(proc)
    out = {"benchmark": "remote", "transport": "loopback, server in a separate process", "rows": rows}
    if not isinstance(seeds, range):
        if isinstance(seeds, bool) or int(seeds) != seeds or seeds < 0:
            raise ParameterError(f"bench remote: seeds must be a count >= 0 or a range, got {seeds!r}")
        seeds = range(int(seeds))
    if len(seeds):
        out["closed_loop"] = [_success(seeds, name) for name in (tasks or CLOSED_LOOP_TASKS)]
    return out


def table(result: dict) -> str:
    """Readable rendering of :func:`run`'s result."""
    text = format_table(result["rows"], [
        ("task", "task", "{}"), ("policy_kib", "policy [KiB]", "{:.0f}"),
        ("round_trip_ms_median", "rtt med [ms]", "{:.3f}"), ("round_trip_ms_p99", "rtt p99 [ms]", "{:.3f}"),
        ("state_only_ms_median", "state-only med [ms]", "{:.3f}"), ("decode_ms_median", "decode [ms]", "{:.3f}"),
        ("policy_replies_per_s", "replies/s", "{:,.0f}"), ("planner_updates_per_s", "planner updates/s", "{:.1f}")])
    loops = result.get("closed_loop") or []
    if loops:
        text += "\n"
    def seconds(value):
        return "none" if value is None else f"{value:.2f} s"

    for cl in loops:
        a, b = cl["in_process_async"], cl["remote"]
        text += (f"\n{cl['task']} ({cl['planner']}, seeds {cl['seeds']}): in-process async {a['success']}/{a['of']} "
                 f"(median time to success {seconds(a['time_to_success_median'])}), remote {b['success']}/{b['of']} "
                 f"({seconds(b['time_to_success_median'])}); "
                 f"remote round trip {cl['remote_round_trip_ms_median']:.2f} ms, "
                 f"transport {cl['remote_transport_ms_median']:.2f} ms")
    return text


register_benchmark(Benchmark(
    name="remote",
    description="policy server over loopback: round trip (humanoid state, iLQG policy), updates/s, success",
    run=run,
    table=table,
    options=("seeds", "tasks"),
    seed_ranges=True,
))
