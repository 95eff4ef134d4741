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

__all__ = ["CONNECT_TIMEOUT", "THREAD_ENV", "Engine", "InlineEngine", "LocalPoolEngine", "Lost", "RayEngine",
           "check_ray_address", "make_engine", "split_address"]

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


#: the client's HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113 §3.4): what a
#: gRPC client (Ray's GCS client among them) sends first on a new connection
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
#: frame type of a SETTINGS frame, the first frame every HTTP/2 server sends
_H2_SETTINGS = 0x04
#: seconds :func:`check_ray_address` waits for an address by default
CONNECT_TIMEOUT = 3.0


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of a Ray address ``HOST:PORT``, ``[IPv6]:PORT`` or ``ray://HOST:PORT``.

    Raises:
      ParameterError: not of that form (names the address).
    """
    if not isinstance(address, str):
        raise ParameterError(f"--address must be HOST:PORT, got {address!r}")
    text = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ParameterError(f"--address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379), 'auto' "
                             f"or ray://HOST:PORT")
    return host, int(port)


def check_ray_address(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Fail fast unless a Ray head answers at ``address``, all within ``timeout`` seconds.

    ``ray.init(address=...)`` retries for ~20 s on a dead address and can hang for minutes on a
    port where something that is not a Ray head listens (or where a firewall or an intercepting
    proxy accepts every connection).  This check, in order:

    1. opens a TCP connection to ``HOST:PORT`` (refused: fails at once);
    2. ``HOST:PORT`` (a GCS): calls ``ray.rpc.NodeInfoGcsService/GetClusterId`` over gRPC and
       needs an answer from that service: OK, or UNAUTHENTICATED / PERMISSION_DENIED (a GCS with
       token authentication routed the call; a gRPC server without the service says
       UNIMPLEMENTED) — ``grpc`` comes with Ray; without it, step 3 instead;
    3. ``ray://HOST:PORT`` (Ray Client): sends the HTTP/2 client preface and needs the server's
       SETTINGS frame (any gRPC server passes).

    Args:
      address: ``HOST:PORT``, ``[IPv6]:PORT`` or ``ray://HOST:PORT``.
      timeout: seconds for the whole check (> 0).

    Raises:
      ParameterError: a malformed address, nothing listening there, or a listener that does not
        answer as a Ray head within ``timeout`` (one line naming the address).
    """
    import time

    host, port = split_address(address)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ParameterError(f"connect timeout must be positive seconds, got {timeout!r}")
    deadline = time.monotonic() + timeout
    hint = "start one with `ray start --head` and pass the address it prints"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise ParameterError(f"--address {address}: no Ray cluster reachable there within {timeout:g} s "
                             f"({why}); {hint}") from None
    with sock:
        why = None
        if "://" not in address:
            try:
                import grpc
            except ImportError:
                grpc = None
            if grpc is not None:
                sock.close()
                why = _gcs_answer(grpc, host, port, max(0.05, deadline - time.monotonic()))
                if why is None:
                    return
        if why is None:
            why = _h2_answer(sock, deadline)
            if why is None:
                return
    raise ParameterError(f"--address {address}: no Ray cluster reachable there: the port accepts connections "
                         f"but {why} within {timeout:g} s; {hint}")


def _gcs_answer(grpc, host: str, port: int, timeout: float) -> str | None:
    """None when the gRPC server at ``host:port`` answers ``GetClusterId`` (a Ray GCS), else why not."""
    proxy = os.environ.get("RAY_grpc_enable_http_proxy", "0").lower() in ("1", "true")  # as Ray's channels
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    channel = grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", int(proxy))])
    try:
        call = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")
        call(b"", timeout=timeout)  # an empty GetClusterIdRequest; the reply is not needed
        return None
    except grpc.RpcError as exc:
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return None  # the GCS routed the call and wants Ray's auth token (ray.init sends it)
        return f"gave no Ray GCS answer ({getattr(code, 'name', 'gRPC error')})"
    finally:
        channel.close()


def _h2_answer(sock: socket.socket, deadline: float) -> str | None:
    """None when the server behind the connected ``sock`` answers the HTTP/2 preface with its
    SETTINGS frame before ``deadline`` (``time.monotonic()`` seconds), else why not."""
    import time

    answer = b""
    try:
        sock.sendall(_H2_PREFACE)
        while len(answer) < 9:  # a frame header: length (3), type (1), flags (1), stream (4)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            chunk = sock.recv(9 - len(answer))
            if not chunk:
                break
            answer += chunk
    except OSError:
        pass
    if len(answer) == 9 and answer[3] == _H2_SETTINGS and answer[5:9] == b"\x00\x00\x00\x00":
        return None
    return "gave no answer" if not answer else f"gave an answer that is not gRPC ({answer[:9]!r})"


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
      connect_timeout: seconds for ``address`` to answer (:func:`check_ray_address`) before
        ``ray.init`` is tried.

    If Ray is already initialized in this process (e.g. a test's cluster), the engine uses it and
    leaves it running; otherwise it shuts down what it started.
    """

    name = "ray"

    def __init__(self, workers: int = 1, *, address: str | None = None, max_retries: int = 3,
                 connect_timeout: float = CONNECT_TIMEOUT):
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
            check_ray_address(address, connect_timeout)
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

