"""The policy server: planner sessions for remote plants over gRPC (``contactopt serve``).

One :class:`PolicyServer` serves one :class:`~contactopt.task.Task`.  Each connected plant
opens a *session* (``OpenSession``): its own :class:`~contactopt.mpc.session.PlannerSession`
and a planner thread that plans from the newest state the plant sent (``Step``) and
publishes each new policy as a message the client evaluates locally.  A slow network only
ages the policy; it never blocks the plant's control loop.

Safety:

* a token (gRPC metadata ``authorization: Bearer TOKEN``) is required whenever the server
  listens on a non-loopback address; a wrong or missing one is ``UNAUTHENTICATED``;
* TLS with ``tls_cert``/``tls_key`` (PEM files);
* messages over ``max_message_bytes`` are ``RESOURCE_EXHAUSTED``: up to :attr:`PolicyServer.hard_limit`
  (``max(2 × limit, limit + 1 MiB)``) the handler reads and refuses them, beyond it gRPC
  drops them unread; both are logged (the
  methods are registered as stream-unary handlers, which run before the request is read, so
  a request gRPC drops is seen and logged too);
* a state of the wrong size or with NaN/inf, an unknown key or a bad value is
  ``INVALID_ARGUMENT`` naming the field; beyond ``max_sessions`` ``RESOURCE_EXHAUSTED``;
  an unknown or expired session ``NOT_FOUND`` (the client reopens one);
* every refusal is logged (logger ``contactopt.remote``); an exception in a handler is
  ``INTERNAL`` and logged, never a crash; nothing received is unpickled or evaluated;
* a session not heard from for ``idle_timeout`` seconds is closed and its memory freed.

Mocap poses sent with a state (``State.mocap_pos``/``mocap_quat``) are the planner's: the
session puts them on its planner model's mocap bodies (``body_pos``/``body_quat``, which
every ``MjData`` of a rebuilt planner starts from) and rebuilds the planner when they
changed, so its dynamics and costs see the plant's targets.  A pose sent once holds until
another is sent; each change costs a rebuild and a first plan (the warm start is lost).
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import logging
import math
import secrets
import threading
import time
from concurrent import futures

import numpy as np

from ..errors import ContactoptError, ParameterError
from .messages import Layout, decode_mocap, decode_state, encode_array, encode_policy, grpc_module, layout_of, pb

__all__ = ["PolicyServer", "is_loopback", "load_served_task", "read_token"]

log = logging.getLogger("contactopt.remote")

#: longest a ``Step`` may wait for a newer policy, and a ``Reset`` for its plan [s]
MAX_WAIT_S = 30.0
#: default limit on the size of a received message [bytes] (a state is a few kB)
DEFAULT_MAX_MESSAGE_BYTES = 4 << 20
#: limit on a sent message [bytes] (an iLQG policy of a large model is a few MB)
MAX_SEND_BYTES = 256 << 20


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) only accepts connections from this machine."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(path) -> str:
    """The token in file ``path`` (surrounding whitespace removed).

    Raises:
      ParameterError: the file cannot be read or holds no token.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise ParameterError(f"--token-file {path}: cannot read it ({exc.strerror or exc})") from None
    if not token or any(c.isspace() for c in token):
        raise ParameterError(f"--token-file {path}: expected one token without spaces")
    return token


def load_served_task(name_or_file: str):
    """``(task, default planner)`` of a task file or a bundled task with a planner-independent form.

    Raises:
      ParameterError: a bundled task without a planner-independent form (the message lists
        the tasks that can be served), or an unknown task.
    """
    import os
    from pathlib import Path

    if name_or_file.endswith(".py") or os.sep in name_or_file or Path(name_or_file).is_file():
        from ..task import load_task_file

        task = load_task_file(name_or_file)
        return task, task.default_planner
    from ..tasks import available_tasks, load_task

    spec = load_task(name_or_file)
    if spec.task_factory is None:
        ok = sorted(n for n, s in available_tasks().items() if s.task_factory is not None)
        raise ParameterError(f"task {name_or_file!r} has no planner-independent form and cannot be served "
                             f"(tasks that can: {', '.join(ok)}; or a task file)")
    return spec.task(), spec.planners[0]


def _value(v) -> object:
    """A ``Value`` message as a Python number or string."""
    kind = v.WhichOneof("kind")
    if kind == "number":
        return float(v.number)
    if kind == "text":
        return str(v.text)
    raise ParameterError("a setting value is empty (neither number nor text)")


def _settings(values) -> dict:
    out = {}
    for key, v in values.items():
        if not key or len(key) > 200:
            raise ParameterError(f"setting key {key[:50]!r}: must be 1 to 200 characters")
        out[key] = _value(v)
    return out


class _Session:
    """One plant's planner: a PlannerSession, the newest state and policy, and a planner thread."""

    def __init__(self, sid: str, planner_session, layout: Layout, paused: bool, peer: str):
        self.id = sid
        self.planner = planner_session
        self.layout = layout
        self.peer = peer
        self.paused = paused
        self.cond = threading.Condition()
        self.state = None  # (t, x)
        self.mocap_pending = None  # (pos or None, quat or None) received, not yet on the planner
        self.state_seq = 0
        self.planned_seq = 0
        self.policy_msg = None
        self.policy_seq = 0
        self.planned_from = -math.inf
        self.attempted_from = -math.inf  # state time of the last update, failed or not
        self.reset_job = None  # dict(t, x, done: Event, error)
        self.last_seen = time.monotonic()
        self.stop = False
        self.failures = 0
        self.last_error = ""
        model = planner_session.nominal
        bodies = np.full(model.nmocap, -1)
        for b in range(model.nbody):
            if model.body_mocapid[b] >= 0:
                bodies[model.body_mocapid[b]] = b
        self._mocap_bodies = bodies
        #: mocap poses the planner model has now: ``(nmocap, 3)`` [m], ``(nmocap, 4)``
        self.mocap_pos = model.body_pos[bodies].copy()
        self.mocap_quat = model.body_quat[bodies].copy()
        self.mocap_updates = 0  # planner rebuilds for new mocap poses
        self.thread = threading.Thread(target=self._loop, name=f"contactopt-plan-{sid[:8]}", daemon=True)
        self.thread.start()

    def touch(self) -> None:
        """Mark the session as heard from now (the idle timeout restarts)."""
        self.last_seen = time.monotonic()

    def apply_mocap(self, mocap) -> bool:
        """Put mocap poses ``(pos (nmocap, 3) [m] or None, quat (nmocap, 4) or None)`` on the
        planner model (None keeps that part); the planner is rebuilt at its next update when
        they changed.  Called on the planner thread only.  Returns whether they changed."""
        if mocap is None:
            return False
        pos, quat = mocap
        pos = self.mocap_pos if pos is None else pos
        quat = self.mocap_quat if quat is None else quat
        if np.array_equal(pos, self.mocap_pos) and np.array_equal(quat, self.mocap_quat):
            return False
        model = self.planner.nominal.__copy__()
        model.body_pos[self._mocap_bodies] = pos
        model.body_quat[self._mocap_bodies] = quat
        self.planner.nominal = model  # the model every rebuilt planner is copied from
        self.planner.set({})  # no new setting: only marks the planner for a rebuild
        self.mocap_pos, self.mocap_quat = np.array(pos, dtype=float), np.array(quat, dtype=float)
        self.mocap_updates += 1
        log.debug("session %s: new mocap poses, the planner is rebuilt", self.id[:8])
        return True

    def receive_mocap(self, mocap) -> None:
        """Queue mocap poses ``(pos or None, quat or None)`` (or None: none sent) for the planner
        thread; a part not sent keeps the one queued before.  Call with :attr:`cond` held."""
        if mocap is None:
            return
        if self.mocap_pending is None:
            self.mocap_pending = mocap
        else:
            old = self.mocap_pending
            self.mocap_pending = (old[0] if mocap[0] is None else mocap[0], old[1] if mocap[1] is None else mocap[1])

    def _publish(self, upd, t: float) -> None:
        if upd.policy is None:  # counted by the PlannerSession's status
            return
        msg = pb().Policy()
        encode_policy(upd.policy, msg, sequence=self.policy_seq + 1, cost=upd.cost, compute_time=upd.compute_time,
                      message=upd.message)
        msg.update_period_s = self.planner.update_period  # the plant paces its states by it
        msg.min_lag_s = self.planner.min_lag  # and applies the policy no sooner than t0 + this
        with self.cond:
            self.policy_msg = msg
            self.policy_seq += 1
            self.planned_from = float(t)
            self.cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.stop and self.reset_job is None and (
                        self.paused or self.state is None or self.state_seq == self.planned_seq):
                    self.cond.wait(0.5)
                if self.stop:
                    return
                job, self.reset_job = self.reset_job, None
                if job is None:
                    (t, x), self.planned_seq = self.state, self.state_seq
                mocap, self.mocap_pending = self.mocap_pending, None
            try:
                self.apply_mocap(mocap)
                if job is not None:
                    t, x = job["t"], job["x"]
                    upd = self.planner.reset(t, x)
                else:
                    upd = self.planner.update(t, x)
                self._publish(upd, t)
                self.last_error = ""
                if job is not None and upd.policy is None:
                    job["error"] = upd.message or "the plan failed"
            except Exception as exc:  # noqa: BLE001 - a planner error must not kill the session's thread
                self.failures += 1
                error = f"planner error: {type(exc).__name__}: {exc}"[:1000]
                if error != self.last_error:  # once per kind of error, not at the plant's rate
                    log.warning("session %s: %s", self.id[:8], error)
                self.last_error = error
                if job is not None:
                    job["error"] = f"{type(exc).__name__}: {exc}"
                time.sleep(0.01)
            with self.cond:  # wakes a Step waiting for this state's plan, even when it failed
                self.attempted_from = float(t) if job is None else float(job["t"])
                self.cond.notify_all()
            if job is not None:
                job["done"].set()

    def close(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        self.thread.join(timeout=60)
        self.planner.close()


class PolicyServer:
    """A gRPC policy server for one task.

    Args:
      task: the :class:`~contactopt.task.Task` every session plans for.
      planner: default planner of a session that names none (None: the task's
        :attr:`~contactopt.task.Task.default_planner`).
      host, port: where to listen (port 0 picks a free one; :attr:`port` after :meth:`start`).
      token: the shared secret clients send as ``authorization: Bearer TOKEN`` (required
        unless ``host`` is loopback).
      tls_cert, tls_key: PEM file paths for TLS (both or neither).
      max_sessions: sessions at once (``RESOURCE_EXHAUSTED`` beyond).
      idle_timeout: seconds without a call after which a session is freed.
      max_message_bytes: largest message accepted [bytes].
      settings: ``--set`` keys every new session starts with.

    Raises:
      ParameterError: a non-loopback host without a token, one of cert/key without the other,
        unreadable TLS files, or a bad limit.
    """

    def __init__(self, task, *, planner: str | None = None, host: str = "127.0.0.1",
                 port: int = 50051,
                 token: str | None = None, tls_cert=None, tls_key=None, max_sessions: int = 4,
                 idle_timeout: float = 30.0, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 settings: dict | None = None, workers: int | None = None):
        from ..mpc import registry
        from ..task import Task

        if not isinstance(task, Task):
            raise ParameterError(f"PolicyServer: task must be a contactopt.Task, got {type(task).__name__}")
        grpc_module()  # a missing [server] extra fails here, in one line
        pb()
        planner = planner or task.default_planner
        registry.spec(planner)
        if not is_loopback(host) and not token:
            raise ParameterError(f"--host {host} is not a loopback address: a token is required (--token-file)")
        if (tls_cert is None) != (tls_key is None):
            raise ParameterError("TLS needs both --tls-cert and --tls-key")
        if not (isinstance(port, int) and 0 <= port <= 65535):
            raise ParameterError(f"--port must be in 0..65535, got {port!r}")
        if not (isinstance(max_sessions, int) and max_sessions >= 1):
            raise ParameterError(f"--max-sessions must be >= 1, got {max_sessions!r}")
        if not (math.isfinite(idle_timeout) and idle_timeout > 0):
            raise ParameterError(f"idle timeout must be positive seconds, got {idle_timeout!r}")
        if not (isinstance(max_message_bytes, int) and max_message_bytes >= 1024):
            raise ParameterError(f"max message size must be >= 1024 bytes, got {max_message_bytes!r}")
        self.task, self.planner_name, self.host, self.port = task, planner, host, port
        self.token = token
        self.tls = None
        if tls_cert is not None:
            try:
                with open(tls_key, "rb") as fk, open(tls_cert, "rb") as fc:
                    self.tls = (fk.read(), fc.read())
            except OSError as exc:
                raise ParameterError(f"TLS file: cannot read it ({exc})") from None
        self.max_sessions = max_sessions
        self.idle_timeout = float(idle_timeout)
        self.max_message_bytes = max_message_bytes
        self.settings = dict(settings or {})
        self.workers = workers or max(8, 2 * max_sessions + 4)
        self.layout = layout_of(task.load_plant())
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._server = None
        self._stop = threading.Event()
        self._reaper = None
        self.refusals = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def hard_limit(self) -> int:
        """gRPC's own receive limit [bytes]: ``max(2 × max_message_bytes, max_message_bytes + 1 MiB)``.
        A request up to it is read and refused by the handler when over ``max_message_bytes``;
        a larger one gRPC drops unread (``RESOURCE_EXHAUSTED``), which the handler logs."""
        return max(2 * self.max_message_bytes, self.max_message_bytes + (1 << 20))

    @property
    def address(self) -> str:
        """``host:port`` the server listens on."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> int:
        """Start listening; returns the bound port.

        Raises:
          ParameterError: the address cannot be bound.
        """
        grpc = grpc_module()
        # gRPC itself refuses only far beyond the limit (the handler sees that and logs it); up
        # to there the handlers read an oversize message and refuse it with a clearer message
        opts = [("grpc.max_receive_message_length", self.hard_limit),
                ("grpc.max_send_message_length", MAX_SEND_BYTES),
                ("grpc.so_reuseport", 0)]
        interceptors = [_TokenCheck(self.token, self)] if self.token else []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.workers,
                                                              thread_name_prefix="contactopt-rpc"),
                                   interceptors=interceptors, options=opts,
                                   maximum_concurrent_rpcs=4 * self.workers)
        # the generic handler takes raw bytes: _handler parses them, so a corrupt message is an
        # INVALID_ARGUMENT that is logged like every other refusal (not gRPC's INTERNAL).  The
        # methods are unary on the wire but registered stream-unary: such a handler starts
        # before its request is read, so a request gRPC drops (over the hard limit) is logged
        servicer = _Servicer(self)
        handlers = {}
        for method in pb().DESCRIPTOR.services_by_name["PolicyServer"].methods:
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(
                getattr(servicer, method.name), request_deserializer=None,
                response_serializer=lambda reply: reply.SerializeToString())
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "contactopt.remote.v1.PolicyServer", handlers),))
        target = f"{self.address.rsplit(':', 1)[0]}:{self.port}"
        try:
            if self.tls is not None:
                creds = grpc.ssl_server_credentials([self.tls])
                port = self._server.add_secure_port(target, creds)
            else:
                port = self._server.add_insecure_port(target)
        except RuntimeError:
            raise ParameterError(f"cannot listen on {target} (is the port in use, or the address not "
                                 "one of this machine's?)") from None
        if port == 0:
            raise ParameterError(f"cannot listen on {target} (address in use or not available here)")
        self.port = port
        self._server.start()
        self._reaper = threading.Thread(target=self._reap, name="contactopt-reaper", daemon=True)
        self._reaper.start()
        log.info("serving task %r (planner %s) on %s%s%s", self.task.name, self.planner_name, self.address,
                 " with TLS" if self.tls else "", " with token" if self.token else "")
        return port

    def stop(self, grace: float | None = 0.5) -> None:
        """Stop listening and close every session."""
        self._stop.set()
        if self._server is not None:
            self._server.stop(grace).wait()
        with self._lock:
            sessions, self._sessions = [s for s in self._sessions.values() if s is not None], {}
        for s in sessions:
            s.close()

    def wait(self) -> None:
        """Block until :meth:`stop` (or an interrupt)."""
        while not self._stop.wait(0.5):
            pass

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def _reap(self) -> None:
        period = min(1.0, self.idle_timeout / 4)
        while not self._stop.wait(period):
            now = time.monotonic()
            with self._lock:
                idle = [s for s in self._sessions.values() if s is not None and now - s.last_seen > self.idle_timeout]
                for s in idle:
                    del self._sessions[s.id]
            for s in idle:
                log.info("session %s (%s) freed after %.0f s idle", s.id[:8], s.peer, self.idle_timeout)
                s.close()

    @property
    def sessions(self) -> int:
        """Open sessions."""
        with self._lock:
            return len(self._sessions)

    # ------------------------------------------------------------------ sessions

    def open_session(self, request, peer: str):
        """``OpenSession``: a new planner session (``RESOURCE_EXHAUSTED`` beyond ``max_sessions``)."""
        from ..mpc.session import PlannerSession

        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise _Refusal("RESOURCE_EXHAUSTED", f"all {self.max_sessions} sessions are in use (--max-sessions)")
            slot = "pending-" + secrets.token_hex(8)
            self._sessions[slot] = None  # holds the slot while the planner is built
        try:
            if request.HasField("expect"):
                e = request.expect
                mine = self.layout
                for name in ("nq", "nv", "nu", "na"):
                    if getattr(e, name) != getattr(mine, name):
                        raise ParameterError(f"expect.{name}: the client's model has {getattr(e, name)}, the "
                                             f"served task {self.task.name!r} has {getattr(mine, name)}")
            if len(request.planner) > 100:
                raise ParameterError("planner: name too long")
            settings = {**self.settings, **_settings(request.settings)}
            name = request.planner or self.planner_name
            ps = PlannerSession(self.task, name, settings=settings, seed=int(request.seed) % (2 ** 32))
            sid = secrets.token_hex(16)
            session = _Session(sid, ps, self.layout, bool(request.paused), peer)
        except BaseException:
            with self._lock:
                self._sessions.pop(slot, None)
            raise
        with self._lock:
            self._sessions.pop(slot, None)
            self._sessions[sid] = session
        log.info("session %s opened by %s (%s, planner %s)", sid[:8], peer, request.client_name[:80] or "client",
                 name)
        reply = pb().OpenSessionReply(session_id=sid, task=self.task.name, planner=name,
                                      idle_timeout_s=self.idle_timeout)
        self.layout.to_message(reply.layout)
        return reply

    def session(self, sid: str) -> _Session:
        """The session ``sid`` (``NOT_FOUND`` if unknown or expired); marks it as seen."""
        with self._lock:
            s = self._sessions.get(sid)
        if s is None:
            raise _Refusal("NOT_FOUND", f"no session {sid[:40]!r} (closed, expired or the server restarted)")
        s.touch()
        return s

    def close_session(self, sid: str) -> bool:
        """Free session ``sid``; False when there is none."""
        with self._lock:
            s = self._sessions.pop(sid, None)
        if s is None:
            return False
        s.close()
        log.info("session %s closed by its client", sid[:8])
        return True


def _mocap(state, layout: Layout):
    """``(pos, quat)`` of a ``State`` message's mocap poses, or None when it has neither."""
    pos, quat = decode_mocap(state, layout)
    return None if pos is None and quat is None else (pos, quat)


class _Refusal(Exception):
    """A refusal with a gRPC status code name."""

    def __init__(self, code: str, text: str):
        super().__init__(text)
        self.code = code


def _handler(fn):
    """Wrap an RPC method: map errors to status codes, log every refusal, never raise."""

    request_type = fn.__name__ + "Request"
    request_type = {"CloseSession": "SessionRequest", "GetTrajectory": "SessionRequest",
                    "GetSettings": "SessionRequest", "Status": "SessionRequest"}.get(fn.__name__, request_type)

    @functools.wraps(fn)
    def wrapped(self, requests, context):
        grpc = grpc_module()
        peer = context.peer()
        try:
            raw = next(requests)
        except StopIteration:
            raw = None
            if _ended_unread(context):  # gRPC ended the call, e.g. over its hard size limit
                _log_unread(fn.__name__, peer, context, self.server)
                # the call is over: gRPC sends nothing more, and an abort is not logged as an error
                context.abort(grpc.StatusCode.CANCELLED, "the call ended before its request was read")
        except grpc.RpcError:  # gRPC ended the call before the request was read
            _log_unread(fn.__name__, peer, context, self.server)
            raise  # gRPC knows this error: the status it sent stands, nothing more is logged
        try:
            from google.protobuf.message import DecodeError

            if raw is None:
                raise ParameterError(f"request: {fn.__name__} takes exactly one request message, got none")
            limit = self.server.max_message_bytes
            if len(raw) > limit:
                raise _Refusal("RESOURCE_EXHAUSTED", f"a request of {len(raw)} bytes is over the limit of {limit} "
                                                     "(--max-message-bytes)")
            try:
                request = getattr(pb(), request_type).FromString(raw)
            except DecodeError:
                raise ParameterError(f"request: not a valid contactopt.remote.v1.{request_type} message") from None
            return fn(self, request, context)
        except _Refusal as exc:
            code, text = getattr(grpc.StatusCode, exc.code), str(exc)
        except ParameterError as exc:
            code, text = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
        except ContactoptError as exc:
            code, text = grpc.StatusCode.FAILED_PRECONDITION, str(exc)
        except Exception as exc:
            log.exception("internal error in %s", fn.__name__)
            code, text = grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"
        self.server.refusals += 1
        log.warning("refused %s from %s: %s: %s", fn.__name__, peer, code.name, text)
        context.abort(code, text[:2000])

    return wrapped


#: seconds a handler whose request stream ended empty waits for gRPC to mark the call ended
UNREAD_SETTLE_S = 0.25


def _ended_unread(context, settle: float = UNREAD_SETTLE_S) -> bool:
    """Whether a call whose request stream ended without a message was ended by gRPC (a request
    over the hard size limit, a cancelled or late call) rather than sent empty by the client.

    gRPC's request iterator can end before it marks the call cancelled (the two are separate
    events), so this waits up to ``settle`` seconds for ``context.is_active()`` to turn False.
    A client that really sent no message keeps the call active and costs the wait once."""
    end = time.monotonic() + settle
    while context.is_active():
        if time.monotonic() >= end:
            return False
        time.sleep(0.005)
    return True


def _log_unread(method: str, peer: str, context, server: PolicyServer) -> None:
    """Count and log a call that gRPC ended before its request could be read: over the hard size
    limit (gRPC answered ``RESOURCE_EXHAUSTED``), past the client's deadline, or cancelled by it."""
    left = context.time_remaining()
    if left is not None and left <= 0.0:
        why = "DEADLINE_EXCEEDED: the request did not arrive before the client's deadline"
    else:
        why = (f"RESOURCE_EXHAUSTED: gRPC dropped the request unread: over the hard receive limit of "
               f"{server.hard_limit} bytes (--max-message-bytes {server.max_message_bytes}; or the client "
               "cancelled the call while sending it)")
    server.refusals += 1
    log.warning("refused %s from %s: %s", method, peer, why)


class _Servicer:
    """The ``PolicyServer`` service's methods (registered by name with the generated code)."""

    def __init__(self, server: PolicyServer):
        self.server = server

    @_handler
    def OpenSession(self, request, context):
        return self.server.open_session(request, context.peer())

    @_handler
    def CloseSession(self, request, context):
        return pb().CloseSessionReply(closed=self.server.close_session(request.session_id))

    @staticmethod
    def _reply(s: _Session, known: int, start: float, reply=None):
        reply = reply or pb().StepReply()
        with s.cond:
            msg, seq = s.policy_msg, s.policy_seq
        reply.newest_sequence = seq
        reply.message = s.last_error or s.planner.status().get("last_message", "") or ""
        if msg is not None and seq != known:
            reply.has_policy = True
            reply.policy.CopyFrom(msg)
        reply.server_time_s = time.perf_counter() - start
        return reply

    @_handler
    def Step(self, request, context):
        start = time.perf_counter()
        s = self.server.session(request.session_id)
        state = decode_state(request.state, s.layout) if request.HasField("state") else None
        mocap = _mocap(request.state, s.layout) if state is not None else None
        wait = float(request.wait_s)
        if not math.isfinite(wait) or wait < 0:
            raise ParameterError(f"wait_s: must be >= 0, got {wait}")
        need = float(request.min_planned_from)
        if math.isnan(need):
            raise ParameterError("min_planned_from: NaN")
        with s.cond:
            if state is not None:
                s.receive_mocap(mocap)
                s.state = state
                s.state_seq += 1
                s.cond.notify_all()
            if wait > 0:
                deadline = time.monotonic() + min(wait, MAX_WAIT_S)
                while not (s.policy_seq != request.known_sequence and s.planned_from >= need - 1e-9):
                    if s.attempted_from >= need - 1e-9 and s.planned_from < need - 1e-9 and state is not None \
                            and s.planned_seq == s.state_seq:
                        break  # the update from this state failed: say so now, not at the timeout
                    left = deadline - time.monotonic()
                    if left <= 0 or s.stop:
                        break
                    s.cond.wait(left)
        return self._reply(s, request.known_sequence, start)

    @_handler
    def Reset(self, request, context):
        start = time.perf_counter()
        s = self.server.session(request.session_id)
        if not request.HasField("state"):
            raise ParameterError("state: missing")
        t, x = decode_state(request.state, s.layout)
        mocap = _mocap(request.state, s.layout)
        timeout = float(request.timeout_s) or MAX_WAIT_S
        if not (math.isfinite(timeout) and timeout > 0):
            raise ParameterError(f"timeout_s: must be positive, got {request.timeout_s}")
        job = {"t": t, "x": x, "done": threading.Event(), "error": None}
        with s.cond:
            s.reset_job = job
            s.receive_mocap(mocap)
            s.state, s.state_seq, s.planned_seq = (t, x), s.state_seq + 1, s.state_seq + 1
            s.cond.notify_all()
        if not job["done"].wait(min(timeout, MAX_WAIT_S)):
            raise _Refusal("DEADLINE_EXCEEDED", f"the reset plan took longer than {min(timeout, MAX_WAIT_S):g} s")
        if job["error"]:
            raise ContactoptError(f"the reset plan failed: {job['error']}")
        return self._reply(s, 0, start)

    @_handler
    def GetTrajectory(self, request, context):
        s = self.server.session(request.session_id)
        reply = pb().TrajectoryReply()
        traj = s.planner.planned_trajectory()
        if traj is not None:
            reply.has_trajectory = True
            encode_array(reply.times, traj[0])
            encode_array(reply.qpos, traj[1])
        return reply

    @staticmethod
    def _settings_reply(s: _Session):
        reply = pb().SettingsReply(planner=s.planner.planner_name)
        for row in s.planner.settings():
            reply.settings.add(key=row.key, group=row.group, kind=row.kind, value=str(row.value),
                               default=str(row.default), doc=row.doc, choices=[str(c) for c in row.choices])
        return reply

    @_handler
    def GetSettings(self, request, context):
        return self._settings_reply(self.server.session(request.session_id))

    @_handler
    def SetSettings(self, request, context):
        s = self.server.session(request.session_id)
        changes = _settings(request.changes)
        if request.planner:
            s.planner.set_planner(request.planner[:100], changes)
        else:
            s.planner.set(changes)
        log.info("session %s: settings %s%s", s.id[:8], ", ".join(f"{k}={v}" for k, v in changes.items())[:300],
                 f" (planner {request.planner})" if request.planner else "")
        return self._settings_reply(s)

    @_handler
    def Status(self, request, context):
        s = self.server.session(request.session_id)
        st = s.planner.status()
        since = st.get("seconds_since_update")
        with s.cond:
            last_t = s.state[0] if s.state is not None else math.nan
            seq = s.policy_seq
        return pb().StatusReply(
            planner=st["planner"], updates=st["updates"], failures=st["failures"] + s.failures,
            rebuilds=st["rebuilds"], update_rate_hz=float(st["update_rate_hz"]),
            last_compute_ms=float(st["last_compute_ms"]), last_cost=float(st["last_cost"]),
            last_message=str(st["last_message"])[:1000], seconds_since_update=-1.0 if since is None else since,
            newest_sequence=seq, sessions=self.server.sessions, last_state_time=float(last_t))


def _TokenCheck(token: str, server: PolicyServer):
    """A server interceptor refusing calls whose ``authorization`` metadata is not ``Bearer TOKEN``."""
    grpc = grpc_module()
    expected = f"Bearer {token}".encode()

    def deny(requests, context):  # the request is never read, whatever its size
        server.refusals += 1
        log.warning("refused a call from %s: UNAUTHENTICATED (missing or wrong token)", context.peer())
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token (authorization: Bearer TOKEN)")

    denied = grpc.stream_unary_rpc_method_handler(deny)

    class TokenCheck(grpc.ServerInterceptor):
        def intercept_service(self, continuation, details):
            got = ""
            for key, value in details.invocation_metadata or ():
                if key == "authorization":
                    got = value if isinstance(value, str) else ""
            if hmac.compare_digest(got.encode(), expected):
                return continuation(details)
            return denied

    return TokenCheck()

