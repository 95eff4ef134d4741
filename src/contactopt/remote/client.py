"""The plant side: :class:`PolicyClient` for a robot's control loop, :class:`RemotePlanner` for the runner.

* :class:`PolicyClient` — ``update_state(t, qpos, qvel)`` hands the newest measured state to
  a background thread that does the network; ``control(t, qpos, qvel)`` evaluates the newest
  policy locally (microseconds, never waits on the network).  After the policy's horizon
  ends without a newer one (server gone, network down) it applies the fallback: zero control,
  or gravity compensation when a model is given.  A lost session (server restart, idle
  timeout) is reopened by itself.
* :class:`RemotePlanner` — the runner's ``Planner`` protocol over the same service, so
  ``contactopt run TASK --remote HOST:PORT`` uses the ordinary sync/async runner; it records
  each update's round trip, the server's planning time and the transport time.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time

import numpy as np

from ..errors import ContactoptError, ParameterError
from ..mpc.policy import Policy
from ..mpc.runner import pop_newest_due, seconds_or_zero
from .messages import Layout, check_mocap, decode_policy, encode_state, grpc_module, layout_of, pb

__all__ = ["ExpiringPolicy", "PolicyClient", "RemoteError", "RemotePlanner"]

log = logging.getLogger("contactopt.remote")

#: largest policy message a client accepts [bytes]
MAX_RECEIVE_BYTES = 256 << 20


class RemoteError(ContactoptError):
    """The policy server could not be reached or refused a call (the message has the status)."""


def _value_msg(msg, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        msg.text = ",".join(str(v) for v in value) if isinstance(value, (tuple, list)) else str(value)
    else:
        msg.number = float(value)


class _Connection:
    """A channel, a stub, the token metadata and one open session (reopened when lost)."""

    def __init__(self, address: str, token=None, tls_ca=None, *, planner=None, settings=None, seed=0,
                 expect: Layout | None = None, paused=False, client_name="contactopt", timeout=10.0):
        grpc = grpc_module()
        pb()
        from . import policy_server_pb2_grpc as rpc

        if not isinstance(address, str) or ":" not in address:
            raise ParameterError(f"server address must be HOST:PORT, got {address!r}")
        self.address = address
        opts = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000),
                ("grpc.enable_retries", 0)]
        if tls_ca is not None:
            try:
                with open(tls_ca, "rb") as fh:
                    ca = fh.read()
            except OSError as exc:
                raise ParameterError(f"--tls-ca {tls_ca}: cannot read it ({exc.strerror or exc})") from None
            self.channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=ca), opts)
        else:
            self.channel = grpc.insecure_channel(address, opts)
        self.stub = rpc.PolicyServerStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = float(timeout)
        self.open_args = {"planner": planner or "", "seed": int(seed), "client_name": client_name,
                          "paused": bool(paused)}
        self.settings = dict(settings or {})
        self.expect = expect
        self.session_id = None
        self.layout: Layout | None = None
        self.task = self.planner = ""
        self.reopened = 0

    def open(self) -> None:
        """Open a session (after a loss: a new one, with the same settings)."""
        req = pb().OpenSessionRequest(**self.open_args)
        for k, v in self.settings.items():
            _value_msg(req.settings[k], v)
        if self.expect is not None:
            self.expect.to_message(req.expect)
        reply = self.call("OpenSession", req, session=False)
        layout = Layout.from_message(reply.layout)
        if self.layout is not None and layout != self.layout:
            raise RemoteError(f"the server at {self.address} now serves another model")
        if self.session_id is not None:
            self.reopened += 1
        self.session_id, self.layout, self.task, self.planner = reply.session_id, layout, reply.task, reply.planner

    def open_first(self) -> None:
        """:meth:`open` for a client being constructed: on failure the channel is closed and the
        error is a :class:`ParameterError` (the server refused the request's arguments) or a
        :class:`RemoteError` naming the address."""
        grpc = grpc_module()
        try:
            self.open()
        except grpc.RpcError as exc:
            self.channel.close()
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise ParameterError(exc.details()) from None
            raise _remote_error(exc, self.address, "open session") from None

    def call(self, method: str, request, *, session: bool = True, timeout: float | None = None):
        """``stub.method(request)`` with the token and a deadline; raises ``grpc.RpcError``."""
        if session:
            request.session_id = self.session_id or ""
        return getattr(self.stub, method)(request, timeout=timeout or self.timeout, metadata=self.metadata)

    def call_session(self, method: str, request, timeout: float | None = None):
        """:meth:`call`, reopening the session once if the server no longer knows it."""
        grpc = grpc_module()
        try:
            return self.call(method, request, timeout=timeout)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            self.open()
            return self.call(method, request, timeout=timeout)

    def close(self) -> None:
        """Close the session (best effort) and the channel."""
        if self.session_id is not None:
            try:
                self.call("CloseSession", pb().SessionRequest(), timeout=1.0)
            except Exception as exc:  # noqa: BLE001 - the server may be gone
                log.debug("closing session on %s: %s", self.address, exc)
        self.channel.close()


def _remote_error(exc, address: str, doing: str) -> RemoteError:
    try:
        return RemoteError(f"policy server {address}: {doing}: {exc.code().name}: {exc.details()}")
    except Exception:  # noqa: BLE001
        return RemoteError(f"policy server {address}: {doing}: {exc}")


class _Client:
    """What :class:`PolicyClient` and :class:`RemotePlanner` share: settings, trajectory, status."""

    conn: _Connection

    @property
    def layout(self) -> Layout:
        """The served model's :class:`~contactopt.remote.messages.Layout` (sizes, joints)."""
        return self.conn.layout

    def _rpc(self, method, request, doing):
        grpc = grpc_module()
        try:
            return self.conn.call_session(method, request)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise ParameterError(exc.details()) from None
            raise _remote_error(exc, self.conn.address, doing) from None

    def set(self, changes: dict, planner: str | None = None) -> dict:
        """Change settings (``--set`` keys → values) on the server; returns :meth:`settings`.

        Raises:
          ParameterError: the server's message for an unknown key or a bad value.
        """
        req = pb().SetSettingsRequest(planner=planner or "")
        for k, v in dict(changes).items():
            _value_msg(req.changes[k], v)
        reply = self._rpc("SetSettings", req, "set settings")
        self.conn.settings.update(changes)
        return {s.key: s.value for s in reply.settings}

    def settings(self) -> list[dict]:
        """Every setting as a dict (key, group, kind, value, default, doc, choices); values as text."""
        reply = self._rpc("GetSettings", pb().SessionRequest(), "get settings")
        return [{"key": s.key, "group": s.group, "kind": s.kind, "value": s.value, "default": s.default,
                 "doc": s.doc, "choices": list(s.choices)} for s in reply.settings]

    def trajectory(self):
        """``(times (K,), qpos (K, nq))`` of the newest plan [s], or None."""
        from .messages import decode_array

        reply = self._rpc("GetTrajectory", pb().SessionRequest(), "get trajectory")
        if not reply.has_trajectory:
            return None
        return (decode_array("times", reply.times, (None,)).copy(),
                decode_array("qpos", reply.qpos, (None, self.layout.nq)).copy())

    def status(self) -> dict:
        """The server's status of this session (update rate, failures, last message, …)."""
        from google.protobuf.json_format import MessageToDict

        reply = self._rpc("Status", pb().SessionRequest(), "status")
        return MessageToDict(reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


class PolicyClient(_Client):
    """A plant's connection to a policy server; evaluates the newest policy locally.

    Args:
      address: ``HOST:PORT`` of ``contactopt serve``.
      token: the server's token (sent as ``authorization: Bearer TOKEN``), if it has one.
      tls_ca: PEM file of the certificate authority (or the server's self-signed certificate)
        for a TLS server.
      planner, settings, seed: of the session (default: the server's).
      model: the plant's ``mujoco.MjModel``, optional: its sizes are checked against the served
        task, and it enables ``fallback="gravity"``.
      fallback: ``"zero"`` control or ``"gravity"`` compensation (``u = G⁺ qfrc_bias(q, 0)``,
        needs ``model``) once the newest policy's horizon has ended.
      timeout: seconds per network call (the first connection included).
      poll: longest a call waits in the server for a newer policy [s]; a newer state is sent
        with the next call.

    Raises:
      RemoteError: the server cannot be reached or refuses the session.
      ParameterError: a bad argument, or settings the server refuses.
    """

    def __init__(self, address: str, token: str | None = None, tls_ca=None, *, planner: str | None = None,
                 settings: dict | None = None, seed: int = 0, model=None, fallback: str = "zero",
                 timeout: float = 5.0, poll: float = 0.05):
        if fallback not in ("zero", "gravity"):
            raise ParameterError(f"fallback must be 'zero' or 'gravity', got {fallback!r}")
        if fallback == "gravity" and model is None:
            raise ParameterError("fallback='gravity' needs the plant's model (model=...)")
        grpc_module()  # a missing or old grpcio: one clear error before anything starts
        self.conn = _Connection(address, token, tls_ca, planner=planner, settings=settings, seed=seed,
                                expect=None if model is None else layout_of(model), client_name="PolicyClient",
                                timeout=timeout)
        self.conn.open_first()
        self.fallback = fallback
        self.poll = float(poll)
        self._model = model
        self._gravity = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._state = None  # (t, qpos, qvel, act, (mocap_pos, mocap_quat) or None), newest
        self._sent_t = None
        self._next_send = -math.inf  # the update-period grid of the states sent
        #: the served planner's replan period [s] (sent with every policy): states go no more often
        self.update_period = 0.0
        #: the served planner's least policy lag [s] (sent with every policy): a new policy takes
        #: effect at the first ``control(t)`` with ``t ≥ t0 + min_lag``, the one before until then
        self.min_lag = 0.0
        self._policy = None     # the newest policy received
        self._in_effect = None  # the policy control() evaluates
        self._waiting = []  # (policy, t_due) of policies received, waiting for their min_lag
        self._known = 0
        self._closed = False
        self.connected = True
        self.last_error = ""
        #: wall seconds of each call (the wait in the server for a newer policy included) and of
        #: its transport (the call minus the time spent in the server), the last 10,000
        self.round_trips = collections.deque(maxlen=10000)
        self.transport = collections.deque(maxlen=10000)
        self.policies_received = 0
        self.arrivals = collections.deque(maxlen=10000)  # wall clock (time.monotonic) of each new policy
        self.fallback_controls = 0
        self._thread = threading.Thread(target=self._loop, name="contactopt-policy-client", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ plant side

    def _mocap(self, where: str, mocap_pos, mocap_quat):
        """``(pos (nmocap, 3) or None, quat (nmocap, 4) or None)`` checked, or None for neither."""
        if mocap_pos is None and mocap_quat is None:
            return None
        n = self.layout.nmocap
        return (None if mocap_pos is None else check_mocap(f"{where}: mocap_pos", mocap_pos, n, 3),
                None if mocap_quat is None else check_mocap(f"{where}: mocap_quat", mocap_quat, n, 4))

    def update_state(self, t: float, qpos, qvel, act=None, *, mocap_pos=None, mocap_quat=None) -> None:
        """Hand the newest measured state (time [s], qpos ``(nq,)``, qvel ``(nv,)``, act ``(na,)``)
        to the network thread; returns at once.

        ``mocap_pos`` ``(nmocap, 3)`` [m] and ``mocap_quat`` ``(nmocap, 4)`` (``w x y z``), e.g. the
        plant's ``data.mocap_pos``/``data.mocap_quat``, optional: the server's planner model takes
        them (a target the cost or the dynamics use); a pose sent once holds until another is
        sent.  Each change rebuilds the server's planner (a first plan, no warm start).

        Raises:
          ParameterError: a wrong size or shape, a non-finite value or a zero quaternion (nothing
            is sent).
        """
        lay = self.layout
        mocap = self._mocap("update_state", mocap_pos, mocap_quat)
        qpos, qvel = np.array(qpos, dtype=float).ravel(), np.array(qvel, dtype=float).ravel()
        act = np.zeros(lay.na) if act is None else np.array(act, dtype=float).ravel()
        for name, a, n in (("qpos", qpos, lay.nq), ("qvel", qvel, lay.nv), ("act", act, lay.na)):
            if a.size != n:
                raise ParameterError(f"update_state: {name} must have {n} values, got {a.size}")
            if not np.isfinite(a).all():
                raise ParameterError(f"update_state: {name} is not finite")
        if not math.isfinite(t):
            raise ParameterError(f"update_state: t must be finite, got {t}")
        with self._lock:
            old = self._state[4] if self._state is not None else None
            if old is not None:  # a part not given keeps the last one given
                mocap = old if mocap is None else (old[0] if mocap[0] is None else mocap[0],
                                                   old[1] if mocap[1] is None else mocap[1])
            self._state = (float(t), qpos, qvel, act, mocap)
        self._wake.set()

    @property
    def policy(self):
        """The newest policy received (a :class:`~contactopt.mpc.policy.Policy`), or None before
        the first; it may still wait for the served ``min_lag`` (:attr:`policy_in_effect`)."""
        return self._policy

    @property
    def policy_in_effect(self):
        """The policy :meth:`control` evaluates now (None before the first)."""
        return self._in_effect

    def control(self, t: float, qpos, qvel, act=None) -> np.ndarray:
        """Control ``(nu,)`` at time ``t`` [s] for the measured state: the newest policy's once
        ``t ≥ t0 + min_lag`` (the served planner's least lag; until then the one before), or the
        fallback before the first policy and after its horizon ends."""
        if self._waiting:
            with self._lock:
                due = pop_newest_due(self._waiting, t)
                if due is not None:
                    self._in_effect = due[0]
        p = self._in_effect
        lay = self.layout
        if p is None or t > p.t0 + p.horizon_time:
            self.fallback_controls += 1
            return self._fallback(qpos)
        x = np.concatenate([np.asarray(qpos, float).ravel(), np.asarray(qvel, float).ravel(),
                            np.zeros(lay.na) if act is None else np.asarray(act, float).ravel()])
        if x.size != lay.nx:
            raise ParameterError(f"control: the state has {x.size} values, expected nq + nv + na = {lay.nx}")
        u = p.control(t, x)
        if not np.isfinite(u).all():
            u = p.feedforward(t)
        return u

    def _fallback(self, qpos) -> np.ndarray:
        nu = self.layout.nu
        if self.fallback == "zero":
            return np.zeros(nu)
        import mujoco

        from ..model import actuation_map

        m = self._model
        if self._gravity is None:
            self._gravity = (mujoco.MjData(m), np.linalg.pinv(actuation_map(m).control_gain))
        d, Gp = self._gravity
        d.qpos[:] = qpos
        d.qvel[:] = 0.0
        mujoco.mj_forward(m, d)
        u = Gp @ d.qfrc_bias
        lo = np.where(m.actuator_ctrllimited.astype(bool), m.actuator_ctrlrange[:, 0], -np.inf)
        hi = np.where(m.actuator_ctrllimited.astype(bool), m.actuator_ctrlrange[:, 1], np.inf)
        return np.clip(u, lo, hi)

    # ------------------------------------------------------------------ network thread

    def _loop(self) -> None:
        from ..mpc.runner import next_update_start

        grpc = grpc_module()
        backoff = 0.05
        while not self._closed:
            self._wake.wait(0.2)
            self._wake.clear()
            if self._closed:
                return
            with self._lock:
                state = self._state
            if state is None:
                continue
            # a new state is sent (on the served planner's update-period grid); otherwise the
            # call only polls for the plan of the last one
            req = pb().StepRequest(known_sequence=self._known, wait_s=self.poll, min_planned_from=-math.inf)
            due = self._sent_t is None or state[0] >= self._next_send - 1e-9 or state[0] < self._sent_t
            if (state[0] != self._sent_t and due) or not self.connected:
                t, qpos, qvel, act, mocap = state
                # mocap poses go with every state once given: a reopened session needs them again
                encode_state(req.state, t, qpos, qvel, act, mocap_pos=None if mocap is None else mocap[0],
                             mocap_quat=None if mocap is None else mocap[1])
            start = time.perf_counter()
            try:
                reply = self.conn.call("Step", req)
            except grpc.RpcError as exc:
                code = exc.code()
                self.last_error = f"{code.name}: {exc.details()}"
                if code == grpc.StatusCode.NOT_FOUND:  # the server restarted or freed the session
                    try:
                        self.conn.open()
                        self._known, self._sent_t = 0, None  # the new session needs the state again
                        self.connected = True
                        log.info("policy client: reopened a session on %s", self.conn.address)
                        self._wake.set()
                        continue
                    except grpc.RpcError as exc2:
                        self.last_error = f"{exc2.code().name}: {exc2.details()}"
                    except Exception as exc2:  # noqa: BLE001 - e.g. the server now serves another model
                        self.last_error = f"{type(exc2).__name__}: {exc2}"
                self.connected = False
                time.sleep(backoff)
                backoff = min(1.0, backoff * 2)
                self._wake.set()
                continue
            except Exception as exc:  # noqa: BLE001 - keep the network thread alive
                self.last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(backoff)
                continue
            backoff = 0.05
            self.connected = True
            if req.HasField("state"):
                sent_before, self._sent_t = self._sent_t, state[0]
                fresh = sent_before is None or state[0] < sent_before  # a reset plant: a new grid
                self._next_send = next_update_start(-math.inf if fresh else self._next_send,
                                                    self.update_period, state[0])
            self._wake.set()  # keep polling: the loop blocks in the server, not here
            wall = time.perf_counter() - start
            self.round_trips.append(wall)
            self.transport.append(max(wall - reply.server_time_s, 0.0))
            if reply.has_policy:
                try:
                    policy = decode_policy(reply.policy, self.layout)
                except ParameterError as exc:
                    self.last_error = str(exc)
                    continue
                self.update_period = served_update_period(reply.policy)
                self.min_lag = served_min_lag(reply.policy)
                with self._lock:  # the first policy takes effect at once, a later one after min_lag
                    self._policy = policy
                    if self._in_effect is None:
                        self._in_effect = policy
                    else:
                        self._waiting.append((policy, policy.t0 + self.min_lag))
                        del self._waiting[:-64]  # a plant that stopped calling control(): a bound
                self._known = reply.policy.sequence
                self.policies_received += 1
                self.arrivals.append(time.monotonic())
            else:
                self._known = reply.newest_sequence or self._known

    def reset(self, t: float, qpos, qvel, act=None, timeout: float = 30.0, *, mocap_pos=None, mocap_quat=None):
        """Replan from this state now (after the plant was reset) and wait for the plan;
        returns the new policy.  ``mocap_pos`` ``(nmocap, 3)`` [m], ``mocap_quat``
        ``(nmocap, 4)``: optional, as :meth:`update_state`.

        Raises:
          ParameterError: a bad state or mocap pose (the server's or this check's message).
          RemoteError: the server cannot be reached or the plan failed.
        """
        lay = self.layout
        mocap = self._mocap("reset", mocap_pos, mocap_quat)
        req = pb().ResetRequest(timeout_s=timeout)
        encode_state(req.state, t, qpos, qvel, np.zeros(lay.na) if act is None else act,
                     mocap_pos=None if mocap is None else mocap[0], mocap_quat=None if mocap is None else mocap[1])
        grpc = grpc_module()
        try:
            reply = self.conn.call_session("Reset", req, timeout=timeout + 5)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise ParameterError(exc.details()) from None
            raise _remote_error(exc, self.conn.address, "reset") from None
        with self._lock:  # the reset plant's plan takes effect at once
            self._policy = self._in_effect = decode_policy(reply.policy, lay)
            self._waiting = []
        self._known = reply.policy.sequence
        self.update_period = served_update_period(reply.policy)
        self.min_lag = served_min_lag(reply.policy)
        self._sent_t, self._next_send = float(t), float(t) + self.update_period  # planned from it
        self.policies_received += 1
        return self._policy

    def close(self) -> None:
        """Stop the network thread and close the session."""
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=10)
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ExpiringPolicy(Policy):
    """A policy that gives the fallback control (zeros) once its plan's horizon has ended.

    Wraps a client-side policy (``control(t, x)``, ``feedforward(t)``, ``t0``, ``nu``,
    ``horizon_time``): within ``[t0, t0 + horizon_time]`` it is that policy; after, zero
    control ``(nu,)`` — what a plant gets when no newer policy arrived in time.
    """

    def __init__(self, policy):
        self.policy = policy
        self.t0, self.nu = policy.t0, policy.nu
        self.horizon_time = getattr(policy, "horizon_time", math.inf)

    def _expired(self, t: float) -> bool:
        return t > self.t0 + self.horizon_time

    def control(self, t: float, x) -> np.ndarray:
        """The wrapped policy's control, or zeros ``(nu,)`` after the horizon."""
        return np.zeros(self.nu) if self._expired(t) else self.policy.control(t, x)

    def feedforward(self, t: float) -> np.ndarray:
        """The wrapped policy's feedforward, or zeros ``(nu,)`` after the horizon."""
        return np.zeros(self.nu) if self._expired(t) else self.policy.feedforward(t)


def served_update_period(policy_msg) -> float:
    """The server planner's replan period [s] a ``Policy`` message carries (``update_period_s``;
    0 for a value that is not a finite number ≥ 0, or from a server that does not send it)."""
    return seconds_or_zero(policy_msg.update_period_s)


def served_min_lag(policy_msg) -> float:
    """The server planner's least policy lag [s] a ``Policy`` message carries (``min_lag_s``: the
    plant applies the policy no sooner than ``t0 + min_lag``); 0 for a value that is not a finite
    number ≥ 0, or from a server that does not send it."""
    return seconds_or_zero(policy_msg.min_lag_s)


class RemotePlanner(_Client):
    """The runner's ``Planner`` over a policy server (``contactopt run TASK --remote``).

    ``reset(t, x)`` plans from the initial state on the server (``Reset``); ``update(t, x)``
    sends the state and waits (up to ``wait`` s) for a policy planned from it.  The update's
    ``compute_time`` is the whole round trip (what the plant waits for), its breakdown adds
    ``planning`` (the server's planning time) and ``transport`` (round trip − time in the
    server).  A lost connection is a failed update (the runner keeps the last policy, which
    gives zero control once its horizon has ended: :class:`ExpiringPolicy`) after which the
    planner reconnects; a lost session is reopened and replans from the state it is sent.

    Args:
      address, token, tls_ca, planner, settings, seed: as :class:`PolicyClient`.
      model: the plant model, whose sizes must match the served task's.
      wait: seconds an update waits for its policy.

    Its ``update_period`` and ``min_lag`` [s] are the served planner's (sent with every policy):
    the runner sends states no more often (:func:`~contactopt.mpc.runner.planner_update_period`)
    and applies each policy no sooner than ``min_lag`` after its state
    (:func:`~contactopt.mpc.runner.planner_min_lag`).
    """

    def __init__(self, address: str, token=None, tls_ca=None, *, planner=None, settings=None, seed=0, model=None,
                 wait: float = 10.0):
        grpc_module()  # a missing or old grpcio: one clear error before anything starts
        self.conn = _Connection(address, token, tls_ca, planner=planner, settings=settings, seed=seed,
                                expect=None if model is None else layout_of(model), client_name="RemotePlanner",
                                timeout=wait + 5)
        self.conn.open_first()
        self.wait = float(wait)
        self.options: dict = dict(settings or {})
        self.planner_name = self.conn.planner
        self._known = 0
        self.round_trip: list[float] = []
        self.planning: list[float] = []
        self.transport: list[float] = []
        self.transport_failures = 0
        self.update_period = 0.0  # the served planner's, from its first policy on
        self.min_lag = 0.0  # the served planner's (runner.planner_min_lag), from its first policy on

    def _update(self, reply, rtt: float, t: float, record: bool = True):
        from ..mpc.runner import PlannerUpdate

        if not reply.has_policy:
            return PlannerUpdate(None, compute_time=rtt, message=reply.message or "no new policy in time")
        pol = reply.policy
        self.update_period = served_update_period(pol)
        self.min_lag = served_min_lag(pol)
        if pol.t0 < t - 1e-9:
            return PlannerUpdate(None, compute_time=rtt, message="no policy planned from this state in time")
        policy = ExpiringPolicy(decode_policy(pol, self.layout))
        self._known = pol.sequence
        transport = max(rtt - reply.server_time_s, 0.0)
        if record:  # the initial plan (reset) is not a receding-horizon update
            self.round_trip.append(rtt)
            self.planning.append(pol.compute_time_s)
            self.transport.append(transport)
        return PlannerUpdate(policy, cost=pol.cost, compute_time=rtt,
                             breakdown={"planning": pol.compute_time_s, "transport": transport},
                             message=pol.message)

    def _state(self, req, t, x):
        lay = self.layout
        x = np.asarray(x, dtype=float)
        encode_state(req, t, x[:lay.nq], x[lay.nq:lay.nq + lay.nv], x[lay.nq + lay.nv:])

    def reset(self, t: float, x):
        """The first plan from state ``x`` ``(nx,)`` at time ``t`` [s], made on the server."""
        grpc = grpc_module()
        req = pb().ResetRequest(timeout_s=max(self.wait, 30.0))
        self._state(req.state, t, x)
        start = time.perf_counter()
        try:
            reply = self.conn.call_session("Reset", req, timeout=max(self.wait, 30.0) + 5)
        except grpc.RpcError as exc:
            raise _remote_error(exc, self.conn.address, "initial plan") from None
        return self._update(reply, time.perf_counter() - start, t, record=False)

    def update(self, t: float, x):
        """One update: send the state measured at ``t``, wait for a policy planned from it."""
        from ..mpc.runner import PlannerUpdate

        grpc = grpc_module()
        req = pb().StepRequest(known_sequence=self._known, wait_s=self.wait, min_planned_from=float(t))
        self._state(req.state, t, x)
        start = time.perf_counter()
        try:
            reply = self.conn.call("Step", req)
        except grpc.RpcError as exc:
            self.transport_failures += 1
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                try:
                    self.conn.open()
                    self._known = 0
                    return self.reset(t, x)
                except (grpc.RpcError, ContactoptError) as exc2:
                    exc = exc2
            time.sleep(0.05)
            return PlannerUpdate(None, compute_time=time.perf_counter() - start,
                                 message=f"transport: {getattr(exc, 'code', lambda: '')()}: {exc}"[:300])
        return self._update(reply, time.perf_counter() - start, t)

    def summary(self) -> dict:
        """Round trip, planning and transport per applied update [ms]: median and p99."""

        def stats(name, values):
            if not values:
                return {f"{name}_ms_median": None, f"{name}_ms_p99": None}
            a = 1e3 * np.asarray(values)
            return {f"{name}_ms_median": float(np.median(a)), f"{name}_ms_p99": float(np.percentile(a, 99))}

        return {"address": self.conn.address, **stats("round_trip", self.round_trip),
                **stats("planning", self.planning), **stats("transport", self.transport),
                "transport_failures": self.transport_failures, "sessions_reopened": self.conn.reopened}

    def close(self) -> None:
        """Close the session and the channel."""
        self.conn.close()
