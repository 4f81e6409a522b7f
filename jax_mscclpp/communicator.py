"""Communicator: the per-(mesh, axes) setup, made once and reused by every call.

Ranks (docs/architecture.md, "Protocols"): for axes A of mesh M, a device's group is the devices that share its coordinates on the other
axes; its rank is its row-major position along A, in the order A is given (the order ``lax.axis_index`` uses).
XLA numbers the devices of a shard_map program by their row-major position in ``mesh.devices`` (the partition
id), whatever the device order of the mesh; the native side maps a partition id to (group, rank) through the
tables built here.
"""

from __future__ import annotations

import atexit
import itertools
import operator
import threading
from typing import Sequence

import numpy as np

from . import settings
from ._native import CUDA_BUILT, native

# Registered scratch per rank on CPU devices, all of it (every protocol's region, both halves), unless
# JAX_MSCCLPP_SCRATCH_BYTES or scratch_bytes= says otherwise. Messages larger than a region are pipelined through it.
# On GPUs the default, the channels per peer and the streaming kernels' blocks and geometry are the native
# runtime's (runtime/gpu/rank_context.h), by which the NCCL-API library creates its ranks too.
_HOST_SCRATCH_BYTES = 8 << 20


def _default_scratch_bytes(platform: str) -> int:
    if platform == "gpu" and CUDA_BUILT:
        return int(native.cuda.default_scratch_bytes)
    return _HOST_SCRATCH_BYTES


# The host backend needs at least this much scratch per rank of a group, per scratch half (runtime/reference/host_communicator.cc).
_MIN_SCRATCH_BYTES_PER_RANK = 64
# Scratch sizes past this are refused before anything is allocated (2 halves per rank must fit a size_t).
_MAX_SCRATCH_BYTES = 1 << 40


def _check_scratch_bytes(value, what: str) -> int:
    """``value`` as a whole, positive number of bytes, else a clear error naming ``what``."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"{what} must be a whole number of bytes, got {value!r}") from None
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a whole number of bytes, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be a whole number of bytes, got {value!r}") from None
    if not 0 < value <= _MAX_SCRATCH_BYTES:
        raise ValueError(f"{what} must be between 1 and {_MAX_SCRATCH_BYTES} bytes, got {value}")
    return value


def _mesh_devices(mesh):
    """The devices of ``mesh`` in row-major order, or None for an abstract mesh (a communicator made for one runs
    on CPU devices of this process, found by partition id)."""
    from . import _compat

    return _compat.mesh_devices(mesh)


def _normalize_axes(axis_names) -> tuple:
    return tuple(axis_names) if isinstance(axis_names, (tuple, list)) else (axis_names,)


def partition_tables(mesh_shape: Sequence[int], mesh_axis_names: Sequence[str], axes: Sequence[str]):
    """(group_of_partition, rank_of_partition) for every row-major position of a mesh of ``mesh_shape``."""
    shape = tuple(mesh_shape)
    names = tuple(mesh_axis_names)
    reduced = [names.index(a) for a in axes]
    others = [i for i in range(len(names)) if i not in reduced]
    coords = np.indices(shape).reshape(len(shape), -1)  # [ndim, partitions], row-major
    rank = np.ravel_multi_index(tuple(coords[i] for i in reduced), tuple(shape[i] for i in reduced))
    if others:
        group = np.ravel_multi_index(tuple(coords[i] for i in others), tuple(shape[i] for i in others))
    else:
        group = np.zeros_like(rank)
    return group.astype(int).tolist(), rank.astype(int).tolist()


# process index -> {device id: its GPU identity} of that process's devices, as it published them
# (processes_share_gpus). A process can query its own devices only.
_process_gpus: dict = {}


def _local_identity(device) -> bytes | None:
    """The identity of this process's ``device`` (None without the CUDA build: no GPU to share)."""
    return native.cuda.gpu_identity(device.local_hardware_id) if CUDA_BUILT else None


def _gpus_of(process: int, me: int, platform: str, timeout: float) -> dict:
    import base64
    import json

    import jax

    from . import _compat

    if me not in _process_gpus:
        mine = {d.id: _local_identity(d) for d in jax.local_devices(backend=platform)}
        text = json.dumps({i: base64.b64encode(frame).decode() for i, frame in mine.items() if frame is not None})
        _compat.kv_set_bytes(f"jax_mscclpp/gpus/{me}", text.encode(), replace=True)
        _process_gpus[me] = mine
    if process not in _process_gpus:
        published = json.loads(_compat.kv_get_bytes(f"jax_mscclpp/gpus/{process}", timeout).decode())
        _process_gpus[process] = {int(k): base64.b64decode(v) for k, v in published.items()}
    return _process_gpus[process]


def processes_share_gpus(devices) -> bool:
    """Whether two of ``devices`` drive one physical GPU from different processes (a one-GPU machine running a job
    of several processes), by the rule and the identities the communicators' setup uses (``gpu_identity``: the host
    as NCCL names it, the GPU's UUID), before any communicator exists. Each process publishes its devices'
    identities through JAX's coordination service once; a device without one (no CUDA build) shares nothing."""
    import jax

    if jax.process_count() == 1 or not devices:
        return False
    me = jax.process_index()
    timeout = float(native.timeout_seconds())
    identities = [_gpus_of(d.process_index, me, d.platform, timeout).get(d.id) for d in devices]
    return native.identities_share_a_gpu([i for i in identities if i is not None])


class Communicator:
    """Channels, scratch and semaphores among the devices of ``mesh`` along ``axis_names``.

    ``Communicator(mesh, axes)`` returns the one cached for that mesh (its devices, shape and axis names) and
    those axes, creating it on first use; collectives create theirs implicitly. ``scratch_bytes`` (the registered
    scratch of each rank, all of it; default from ``JAX_MSCCLPP_SCRATCH_BYTES`` or the platform's default: 8 MiB
    on CPU, 64 MiB on GPU) applies when it is created; messages larger than what it holds are pipelined through
    it. ``side_stream=True`` names a second communicator over the same devices and axes, for the collectives
    started on the devices' side streams (overlap.py): its scratch and epochs are its own, so that a started call
    never meets one running on XLA's stream.
    """

    _cache: dict = {}
    _lock = threading.Lock()
    _ids = itertools.count(1)
    # Communicators created so far per cache key: every process creates and destroys the communicators of a
    # (mesh, axes) in the same order, so this count names the same generation everywhere (multi-process setup).
    _generations: dict = {}

    def __new__(cls, mesh, axis_names, *, scratch_bytes: int | None = None, port_channels: bool = False,
                side_stream: bool = False):
        if not (hasattr(mesh, "axis_names") and hasattr(mesh, "axis_sizes")):
            raise TypeError(f"Communicator: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
        axes = _normalize_axes(axis_names)
        if not axes:
            raise ValueError("Communicator: axis_names must name at least one axis of the mesh")
        for axis in axes:
            try:
                hash(axis)
            except TypeError:
                raise TypeError(f"Communicator: axis_names must be a mesh axis name or a tuple of them; got "
                                f"{axis_names!r}") from None
        if scratch_bytes is not None:
            scratch_bytes = _check_scratch_bytes(scratch_bytes, "scratch_bytes")
        key = cls._key(mesh, axes, bool(side_stream))
        with cls._lock:
            comm = cls._cache.get(key)
            if comm is None:
                comm = super().__new__(cls)
                comm._setup(mesh, axes, scratch_bytes, port_channels, bool(side_stream))
                cls._cache[key] = comm
            elif scratch_bytes is not None and scratch_bytes != comm.scratch_bytes:
                raise ValueError(
                    f"a communicator for axes {axes} of this mesh already exists with scratch_bytes="
                    f"{comm.scratch_bytes}; destroy() it first to change its scratch"
                )
        return comm

    @classmethod
    def drop_unusable(cls, mesh, axis_names, *, side_stream: bool = False) -> bool:
        """Destroys the cached communicator of (``mesh``, ``axis_names``) if an earlier failure left it unusable, so
        that the next ``Communicator(mesh, axis_names)`` is a fresh one (recovery.py); whether it did. Lowering
        calls it: a program lowered after a failure runs on a fresh communicator, while ``errors()`` of the failed
        one stays readable until then."""
        key = cls._key(mesh, _normalize_axes(axis_names), bool(side_stream))
        with cls._lock:
            comm = cls._cache.get(key)
            if comm is None or not comm.unusable():
                return False
            comm._destroy_locked()
            return True

    @staticmethod
    def _key(mesh, axes: tuple, side_stream: bool):
        devices = _mesh_devices(mesh)
        device_ids = tuple(int(d.id) for d in devices) if devices is not None else None
        return (device_ids, tuple(mesh.axis_names), tuple(mesh.axis_sizes), axes, side_stream)

    def _setup(self, mesh, axes: tuple, scratch_bytes: int | None, port_channels: bool, side_stream: bool) -> None:
        unknown = [a for a in axes if a not in mesh.axis_names]
        if unknown:
            raise NameError(f"axis {unknown[0]!r} is not an axis of the mesh (axes: {tuple(mesh.axis_names)})")
        if len(set(axes)) != len(axes):
            raise ValueError(f"repeated axis in {axes}")
        self.mesh = mesh
        self.axis_names = axes
        self.mesh_shape = tuple(mesh.axis_sizes)
        sizes = dict(zip(mesh.axis_names, self.mesh_shape))
        self.world_size = int(np.prod([sizes[a] for a in axes], dtype=int))
        self.group_of_partition, self.rank_of_partition = partition_tables(self.mesh_shape, mesh.axis_names, axes)
        self.num_groups = len(self.group_of_partition) // self.world_size
        self.devices = _mesh_devices(mesh)
        self.platform = self.devices[0].platform if self.devices else "cpu"
        named = settings.value_of(settings.ENV_SCRATCH_BYTES)
        if scratch_bytes is None and named is not None:
            scratch_bytes = _check_scratch_bytes(named, settings.ENV_SCRATCH_BYTES)
        if scratch_bytes is None:
            scratch_bytes = _default_scratch_bytes(self.platform)
        if scratch_bytes < _MIN_SCRATCH_BYTES_PER_RANK * self.world_size:
            raise ValueError(f"Communicator: scratch of {scratch_bytes} bytes is too small for {self.world_size} ranks "
                             f"(at least {_MIN_SCRATCH_BYTES_PER_RANK * self.world_size})")
        self.scratch_bytes = int(scratch_bytes)
        self.id = next(self._ids)
        self.alive = False
        self.port_channels = bool(port_channels)
        self.side_stream = side_stream
        self.fallback_reason: str | None = None  # set when this communicator cannot run here: lax is emitted
        self._plans: set = set()
        self._local_gpus: tuple = ()  # CUDA ordinals of this process's ranks (GPU communicators)
        # Whether several processes drive one physical GPU among this communicator's devices, where lax's (NCCL's)
        # collectives cannot run (selection.lax_runnable).
        self.shares_gpus = False
        # Whether this communicator's devices belong to several processes: its large GPU calls run outside XLA's
        # command buffers, so that they may run in place on XLA's buffers (selection.in_command_buffers).
        self.spans_processes = bool(self.devices) and len({d.process_index for d in self.devices}) > 1
        self.cache_key = self._key(mesh, axes, side_stream)
        self.generation = self._generations.get(self.cache_key, 0)
        self._generations[self.cache_key] = self.generation + 1
        if self.platform == "cpu" and self.devices and len({d.process_index for d in self.devices}) > 1:
            # The host backend's ranks share one process's memory: across processes nothing would ever arrive.
            self._fall_back("the host backend (CPU devices) runs within one process, and this mesh spans "
                            f"{len({d.process_index for d in self.devices})} processes")
        elif self.platform == "cpu":
            native.create_host_communicator(
                self.id, self.world_size, self.group_of_partition, self.rank_of_partition, self.scratch_half_bytes
            )
            self.alive = True
        elif self.platform == "gpu" and hasattr(native, "cuda"):
            self._setup_gpu()
        else:
            raise NotImplementedError(
                f"jax_mscclpp: no backend for platform {self.platform!r} in this build (CUDA built: "
                f"{hasattr(native, 'cuda')}); use the jax.lax collective there"
            )

    def _setup_gpu(self) -> None:
        """One rank per local device of the mesh: registered scratch and semaphores, mapped by every peer of its
        group (peer access within this process, CUDA IPC across processes, whose endpoints travel through JAX's
        coordination service), then channels."""
        import jax

        cuda = native.cuda
        me = jax.process_index()
        local = {p: d for p, d in enumerate(self.devices) if d.process_index == me}
        if not local:
            raise ValueError("this process holds no device of the communicator's mesh")
        members = {}  # partition -> partitions of its group
        for p in range(len(self.devices)):
            members.setdefault(self.group_of_partition[p], []).append(p)
        if jax.process_count() == 1:
            ordinals = {p: d.local_hardware_id for p, d in local.items()}
            missing = [(a, b) for a in ordinals.values() for b in ordinals.values()
                       if a != b and not cuda.can_access_peer(a, b)]
            if missing:
                self._fall_back(f"no peer access between GPUs {missing[0][0]} and {missing[0][1]}")
                return
        try:
            self._connect_gpu_ranks(local, members)
        except BaseException:
            cuda.comm_destroy(self.id)
            self.alive = False
            raise

    def _fall_back(self, reason: str) -> None:
        """This communicator cannot run here: every collective over its axes emits the lax collective."""
        import warnings

        self.fallback_reason = reason
        warnings.warn(f"jax_mscclpp: {reason}; collectives over {self.axis_names} use lax", RuntimeWarning,
                      stacklevel=4)

    def _connect_gpu_ranks(self, local: dict, members: dict) -> None:
        """The runtime's one setup of this process's ranks (runtime/gpu/rank_setup.h, connect_all): each rank's
        frame is published where every rank reads it (a dict in one process; across processes JAX's key-value
        store, with a failure word and a ready round: setup_exchange.py), every peer's is fetched, then channels are
        built; it says whether two ranks drive one GPU."""
        import jax

        cuda = native.cuda
        exchange = None
        if jax.process_count() > 1:
            from . import _compat
            from .setup_exchange import SetupExchange

            # Every process lowers the same programs, so the prefix is the same everywhere (ids need not be); the
            # generation keeps a communicator re-created after destroy() or a failed setup from reading its
            # predecessor's words.
            device_ids, _, _, axes, side_stream = self.cache_key
            prefix = (f"jax_mscclpp/{self.generation}/" + "/".join(map(str, device_ids)) + "/"
                      + "/".join(map(str, axes)) + ("/side" if side_stream else ""))
            exchange = SetupExchange(
                prefix, f"setting up collectives over {self.axis_names}",
                {r: p for p, r in enumerate(self.rank_of_partition)},
                {p: d.process_index for p, d in enumerate(self.devices)}, jax.process_index(),
                float(native.timeout_seconds()),
                lambda key, value: _compat.kv_set_bytes(key, value, replace=True), _compat.kv_get_bytes)
        try:
            for p, d in local.items():
                cuda.comm_create_rank(self.id, d.local_hardware_id, self.rank_of_partition[p], self.world_size,
                                      self.scratch_bytes, self.port_channels)
            self.alive = True
            frames = {}
            publish, fetch = ((exchange.publish, exchange.fetch) if exchange
                              else (frames.__setitem__, frames.__getitem__))
            ranks = [(d.local_hardware_id, self.rank_of_partition[p],
                      [self.rank_of_partition[q] for q in members[self.group_of_partition[p]]])
                     for p, d in local.items()]
            self.shares_gpus = cuda.comm_connect_all(self.id, ranks, publish, fetch)
            if exchange:
                exchange.ready()
        except BaseException as error:
            if exchange:
                exchange.fail(f"{type(error).__name__}: {error}")
            raise
        self._local_gpus = tuple(d.local_hardware_id for d in local.values())

    @property
    def scratch_half_bytes(self) -> int:
        """What one call's round of data may occupy on the host backend, which splits the scratch in two halves
        by epoch parity (docs/architecture.md, "Scratch")."""
        return self.scratch_bytes // 2

    def in_place_between_processes(self) -> dict:
        """Of this process's calls that could run in place on XLA's buffers between ranks of several processes
        (docs/architecture.md, "In place between processes"): ``{"in_place": how many did, "through_scratch": how
        many copied through scratch because some rank's buffer lay outside an allocation every peer mapped,
        "unavailable": why no call may ("" where they may)}``."""
        if self.platform != "gpu" or not hasattr(native, "cuda"):
            return {"in_place": 0, "through_scratch": 0, "unavailable": "not a GPU communicator"}
        in_place, through_scratch, absence = native.cuda.comm_in_place_between_processes(self.id)
        return {"in_place": int(in_place), "through_scratch": int(through_scratch), "unavailable": absence}

    def errors(self) -> list[str]:
        """What went wrong on this communicator's ranks. GPU: the timeout records its kernels wrote (rank, peer,
        operation, epoch), what a kernel that trapped on a lost peer left behind (also printed on stderr when it
        happens). CPU devices: every failed call (the first 256 per group), with its group, rank and how long
        into the call it failed."""
        if self.platform == "gpu" and hasattr(native, "cuda"):
            return list(native.cuda.comm_errors(self.id))
        if self.platform == "cpu" and self.alive:
            return [f"group {g} rank {r} after {s:.3f} s: {message}"
                    for g, r, s, message in native.host_failures(self.id)]
        return []

    def bind_plan(self, plan_id: int, plan: dict, name: str) -> None:
        """Makes an execution plan, registered as algorithm ``name``, runnable on this communicator (once): on the
        host backend (CPU), or on the plan executor of every rank this process holds (GPU). Raises ValueError when
        the plan cannot run here (a GPU communicator that falls back to lax, too few channels per peer, port
        channels on a communicator made without them)."""
        from .plan_encoding import encode_plan

        if self.fallback_reason is not None:
            raise ValueError(f"jax_mscclpp: collectives over {self.axis_names} use lax here "
                             f"({self.fallback_reason}): no plan runs on this communicator")
        with self._lock:
            if plan_id in self._plans:
                return
            encoded = {**encode_plan(plan), "name": name}
            if self.platform == "cpu":
                native.register_host_plan(self.id, plan_id, **encoded)
            else:
                for device in self._local_gpus:
                    native.cuda.comm_bind_plan(self.id, device, plan_id, **encoded)
            self._plans.add(plan_id)

    def rank(self, device) -> int:
        """The rank of ``device`` in its group."""
        return self.rank_of_partition[self._partition(device)]

    def _partition(self, device) -> int:
        if self.devices is None:
            raise ValueError("this communicator was made for an abstract mesh: it knows no devices")
        for p, d in enumerate(self.devices):
            if d == device or getattr(d, "id", None) == getattr(device, "id", device):
                return p
        raise ValueError(f"{device} is not in this communicator's mesh")

    def unusable(self) -> bool:
        """Whether an earlier failed call left this communicator's ranks out of step, so that it refuses every
        call: on the host backend, and on GPUs where failing kernels stop (``JAX_MSCCLPP_TRAP_ON_FAILURE=0``; a
        kernel that traps takes the process's GPU context with it, and ``errors()`` says why)."""
        if not self.alive:
            return False
        if self.platform == "cpu":
            return bool(native.host_broken(self.id))
        return CUDA_BUILT and bool(native.cuda.comm_stopped_on_failure(self.id))

    def destroy(self) -> None:
        """Frees the native resources; the next use of the same (mesh, axes) creates a fresh communicator."""
        with self._lock:
            self._destroy_locked()

    def _destroy_locked(self) -> None:
        for key, comm in list(self._cache.items()):
            if comm is self:
                del self._cache[key]
        if self.alive:
            if self.platform == "cpu":
                native.destroy_communicator(self.id)
            else:
                native.cuda.comm_destroy(self.id)
            self.alive = False

    def __repr__(self) -> str:
        return (
            f"Communicator(id={self.id}, axes={self.axis_names}, world_size={self.world_size}, "
            f"groups={self.num_groups}, platform={self.platform!r})"
        )

    @classmethod
    def live(cls) -> list["Communicator"]:
        with cls._lock:
            return list(cls._cache.values())


@atexit.register
def _destroy_all() -> None:
    for comm in Communicator.live():
        comm.destroy()
