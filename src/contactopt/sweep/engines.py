"""Engines that run the units of a sweep: in this process, on a local process pool, or on Ray.

Every engine has one interface::

    with make_engine(workers=2) as engine:
        for unit, value, meta in engine.imap_unordered(fn, units):
            ...

``fn`` is a module-level function (picklable by reference) called as ``fn(unit)`` in a worker;
``value`` is what it returned, or a :class:`Lost` when the unit's worker died more than
``max_retries`` times; ``meta`` is ``{"worker": "HOST:PID", "node": NODE_ID, "attempts": n}``.
Results arrive as units finish (any order).  Leaving the ``with`` block (normally, on an error or
on Ctrl-C) stops the workers; units in flight are lost, finished ones were already yielded.

* :class:`InlineEngine`: calls ``fn`` here, in order (``bench tasks``' serial default).
* :class:`LocalPoolEngine`: ``concurrent.futures.ProcessPoolExecutor`` with the spawn start
  method; a dead worker (``BrokenProcessPool``) restarts the pool and resubmits the unfinished
  units — units that were in flight when a worker died are retried one at a time, so a unit that
  kills its worker is found and does not take the others with it.
* :class:`RayEngine`: one Ray remote task per unit (``max_retries`` for dead workers, ``SPREAD``
  scheduling); starts a local Ray instance with ``num_cpus=workers`` unless ``address`` joins an
  existing cluster.  Needs ``pip install "contactopt[ray]"``.

Each worker is single-threaded: the thread variables of :data:`THREAD_ENV` are set in its
environment before it imports anything.
"""

from __future__ import annotations

import collections
import os
import socket
from collections.abc import Callable, Iterable, Iterator

from ..errors import ContactoptError, ParameterError

__all__ = ["THREAD_ENV", "Engine", "InlineEngine", "LocalPoolEngine", "Lost", "RayEngine", "make_engine"]

#: Environment of a worker process: one thread for BLAS/OpenMP, numba and contactopt's own
#: derivative threads (``MujocoDynamics``' default ``nthread``).
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1", "CONTACTOPT_NUM_THREADS": "1"}

RAY_EXTRA = 'pip install "contactopt[ray]"'


class Lost:
    """The outcome of a unit whose worker died on every one of its ``attempts`` (``message`` says how)."""

    def __init__(self, message: str, attempts: int):
        self.message = message
        self.attempts = attempts

    def __repr__(self) -> str:
        return f"Lost({self.message!r}, attempts={self.attempts})"


def _call(fn, unit):
    """Run ``fn(unit)`` in a worker: ``(value, {"worker": "HOST:PID", "node": HOST})``."""
    value = fn(unit)
    host = socket.gethostname()
    return value, {"worker": f"{host}:{os.getpid()}", "node": host}


def _ray_call(fn, unit):
    """Run ``fn(unit)`` in a Ray worker: ``(value, {"worker": "HOST:PID", "node": RAY_NODE_ID})``."""
    import ray

    value = fn(unit)
    return value, {"worker": f"{socket.gethostname()}:{os.getpid()}", "node": ray.get_runtime_context().get_node_id()}


def _warm() -> int:
    """A no-op task that makes a worker import the closed-loop stack and the planners (returns its pid)."""
    from ..mpc import registry, task_runner  # noqa: F401

    registry.names()
    return os.getpid()


class Engine:
    """Base class: ``imap_unordered(fn, units)`` yields ``(unit, value | Lost, meta)``; a context manager.

    Attributes:
      name: ``"inline"``, ``"local"`` or ``"ray"``.
      workers: units run at once (Ray: the cluster's CPUs when joining one).
    """

    name = "engine"
    workers = 1

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (idempotent)."""

    def warm_up(self) -> None:
        """Start every worker and import contactopt in it (so timings exclude start-up)."""

    def imap_unordered(self, fn: Callable, units: Iterable) -> Iterator[tuple]:
        """Yield ``(unit, value, meta)`` for every unit as it finishes (see the module docstring)."""
        raise NotImplementedError


class InlineEngine(Engine):
    """Runs each unit here, in order, in this process (no isolation: a crash ends the sweep)."""

    name = "inline"

    def imap_unordered(self, fn, units):
        """Yield ``(unit, fn(unit), meta)`` in the order of ``units``."""
        host = socket.gethostname()
        for unit in units:
            yield unit, fn(unit), {"worker": f"{host}:{os.getpid()}", "node": host, "attempts": 1}


class _ThreadEnv:
    """Set :data:`THREAD_ENV` in ``os.environ`` while workers are spawned; restore it afterwards."""

    def __init__(self):
        self._saved = None

    def set(self) -> None:
        if self._saved is None:
            self._saved = {k: os.environ.get(k) for k in THREAD_ENV}
            os.environ.update(THREAD_ENV)

    def restore(self) -> None:
        if self._saved is not None:
            for k, v in self._saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            self._saved = None


class LocalPoolEngine(Engine):
    """A spawn-context process pool of ``workers`` single-threaded processes.

    Args:
      workers: processes (>= 1).
      max_retries: times a unit is resubmitted after its worker died (>= 0).
    """

    name = "local"

    def __init__(self, workers: int = 1, *, max_retries: int = 3):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ParameterError(f"--workers must be an integer >= 1, got {workers!r}")
        self.workers = workers
        self.max_retries = int(max_retries)
        self._pool = None
        self._env = _ThreadEnv()
        self.restarts = 0

    def _new_pool(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._env.set()  # inherited by the processes spawned while the engine is open
        self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def _kill_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list(getattr(pool, "_processes", {}).values())  # the pool's own worker processes
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5.0)

    def close(self) -> None:
        """Stop the pool's processes (in-flight units are abandoned) and restore the environment."""
        self._kill_pool()
        self._env.restore()

    def warm_up(self) -> None:
        """Spawn every worker and import contactopt in each."""
        pool = self._pool or self._new_pool()
        futures = [pool.submit(_warm) for _ in range(self.workers)]
        for f in futures:
            f.result()

    def imap_unordered(self, fn, units):
        """Yield ``(unit, value | Lost, meta)`` as units finish; at most ``workers`` in flight."""
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        queue = collections.deque(units)
        suspects: collections.deque = collections.deque()  # in flight when a worker died: run alone
        attempts: dict[int, int] = collections.defaultdict(int)
        running: dict = {}
        while queue or suspects or running:
            pool = self._pool or self._new_pool()
            broken = False
            try:
                if suspects:
                    if not running:
                        unit = suspects.popleft()
                        attempts[id(unit)] += 1
                        running[pool.submit(_call, fn, unit)] = unit
                else:
                    while queue and len(running) < self.workers:
                        unit = queue.popleft()
                        attempts[id(unit)] += 1
                        running[pool.submit(_call, fn, unit)] = unit
            except BrokenProcessPool:  # a worker died before this submission
                (suspects if attempts[id(unit)] > 1 else queue).appendleft(unit)
                attempts[id(unit)] -= 1
                broken = True
            if running and not broken:
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in done:
                    try:
                        value, meta = future.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    unit = running.pop(future)
                    yield unit, value, {**meta, "attempts": attempts[id(unit)]}
            if broken:
                # every unit still in the dead pool failed with it: restart the pool and retry
                # them one at a time, so a unit that kills its worker takes no other unit with it
                lost = list(running.values())
                running.clear()
                self._kill_pool()
                self.restarts += 1
                for unit in lost:
                    n = attempts[id(unit)]
                    if n > self.max_retries:
                        yield unit, Lost(f"its worker process died on all {n} attempts", n), \
                            {"worker": None, "node": None, "attempts": n}
                    else:
                        suspects.append(unit)


def _check_reachable(address: str, timeout: float) -> None:
    """Raise :class:`ParameterError` unless a TCP connection to ``HOST:PORT`` opens within ``timeout`` s."""
    text = address.split("://", 1)[-1]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ParameterError(f"--address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379), 'auto' "
                             f"or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise ParameterError(f"--address {address}: no Ray cluster reachable there within {timeout:g} s "
                             f"({exc.strerror or type(exc).__name__}); start one with `ray start --head`") from None


class _quiet_stderr:
    """Send file descriptor 2 to /dev/null while the block runs (C++ logging included)."""

    def __enter__(self):
        import sys

        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)


def import_ray():
    """The ``ray`` module, or :class:`ContactoptError` naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise ContactoptError(f"--ray needs Ray: {RAY_EXTRA}") from None
    return ray


class RayEngine(Engine):
    """One Ray remote task per unit.

    Args:
      workers: CPUs of the local Ray instance started when ``address`` is None and Ray is not
        initialized yet (>= 1).
      address: ``HOST:PORT`` of an existing cluster's head (``ray start --head``), ``auto``, or
        ``ray://HOST:PORT``; None starts a local instance.
      max_retries: Ray's retries of a task whose worker died.
      connect_timeout: seconds to wait for ``address`` to accept a connection.

    If Ray is already initialized in this process (e.g. a test's cluster), the engine uses it and
    leaves it running; otherwise it shuts down what it started.
    """

    name = "ray"

    def __init__(self, workers: int = 1, *, address: str | None = None, max_retries: int = 3,
                 connect_timeout: float = 5.0):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ParameterError(f"--workers must be an integer >= 1, got {workers!r}")
        self.ray = import_ray()
        self.workers = workers
        self.address = address
        self.max_retries = int(max_retries)
        self._owns = False
        self._remote = None
        ray = self.ray
        if ray.is_initialized():
            self.workers = max(1, int(ray.cluster_resources().get("CPU", workers)))
            return
        import logging

        if address not in (None, "auto"):
            _check_reachable(address, connect_timeout)
        options = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False,
                   "runtime_env": {"env_vars": dict(THREAD_ENV)}}
        try:
            if address is None:
                ray.init(num_cpus=workers, **options)
            else:
                with _quiet_stderr():  # Ray's C++ client logs each failed retry (~20 s of them)
                    ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ParameterError(f"--address {address}: cannot join a Ray cluster: "
                                 f"{' '.join(str(exc).split())[:200]}") from None
        self._owns = True
        if address is not None:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def close(self) -> None:
        """Shut Ray down if this engine started or joined it."""
        if self._owns:
            self._owns = False
            self.ray.shutdown()

    def _task(self):
        if self._remote is None:
            self._remote = self.ray.remote(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False,
                                           scheduling_strategy="SPREAD")(_ray_call)
        return self._remote

    def warm_up(self) -> None:
        """Run one no-op task per CPU (starts the workers and imports contactopt in them)."""
        remote = self.ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_warm)
        self.ray.get([remote.remote() for _ in range(self.workers)])

    def imap_unordered(self, fn, units):
        """Yield ``(unit, value | Lost, meta)`` as units finish; ``2 × workers`` tasks submitted at once."""
        ray = self.ray
        remote = self._task()
        queue = collections.deque(units)
        running: dict = {}
        try:
            while queue or running:
                while queue and len(running) < 2 * self.workers:
                    unit = queue.popleft()
                    running[remote.remote(fn, unit)] = unit
                done, _ = ray.wait(list(running), num_returns=1)
                for ref in done:
                    unit = running.pop(ref)
                    try:
                        value, meta = ray.get(ref)
                    except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                            ray.exceptions.OutOfMemoryError) as exc:
                        n = self.max_retries + 1
                        yield unit, Lost(f"its Ray worker died on all {n} attempts "
                                         f"({type(exc).__name__})", n), {"worker": None, "node": None, "attempts": n}
                        continue
                    yield unit, value, {**meta, "attempts": None}
        finally:
            for ref in running:
                ray.cancel(ref, force=True)


def make_engine(workers: int = 1, *, ray: bool = False, address: str | None = None, inline: bool = False,
                max_retries: int = 3) -> Engine:
    """The engine for these options: Ray with ``ray`` (or an ``address``), else a local pool, or
    :class:`InlineEngine` with ``inline`` (one worker only)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError(f"--workers must be an integer >= 1, got {workers!r}")
    if address is not None and not ray:
        raise ParameterError("--address joins a Ray cluster: add --ray")
    if ray:
        return RayEngine(workers, address=address, max_retries=max_retries)
    if inline:
        if workers != 1:
            raise ParameterError("the in-process engine runs one worker")
        return InlineEngine()
    return LocalPoolEngine(workers, max_retries=max_retries)

