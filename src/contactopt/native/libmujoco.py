"""The ``libmujoco`` call layer of the compiled (numba) kernels.

The kernels of :mod:`contactopt.dynamics.mujoco_fd` (rollouts, finite differences), of the
cost's kinematics pass, of IDTO (:mod:`contactopt.solvers.idto.problem`,
:mod:`contactopt.contact.compliant_batch`), of goal-directed dynamics
(:mod:`contactopt.solvers.gdd`) and of iLQG (:mod:`contactopt.solvers.ilqg.kernels`) call the
MuJoCo C functions bound here:

* :data:`NATIVE` — whether the ``libmujoco`` of the Python bindings was found and its
  functions bound (else every caller runs its Python loop);
* ``mj_*`` / ``mjd_*`` — the bound C functions as numba intrinsics (pointer arguments as
  integer addresses: ``m._address``, ``d._address``, ``array.ctypes.data``);
* :func:`raw_array` and ``raw_f64`` … ``raw_i64_2d`` — arrays at a raw address in compiled code;
* :func:`ncon_field_offset`, :func:`option_flags_offset`, :func:`pointer_field_offset` — byte
  offsets of ``mjData`` / ``mjModel`` fields;
* numpy-exact scalar and matrix helpers (:func:`mv`, :func:`np_max`, :func:`np_min`) and
  :func:`load_state`;
* :func:`native_kinematics` — the cost's per-stage kinematics pass;
* :func:`native_mechanical_energy` — the mechanical energy and its Jacobian over stages.
"""

from __future__ import annotations

import ctypes
import glob
import math
import os

import mujoco
import numpy as np
from llvmlite import binding as _llvm
from numba import njit as _njit
from numba.core import types as _nb_types
from numba.core.extending import intrinsic as _intrinsic

__all__ = [
    "MJSTATE_TIME",
    "NATIVE",
    "NATIVE_FUNCTIONS",
    "NATIVE_JAC_KINDS",
    "NATIVE_POINT_KINDS",
    "bind_native",
    "find_libmujoco",
    "kinematics_kernel",
    "load_state",
    "mj_collision",
    "mj_compos",
    "mj_crb",
    "mj_differentiatepos",
    "mj_fullm",
    "mj_fwdposition",
    "mj_fwdvelocity",
    "mj_integratepos",
    "mj_inverse",
    "mj_jacbody",
    "mj_jacbodycom",
    "mj_jacsite",
    "mj_jacsubtreecom",
    "mj_kinematics",
    "mj_mulm",
    "mj_setstate",
    "mj_step",
    "mjd_inversefd",
    "mjd_transitionfd",
    "mv",
    "native_kinematics",
    "native_mechanical_energy",
    "ncon_field_offset",
    "np_max",
    "np_min",
    "option_flags_offset",
    "pointer_field_offset",
    "raw_array",
    "raw_f64",
    "raw_f64_2d",
    "raw_i32",
    "raw_i64",
    "raw_i64_2d",
    "raw_u64",
]


# =========================================================================== native calls
#
# The per-step loops of a rollout and of the cost's kinematics pass call MuJoCo ~10 times per
# step from Python; most of their time was interpreter overhead.  They run as numba kernels that
# call the very MuJoCo C functions the Python bindings call (``mj_step``, ``mj_kinematics``, ...,
# looked up in the ``libmujoco`` the bindings have loaded, on the ``MjModel``/``MjData`` pointers
# of the Python objects), so the results are bit for bit those of the Python loops, which remain
# as the reference and the fallback (``NATIVE`` false: no ``libmujoco`` of the bindings' version
# found next to them, or ``MjData`` without ``_address``; ``MujocoDynamics.native = False``).  The
# kernels are compiled on first use (numba caches them next to this module).  One difference: a
# MuJoCo *fatal* error inside a kernel (e.g. ``mj_stackAlloc: out of memory`` with a too small
# ``<size memory=...>``) goes to MuJoCo's default handler, which prints it and ends the process,
# where the Python loop raised ``mujoco.FatalError``.

NATIVE_FUNCTIONS = {
    # symbol: (MuJoCo function, argument kinds: p = pointer, d = double, i = int)
    "contactopt_mj_step": ("mj_step", "pp"),
    "contactopt_mj_kinematics": ("mj_kinematics", "pp"),
    "contactopt_mj_compos": ("mj_comPos", "pp"),
    "contactopt_mj_crb": ("mj_crb", "pp"),
    "contactopt_mj_mulm": ("mj_mulM", "pppp"),
    "contactopt_mj_differentiatepos": ("mj_differentiatePos", "ppdpp"),
    "contactopt_mj_jacsite": ("mj_jacSite", "ppppi"),
    "contactopt_mj_jacbody": ("mj_jacBody", "ppppi"),
    "contactopt_mj_jacbodycom": ("mj_jacBodyCom", "ppppi"),
    "contactopt_mj_jacsubtreecom": ("mj_jacSubtreeCom", "pppi"),
    "contactopt_mj_setstate": ("mj_setState", "pppi"),
    "contactopt_mj_collision": ("mj_collision", "pp"),
    "contactopt_mj_fwdposition": ("mj_fwdPosition", "pp"),
    "contactopt_mj_fwdvelocity": ("mj_fwdVelocity", "pp"),
    "contactopt_mj_inverse": ("mj_inverse", "pp"),
    "contactopt_mj_fullm": ("mj_fullM", "ppp"),
    "contactopt_mj_integratepos": ("mj_integratePos", "pppd"),
    # mjtBool flg_actuation as a zero-extended int (as flg_centered below); NULL outputs as 0
    "contactopt_mjd_inversefd": ("mjd_inverseFD", "ppdippppppp"),
    # mjtBool flg_centered passed as a zero-extended int (the ABI reads its low byte)
    "contactopt_mjd_transitionfd": ("mjd_transitionFD", "ppdipppp"),
}


def find_libmujoco():
    """The ``libmujoco`` the Python bindings use (same directory, same version), or None."""
    here = os.path.dirname(mujoco.__file__)
    for pattern in ("libmujoco.so*", "libmujoco*.dylib", "mujoco.dll"):
        for path in sorted(glob.glob(os.path.join(here, pattern))):
            try:
                lib = ctypes.CDLL(path)
                ver = lib.mj_versionString
            except (OSError, AttributeError):
                continue
            ver.restype = ctypes.c_char_p
            if ver().decode() == mujoco.mj_versionString():
                return lib
    return None


def bind_native() -> bool:
    try:
        probe = mujoco.MjData(mujoco.MjModel.from_xml_string("<mujoco/>"))
        if not isinstance(getattr(probe, "_address", None), int):
            return False
        lib = find_libmujoco()
        if lib is None:
            return False
        for symbol, (fn, _) in NATIVE_FUNCTIONS.items():
            _llvm.add_symbol(symbol, ctypes.cast(getattr(lib, fn), ctypes.c_void_p).value)
        return True
    except Exception:  # noqa: BLE001  # pragma: no cover - no native path on this installation
        return False


#: whether the compiled loops are available (else the Python loops run)
NATIVE = bind_native()


def raw_array(dtype, ndim=1):
    """An intrinsic ``f(addr, n)`` (``ndim`` 1) or ``f(addr, n, m)`` (``ndim`` 2): the ``(n,)`` or
    ``(n, m)`` C-contiguous ``dtype`` array at the integer address ``addr``, without an owner
    (usable in code compiled without reference counting, where ``numba.carray`` is not)."""
    from numba.core import cgutils

    arrty = _nb_types.Array(dtype, ndim, "C")

    def codegen(context, builder, signature, args):
        el = context.get_data_type(dtype)
        out = context.make_array(arrty)(context, builder)
        size = context.get_constant(_nb_types.intp, context.get_abi_sizeof(el))
        dims = [context.cast(builder, v, t, _nb_types.intp)
                for v, t in zip(args[1:], signature.args[1:])]
        strides = [size] if ndim == 1 else [builder.mul(dims[1], size), size]
        context.populate_array(out, data=builder.inttoptr(args[0], el.as_pointer()),
                               shape=cgutils.pack_array(builder, dims),
                               strides=cgutils.pack_array(builder, strides),
                               itemsize=size, meminfo=None)
        return out._getvalue()

    if ndim == 1:
        @_intrinsic
        def raw(typingctx, addr, n):
            return arrty(_nb_types.uintp, n), codegen
    else:
        @_intrinsic
        def raw(typingctx, addr, n, m):
            return arrty(_nb_types.uintp, n, m), codegen
    return raw


#: ``(n,)`` float64 / int32 / int64 / uint64 arrays and ``(n, m)`` float64 / int64 arrays at a raw
#: address, in compiled code (see :func:`raw_array`)
raw_f64 = raw_array(_nb_types.float64)
raw_i32 = raw_array(_nb_types.int32)
raw_i64 = raw_array(_nb_types.int64)
raw_u64 = raw_array(_nb_types.uint64)
raw_f64_2d = raw_array(_nb_types.float64, 2)
raw_i64_2d = raw_array(_nb_types.int64, 2)


def ncon_field_offset(d: mujoco.MjData) -> int:
    """Byte offset in the ``mjData`` struct of ``ncon``: the first ``int`` after the ``timer``
    array (``mjdata.h``; ``ne, nf, nl, nefc`` follow).  The callers check it on probe models."""
    timer = d.timer.duration
    return timer.ctypes.data - d._address + timer.strides[0] * timer.shape[0]


def option_flags_offset(m: mujoco.MjModel) -> int:
    """Byte offset in the ``mjModel`` struct of ``opt.disableflags`` (``opt.enableflags`` is the
    ``int`` after it, ``mjmodel.h``), found by writing two bit patterns through the bindings and
    scanning the struct's first 16 KiB for them; ``m.opt`` is restored.  The callers check it on
    probe models.

    Raises:
      RuntimeError: no single offset holds the patterns.
    """
    base = m._address
    old = m.opt.disableflags, m.opt.enableflags
    try:
        hits = range(0, 16384, 4)
        for dis, ena in ((0x5A5A1234, 0x0F0F4321), (0x1234A5A5, 0x2468ACE1)):
            m.opt.disableflags = dis
            m.opt.enableflags = ena
            hits = [o for o in hits if ctypes.c_int32.from_address(base + o).value == dis
                    and ctypes.c_int32.from_address(base + o + 4).value == ena]
    finally:
        m.opt.disableflags, m.opt.enableflags = old
    if len(hits) != 1:
        raise RuntimeError(f"opt.disableflags found at {len(hits)} offsets of mjModel")
    return hits[0]


def pointer_field_offset(d: mujoco.MjData, address: int, start: int = 0) -> int:
    """Byte offset in the ``mjData`` struct of the pointer field that holds ``address``.

    Scans the 8-byte aligned slots from ``start`` (at most 32 KiB) for the value ``address``
    (e.g. ``d.efc_J.ctypes.data``: the offset of the ``efc_J`` field).  Used to read arena
    arrays whose addresses change from step to step (the constraint rows) in compiled code;
    the callers validate the offsets on probe models.

    Raises:
      RuntimeError: no slot holds ``address``.
    """
    base = d._address
    first = (start + 7) // 8 * 8
    for off in range(first, first + 8 * 4096, 8):
        if ctypes.c_uint64.from_address(base + off).value == address:
            return off
    raise RuntimeError(f"no mjData field points to {address:#x}")


_ARG = {"p": _nb_types.uintp, "d": _nb_types.float64, "i": _nb_types.int32}
_mj = {symbol[len("contactopt_"):]: _nb_types.ExternalFunction(
           symbol, _nb_types.void(*[_ARG[c] for c in kinds]))
       for symbol, (_, kinds) in NATIVE_FUNCTIONS.items()}
mj_step = _mj["mj_step"]
mj_kinematics = _mj["mj_kinematics"]
mj_compos = _mj["mj_compos"]
mj_crb = _mj["mj_crb"]
mj_mulm = _mj["mj_mulm"]
mj_differentiatepos = _mj["mj_differentiatepos"]
mj_jacsite = _mj["mj_jacsite"]
mj_jacbody = _mj["mj_jacbody"]
mj_jacbodycom = _mj["mj_jacbodycom"]
mj_jacsubtreecom = _mj["mj_jacsubtreecom"]
mj_setstate = _mj["mj_setstate"]
mj_collision = _mj["mj_collision"]
mj_fwdposition = _mj["mj_fwdposition"]
mj_fwdvelocity = _mj["mj_fwdvelocity"]
mj_inverse = _mj["mj_inverse"]
mj_fullm = _mj["mj_fullm"]
mj_integratepos = _mj["mj_integratepos"]
mjd_inversefd = _mj["mjd_inversefd"]
mjd_transitionfd = _mj["mjd_transitionfd"]
MJSTATE_TIME = int(mujoco.mjtState.mjSTATE_TIME)


@_njit(cache=True)
def mv(M, v):
    """``M @ v`` exactly as numpy computes it (BLAS gemv; a single-row ``M`` is a dot product
    there, not gemv).  Shared with :mod:`contactopt.solvers.ilqg.kernels`."""
    if M.shape[0] == 1:
        out = np.empty(1)
        out[0] = np.dot(M[0], v)
        return out
    return np.dot(M, v)


@_njit(cache=True)
def load_state(x, qpos, qvel, act):
    """``qpos, qvel, act ← x = (qpos, qvel, act)`` (the ``MjData`` views of a kernel)."""
    nq = qpos.shape[0]
    nv = qvel.shape[0]
    for j in range(nq):
        qpos[j] = x[j]
    for j in range(nv):
        qvel[j] = x[nq + j]
    for j in range(act.shape[0]):
        act[j] = x[nq + nv + j]


@_njit(cache=True)
def np_max(a, b):
    """``np.maximum`` of two floats as numpy computes it (NaN from either; ``b`` for equal values,
    so ``max(-0.0, 0.0) = 0.0``: the x86 ``maxpd`` rule numpy's loops follow)."""
    return a if (math.isnan(a) or a > b) else b


@_njit(cache=True)
def np_min(a, b):
    """``np.minimum`` of two floats as numpy computes it (see :func:`np_max`)."""
    return a if (math.isnan(a) or a < b) else b



#: point kinds and Jacobian kinds of the cost's kinematics kernel (codes = positions)
NATIVE_POINT_KINDS = ("site_xpos", "xpos", "xipos", "subtree_com")
NATIVE_JAC_KINDS = ("jac_site", "jac_body", "jac_bodycom", "jac_subtreecom")


@_njit(cache=True)
def kinematics_kernel(m, d, qpos, qvel, act, site_xpos, xpos, xipos, subtree_com, X,
                       point_kind, point_id, P, jac_kind, jac_id, J):
    """Per stage ``i``: load ``X[i]``, ``mj_kinematics``, ``mj_comPos``; copy the requested
    points (``P[k, i] = <kind>[id]``) and translational Jacobians (``J[k, i]``, ``mj_jac*``)."""
    N = X.shape[0]
    for i in range(N):
        load_state(X[i], qpos, qvel, act)
        mj_kinematics(m, d)
        mj_compos(m, d)
        for k in range(point_kind.shape[0]):
            kind = point_kind[k]
            oid = point_id[k]
            for c in range(3):
                if kind == 0:
                    P[k, i, c] = site_xpos[oid, c]
                elif kind == 1:
                    P[k, i, c] = xpos[oid, c]
                elif kind == 2:
                    P[k, i, c] = xipos[oid, c]
                else:
                    P[k, i, c] = subtree_com[oid, c]
        for k in range(jac_kind.shape[0]):
            kind = jac_kind[k]
            oid = np.int32(jac_id[k])
            out = J[k, i].ctypes.data
            if kind == 0:
                mj_jacsite(m, d, out, 0, oid)
            elif kind == 1:
                mj_jacbody(m, d, out, 0, oid)
            elif kind == 2:
                mj_jacbodycom(m, d, out, 0, oid)
            else:
                mj_jacsubtreecom(m, d, out, oid)


def native_kinematics(model, data, X, points, jacobians):
    """Kinematics of ``N`` states for a batched cost evaluation (see ``costs._evaluate_stages``).

    Args:
      model, data: the ``MjModel`` and a scratch ``MjData`` (overwritten).
      X: ``(N, nx)`` states.
      points: ``[(kind, id)]`` with ``kind`` in :data:`NATIVE_POINT_KINDS`.
      jacobians: ``[(kind, id)]`` with ``kind`` in :data:`NATIVE_JAC_KINDS`.

    Returns:
      ``(P (len(points), N, 3), J (len(jacobians), N, 3, nv))`` (``P[k]``, ``J[k]`` contiguous).
    """
    X = np.ascontiguousarray(X, dtype=float)
    N = X.shape[0]
    pk = np.array([NATIVE_POINT_KINDS.index(k) for k, _ in points], dtype=np.int64)
    pi = np.array([i for _, i in points], dtype=np.int64)
    jk = np.array([NATIVE_JAC_KINDS.index(k) for k, _ in jacobians], dtype=np.int64)
    ji = np.array([i for _, i in jacobians], dtype=np.int64)
    P = np.empty((len(points), N, 3))
    J = np.zeros((len(jacobians), N, 3, model.nv))
    kinematics_kernel(model._address, data._address, data.qpos, data.qvel, data.act, data.site_xpos,
                       data.xpos, data.xipos, data.subtree_com, X, pk, pi, P, jk, ji, J)
    return P, J


@_njit(cache=True)
def _kinetic_energy(m, d, qvel, mv):
    """``½ vᵀ M(q) v`` of the loaded state (``mj_kinematics`` + ``mj_comPos`` done): ``mj_crb``,
    ``mv ← M v`` (``mj_mulM``), then the dot product in index order."""
    mj_crb(m, d)
    mj_mulm(m, d, mv.ctypes.data, qvel.ctypes.data)
    ke = 0.0
    for j in range(qvel.shape[0]):
        ke += qvel[j] * mv[j]
    return 0.5 * ke


@_njit(cache=True)
def energy_kernel(m, d, qpos, qvel, act, subtree_com, X, mass, gravity, eps, jacobian, E, JX):
    """Per stage ``i``: ``E[i] = ½ vᵀM(q)v − mass · gravity · c(q)`` of ``X[i]`` (``c``: the
    centre of mass, ``subtree_com[0]``) and, when ``jacobian``, ``JX[i] (ndx,)``: ``∂E/∂v = M v``,
    ``∂E/∂q = −mass · gravityᵀ J_c`` plus forward differences of ``½ vᵀM(q)v`` along each tangent
    direction ``q ⊕ eps e_j`` (``mj_integratePos``); the same C calls as
    ``MechanicalEnergy.evaluate`` stage by stage."""
    N = X.shape[0]
    nq = qpos.shape[0]
    nv = qvel.shape[0]
    mv = np.empty(nv)
    mv2 = np.empty(nv)
    jac = np.zeros((3, nv))
    dq = np.zeros(nv)
    for i in range(N):
        load_state(X[i], qpos, qvel, act)
        mj_kinematics(m, d)
        mj_compos(m, d)
        ke = _kinetic_energy(m, d, qvel, mv)
        potential = 0.0
        for c in range(3):
            potential += gravity[c] * subtree_com[0, c]
        E[i] = ke - mass * potential
        if not jacobian:
            continue
        mj_jacsubtreecom(m, d, jac.ctypes.data, 0)
        for j in range(nv):
            g = 0.0
            for c in range(3):
                g += gravity[c] * jac[c, j]
            JX[i, j] = -mass * g
            JX[i, nv + j] = mv[j]
        for j in range(nv):
            for k in range(nq):
                qpos[k] = X[i, k]
            dq[j] = eps
            mj_integratepos(m, qpos.ctypes.data, dq.ctypes.data, 1.0)
            dq[j] = 0.0
            mj_kinematics(m, d)
            mj_compos(m, d)
            JX[i, j] += (_kinetic_energy(m, d, qvel, mv2) - ke) / eps


def native_mechanical_energy(model, data, X, mass, gravity, eps, jacobian):
    """Mechanical energy of ``N`` states and its state Jacobian (``MechanicalEnergy``'s batch).

    Args:
      model, data: the ``MjModel`` and a scratch ``MjData`` (overwritten).
      X: ``(N, nx)`` states.
      mass: total mass [kg]; gravity: ``(3,)`` [m/s²]; eps: the forward-difference step of
        ``∂(½ vᵀMv)/∂q``.
      jacobian: whether to fill the Jacobian.

    Returns:
      ``(E (N,), JX (N, ndx) | None)``: energies [J] and ``∂E/∂x`` in the tangent space
      (``ndx = 2 nv + na``; the activation columns are zero).
    """
    X = np.ascontiguousarray(X, dtype=float)
    N = X.shape[0]
    E = np.empty(N)
    JX = np.zeros((N, 2 * model.nv + model.na)) if jacobian else np.zeros((0, 0))
    gravity = np.ascontiguousarray(gravity, dtype=float)
    energy_kernel(model._address, data._address, data.qpos, data.qvel, data.act, data.subtree_com,
                  X, float(mass), gravity, float(eps), bool(jacobian), E, JX)
    return E, (JX if jacobian else None)
