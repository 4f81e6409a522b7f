"""Scenarios of the libnccl.so.2 tests, one per process: `python -m tests.nccl._worker SCENARIO` prints one JSON
line. Library scenarios load our library (OUR_NCCL) with ctypes and call it as XLA would; the real NCCL is
whatever JAX_MSCCLPP_REAL_NCCL names (the stand-in, or nothing)."""

import ctypes
import json
import os
import sys
import threading

from tests.nccl._nccl_structs import Config, UniqueId

NCCL_SUCCESS, NCCL_SYSTEM_ERROR, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE = 0, 2, 4, 5


def load(path: str) -> ctypes.CDLL:
    library = ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    library.ncclGetErrorString.restype = ctypes.c_char_p
    library.ncclGetLastError.restype = ctypes.c_char_p
    library.ncclGetLastError.argtypes = [ctypes.c_void_p]
    library.jax_mscclpp_nccl_real_library.restype = ctypes.c_char_p
    library.jax_mscclpp_nccl_real_communicator.restype = ctypes.c_void_p
    library.jax_mscclpp_nccl_real_communicator.argtypes = [ctypes.c_void_p]
    library.jax_mscclpp_nccl_is_ours.argtypes = [ctypes.c_void_p]
    for name in ("ncclCommCount", "ncclCommUserRank", "ncclCommDestroy", "ncclCommGetAsyncError"):
        getattr(library, name).argtypes = [ctypes.c_void_p] + ([ctypes.c_void_p] if name != "ncclCommDestroy" else [])
    library.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
    library.ncclCommAbort.argtypes = [ctypes.c_void_p]
    library.ncclCommSplit.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    library.ncclCommQueryProperties.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return library


def last_error(library, comm=None) -> str:
    return library.ncclGetLastError(comm).decode()


def stand_in_view(path: str) -> ctypes.CDLL:
    """The stand-in itself: the same loaded object our library opened (same path), for what it recorded."""
    view = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    view.stand_in_calls.restype = ctypes.c_char_p
    view.stand_in_last_comm.restype = ctypes.c_void_p
    view.stand_in_last_config.restype = ctypes.c_void_p
    view.stand_in_last_id.restype = ctypes.POINTER(ctypes.c_ubyte * 128)
    return view


def pass_through() -> dict:
    ours = load(os.environ["OUR_NCCL"])
    out: dict = {}
    version = ctypes.c_int()
    out["version"] = (ours.ncclGetVersion(ctypes.byref(version)), version.value)
    out["real_library"] = ours.jax_mscclpp_nccl_real_library().decode()
    view = stand_in_view(os.environ["JAX_MSCCLPP_REAL_NCCL"])

    # The id: made by the real library, handed back unchanged, and what the communicator's init receives.
    uid = UniqueId()
    out["get_unique_id"] = ours.ncclGetUniqueId(ctypes.byref(uid))
    comm = ctypes.c_void_p()
    out["init_rank"] = ours.ncclCommInitRank(ctypes.byref(comm), 4, uid, 2)
    out["id_received"] = bytes(view.stand_in_last_id().contents) == bytes(uid)
    out["id_nonzero"] = any(bytes(uid))
    out["comm_is_ours"] = ours.jax_mscclpp_nccl_is_ours(comm)
    real_comm = ours.jax_mscclpp_nccl_real_communicator(comm)
    out["real_made_by_stand_in"] = real_comm == view.stand_in_last_comm() and real_comm != comm.value
    count, rank = ctypes.c_int(), ctypes.c_int()
    out["count"] = (ours.ncclCommCount(comm, ctypes.byref(count)), count.value)
    out["count_saw_real"] = view.stand_in_last_comm() == real_comm
    out["user_rank"] = (ours.ncclCommUserRank(comm, ctypes.byref(rank)), rank.value)
    async_error = ctypes.c_int(-1)
    out["async_error"] = (ours.ncclCommGetAsyncError(comm, ctypes.byref(async_error)), async_error.value)

    # A config passes through as the same pointer, unread.
    config = Config(size=ctypes.sizeof(Config), magic=0xCAFEBEEF, version=23007, blocking=1, splitShare=1)
    config_comm = ctypes.c_void_p()
    out["init_rank_config"] = ours.ncclCommInitRankConfig(ctypes.byref(config_comm), 2, uid, 0, ctypes.byref(config))
    out["config_same_pointer"] = view.stand_in_last_config() == ctypes.addressof(config)
    out["config_comm_is_ours"] = ours.jax_mscclpp_nccl_is_ours(config_comm)

    # A split of ours: the real library splits the real communicator (the child's rank, key % 4, comes from the
    # parent's rank count, which the stand-in reads from what it was given); the new one is ours too.
    child = ctypes.c_void_p()
    out["split"] = ours.ncclCommSplit(comm, 0, 3, ctypes.byref(child), None)
    out["split_child_is_ours"] = ours.jax_mscclpp_nccl_is_ours(child)
    out["split_child_rank"] = (ours.ncclCommUserRank(child, ctypes.byref(rank)), rank.value)
    no_color = ctypes.c_void_p(1)
    out["split_no_color"] = (ours.ncclCommSplit(comm, -1, 0, ctypes.byref(no_color), None), no_color.value)

    # A communicator the real library made directly passes untouched.
    foreign = ctypes.c_void_p()
    view.ncclCommInitRank(ctypes.byref(foreign), 8, uid, 5)
    out["foreign_is_ours"] = ours.jax_mscclpp_nccl_is_ours(foreign)
    out["foreign_count"] = (ours.ncclCommCount(foreign, ctypes.byref(count)), count.value)
    out["foreign_untouched"] = view.stand_in_last_comm() == foreign.value

    # Group depth: counted per thread, through nesting.
    depths = [ours.jax_mscclpp_nccl_group_depth()]
    out["group_start"] = ours.ncclGroupStart()
    depths.append(ours.jax_mscclpp_nccl_group_depth())
    ours.ncclGroupStart()
    depths.append(ours.jax_mscclpp_nccl_group_depth())
    other_thread = []
    thread = threading.Thread(target=lambda: other_thread.append(ours.jax_mscclpp_nccl_group_depth()))
    thread.start()
    thread.join()
    out["allreduce_in_group"] = ours.ncclAllReduce(None, None, 16, 7, 0, comm, None)
    ours.ncclGroupEnd()
    depths.append(ours.jax_mscclpp_nccl_group_depth())
    out["group_end"] = ours.ncclGroupEnd()
    depths.append(ours.jax_mscclpp_nccl_group_depth())
    ours.ncclGroupEnd()  # one too many: the real library's answer, depth stays at 0
    depths.append(ours.jax_mscclpp_nccl_group_depth())
    out["group_depths"] = depths
    out["group_depth_other_thread"] = other_thread[0]
    view.stand_in_set_next_result(NCCL_INVALID_USAGE)
    out["group_start_refused"] = (ours.ncclGroupStart(), ours.jax_mscclpp_nccl_group_depth())

    # Errors: the real library's code comes back as is, and its texts.
    view.stand_in_set_next_result(NCCL_INVALID_USAGE)
    out["allreduce_error"] = ours.ncclAllReduce(None, None, 16, 7, 0, comm, None)
    out["error_string"] = ours.ncclGetErrorString(NCCL_INVALID_USAGE).decode()
    out["last_error"] = last_error(ours, comm)
    bad = ctypes.c_void_p()
    out["init_invalid"] = ours.ncclCommInitRank(ctypes.byref(bad), 2, uid, 7)
    out["init_invalid_comm"] = bad.value
    out["init_invalid_last_error"] = last_error(ours)
    out["missing_function"] = ours.ncclCommQueryProperties(comm, None)
    out["missing_function_last_error"] = last_error(ours, comm)
    # Our text lasts until the next forwarded call; then ncclGetLastError is the real library's again.
    out["our_error_after_next_call"] = (ours.ncclCommCount(comm, ctypes.byref(count)), last_error(ours, comm))

    # InitAll: every communicator of the array is ours; abort ends one.
    many = (ctypes.c_void_p * 3)()
    out["init_all"] = ours.ncclCommInitAll(many, 3, None)
    out["init_all_ours"] = [ours.jax_mscclpp_nccl_is_ours(c) for c in many]
    out["init_all_ranks"] = [(ours.ncclCommUserRank(c, ctypes.byref(rank)), rank.value)[1] for c in many]
    real_first = ours.jax_mscclpp_nccl_real_communicator(many[0])
    out["abort"] = ours.ncclCommAbort(ctypes.c_void_p(many[0]))
    out["abort_saw_real"] = view.stand_in_last_comm() == real_first

    # Destroy: the real one is destroyed; a failed destroy keeps ours valid.
    view.stand_in_set_next_result(NCCL_INVALID_USAGE)
    out["destroy_failed"] = (ours.ncclCommDestroy(comm), ours.jax_mscclpp_nccl_is_ours(comm))
    out["destroy"] = ours.ncclCommDestroy(comm)
    out["destroy_saw_real"] = view.stand_in_last_comm() == real_comm
    out["calls"] = view.stand_in_calls().decode().split(";")
    return out


class Team(ctypes.Structure):
    _fields_ = [("nRanks", ctypes.c_int), ("rank", ctypes.c_int), ("stride", ctypes.c_int)]


def nvidia_device_api() -> dict:
    """Windows and the device API's host functions on a communicator that is NVIDIA's (made from the real library's
    id, our runtime off). The stand-in's window handle cannot be read from the host, as NVIDIA's (an address in its
    device-side pool) need not be: every window call must reach the stand-in with that handle, unread."""
    ours = load(os.environ["OUR_NCCL"])
    ours.ncclCommWindowRegister.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                            ctypes.c_int]
    ours.ncclWinGetUserPtr.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    ours.ncclGetLsaDevicePointer.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    ours.ncclGetMultimemDevicePointer.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
    ours.ncclCommWindowDeregister.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    ours.ncclTeamLsa.argtypes, ours.ncclTeamLsa.restype = [ctypes.c_void_p], Team
    ours.ncclTeamRankToLsa.argtypes = [ctypes.c_void_p, Team, ctypes.c_int]
    view = stand_in_view(os.environ["JAX_MSCCLPP_REAL_NCCL"])
    uid = UniqueId()
    comm = ctypes.c_void_p()
    out: dict = {"init": (ours.ncclGetUniqueId(ctypes.byref(uid)), ours.ncclCommInitRank(ctypes.byref(comm), 6, uid, 4))}
    real_comm = ours.jax_mscclpp_nccl_real_communicator(comm)
    buffer = ctypes.create_string_buffer(256)
    window, user, device = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    out["register"] = ours.ncclCommWindowRegister(comm, buffer, 256, ctypes.byref(window), 0)
    out["register_saw_real"] = view.stand_in_last_comm() == real_comm
    out["user_ptr"] = (ours.ncclWinGetUserPtr(comm, window, ctypes.byref(user)), user.value == ctypes.addressof(buffer))
    out["lsa_pointer"] = (ours.ncclGetLsaDevicePointer(window, 16, 1, ctypes.byref(device)),
                          device.value - ctypes.addressof(buffer))
    out["multimem_pointer"] = (ours.ncclGetMultimemDevicePointer(window, 40, ctypes.c_void_p(0x10000),
                                                                 ctypes.byref(device)), device.value)
    team = ours.ncclTeamLsa(comm)
    out["team_lsa"] = (team.nRanks, team.rank, team.stride, view.stand_in_last_comm() == real_comm)
    out["rank_to_lsa"] = ours.ncclTeamRankToLsa(comm, team, 2)
    out["calc_slots"] = ours.ncclLLA2ACalcSlots(5, 9)
    out["deregister"] = ours.ncclCommWindowDeregister(comm, window)
    out["deregister_saw_real"] = view.stand_in_last_comm() == real_comm
    out["destroy"] = ours.ncclCommDestroy(comm)
    out["calls"] = view.stand_in_calls().decode().split(";")
    return out


def concurrent_first_calls() -> dict:
    """Threads whose first calls race: the real library opens once and every call is answered."""
    ours = load(os.environ["OUR_NCCL"])
    barrier = threading.Barrier(8)
    results: list = []

    def first_call():
        uid = UniqueId()
        barrier.wait()
        results.append(ours.ncclGetUniqueId(ctypes.byref(uid)))

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    view = stand_in_view(os.environ["JAX_MSCCLPP_REAL_NCCL"])
    return {"results": results, "calls": view.stand_in_calls().decode().count("ncclGetUniqueId"),
            "real_library": ours.jax_mscclpp_nccl_real_library().decode()}


def no_real_nccl() -> dict:
    ours = load(os.environ["OUR_NCCL"])
    out: dict = {}
    uid = UniqueId()
    out["get_unique_id"] = ours.ncclGetUniqueId(ctypes.byref(uid))
    out["last_error"] = last_error(ours)
    comm = ctypes.c_void_p()
    out["init_rank"] = ours.ncclCommInitRank(ctypes.byref(comm), 2, uid, 0)
    out["init_last_error"] = last_error(ours)
    out["error_string"] = ours.ncclGetErrorString(NCCL_SYSTEM_ERROR).decode()
    out["last_error_after_error_string"] = last_error(ours)
    version = ctypes.c_int()
    out["version"] = (ours.ncclGetVersion(ctypes.byref(version)), version.value)
    out["group_start"] = ours.ncclGroupStart()
    out["group_depth"] = ours.jax_mscclpp_nccl_group_depth()
    out["real_library"] = ours.jax_mscclpp_nccl_real_library().decode()
    return out


def enable_after_devices() -> dict:
    import jax

    jax.devices()
    import jax_mscclpp

    try:
        jax_mscclpp.enable_nccl_backend()
    except RuntimeError as error:
        return {"raised": str(error), "active": jax_mscclpp.info()["nccl_backend"]["active"]}
    return {"raised": None}


def enable_beside_other_nccl() -> dict:
    ctypes.CDLL(os.environ["JAX_MSCCLPP_REAL_NCCL"], mode=os.RTLD_GLOBAL)
    import jax_mscclpp

    try:
        jax_mscclpp.enable_nccl_backend()
    except RuntimeError as error:
        return {"raised": str(error)}
    return {"raised": None}


def enable_before_devices() -> dict:
    import jax
    import jax_mscclpp

    before = jax_mscclpp.info()["nccl_backend"]["active"]
    jax_mscclpp.enable_nccl_backend()
    jax_mscclpp.enable_nccl_backend()  # a second call is a no-op
    # JAX's CUDA plugin loads NVIDIA's library by absolute path at the first backend use: the same object ours
    # opened, not a second copy.
    view = stand_in_view(os.environ["JAX_MSCCLPP_REAL_NCCL"])
    real_opened_before_devices = jax_mscclpp.info()["nccl_backend"]["real_nccl_opened"]
    devices = len(jax.devices())
    # What XLA's dlopen("libnccl.so.2") gets: the loaded library with that SONAME, ours.
    by_soname = ctypes.CDLL("libnccl.so.2")
    version = ctypes.c_int()
    by_soname.ncclGetVersion(ctypes.byref(version))
    return {"before": before, "devices": devices, "real_opened_before_devices": real_opened_before_devices,
            "version_reached_the_loaded_stand_in": "ncclGetVersion" in view.stand_in_calls().decode(),
            "status": jax_mscclpp.info()["nccl_backend"],
            "soname_is_ours": hasattr(by_soname, "jax_mscclpp_nccl_group_depth"), "version": version.value}


def enable_without_real_nccl() -> dict:
    import jax_mscclpp

    try:
        jax_mscclpp.enable_nccl_backend()
    except RuntimeError as error:
        return {"raised": str(error)}
    return {"raised": None}


def startup_variable() -> dict:
    from_maps = [line.split()[-1] for line in open("/proc/self/maps") if "libnccl.so" in line]
    jax_imported_at_start = "jax" in sys.modules
    import jax_mscclpp

    return {"mapped": sorted(set(from_maps)), "jax_imported_at_start": jax_imported_at_start,
            "status": jax_mscclpp.info()["nccl_backend"]}


def startup_without_variable() -> dict:
    return {"jax_imported_at_start": "jax" in sys.modules,
            "mapped": sorted({line.split()[-1] for line in open("/proc/self/maps") if "libnccl.so" in line})}


def our_runtime() -> dict:
    """Ids, inits and groups with our runtime on and no real library (JAX_MSCCLPP_REAL_NCCL unset, none beside)."""
    ours = load(os.environ["OUR_NCCL"])
    ours.jax_mscclpp_nccl_call_counts.restype = ctypes.c_char_p
    out: dict = {"runtime_enabled": ours.jax_mscclpp_nccl_runtime_enabled()}
    ids = [UniqueId(), UniqueId()]
    out["get_unique_id"] = [ours.ncclGetUniqueId(ctypes.byref(uid)) for uid in ids]
    out["ids"] = [bytes(uid)[:8].decode(errors="replace") for uid in ids]
    out["ids_differ"] = bytes(ids[0]) != bytes(ids[1])
    comm = ctypes.c_void_p()
    out["init_rank"] = ours.ncclCommInitRank(ctypes.byref(comm), 1, ids[0], 0)
    out["init_error"] = last_error(ours)
    out["group"] = [ours.ncclGroupStart(), ours.jax_mscclpp_nccl_group_depth(), ours.ncclGroupEnd(),
                    ours.jax_mscclpp_nccl_group_depth()]
    out["real_library"] = ours.jax_mscclpp_nccl_real_library().decode()
    out["calls"] = ours.jax_mscclpp_nccl_call_counts().decode()
    return out


def _rank_library():
    """Our library with the prototypes the lifecycle scenarios call."""
    ours = load(os.environ["OUR_NCCL"])
    ours.jax_mscclpp_nccl_backend.restype = ctypes.c_char_p
    ours.jax_mscclpp_nccl_backend.argtypes = [ctypes.c_void_p]
    ours.ncclCommInitRankConfig.argtypes = [ctypes.c_void_p, ctypes.c_int, UniqueId, ctypes.c_int, ctypes.c_void_p]
    ours.ncclCommInitRank.argtypes = [ctypes.c_void_p, ctypes.c_int, UniqueId, ctypes.c_int]
    return ours


def _shared_id(ours, rank: int) -> UniqueId:
    """Rank 0 makes the id and writes it to ID_FILE; the others wait for it there."""
    import time

    path = os.environ["ID_FILE"]
    uid = UniqueId()
    if rank == 0:
        assert ours.ncclGetUniqueId(ctypes.byref(uid)) == NCCL_SUCCESS, last_error(ours)
        with open(path + ".tmp", "wb") as f:
            f.write(bytes(uid))
        os.replace(path + ".tmp", path)
        return uid
    for _ in range(3000):
        if os.path.exists(path):
            ctypes.memmove(ctypes.byref(uid), open(path, "rb").read(), 128)
            return uid
        time.sleep(0.01)
    raise TimeoutError("no id from rank 0")


def lifecycle_rank() -> dict:
    """One rank (RANK of NRANKS) of a communicator made from our id, with the real NCCL JAX_MSCCLPP_REAL_NCCL names:
    init (a non-blocking config where NONBLOCKING=1, polled through ncclCommGetAsyncError), one all-reduce, the
    backend chosen, what the stand-in received, destroy."""
    import time

    ours = _rank_library()
    rank, nranks = int(os.environ["RANK"]), int(os.environ["NRANKS"])
    uid = _shared_id(ours, rank)
    comm = ctypes.c_void_p()
    out: dict = {}
    if os.environ.get("NONBLOCKING") == "1":
        config = Config(size=ctypes.sizeof(Config), magic=0xCAFEBEEF, version=23007, blocking=0, splitShare=0)
        out["init"] = ours.ncclCommInitRankConfig(ctypes.byref(comm), nranks, uid, rank, ctypes.byref(config))
        states = []
        state = ctypes.c_int(7)
        for _ in range(6000):
            ours.ncclCommGetAsyncError(comm, ctypes.byref(state))
            if not states or states[-1] != state.value:
                states.append(state.value)
            if state.value != 7:
                break
            time.sleep(0.01)
        out["async_states"] = states
    else:
        out["init"] = ours.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank)
    out["init_error"] = last_error(ours, comm)
    out["is_ours"] = ours.jax_mscclpp_nccl_is_ours(comm) if comm.value else 0
    out["backend"] = ours.jax_mscclpp_nccl_backend(comm).decode() if comm.value else ""
    if out["init"] in (NCCL_SUCCESS, 7) and comm.value:
        out["allreduce"] = ours.ncclAllReduce(None, None, 33, 7, 0, comm, None)
        out["destroy"] = ours.ncclCommDestroy(comm)
    real = os.environ.get("JAX_MSCCLPP_REAL_NCCL")
    out["calls"] = stand_in_view(real).stand_in_calls().decode().split(";") if real and os.path.exists(real) else []
    return out


def group_inits() -> dict:
    """One thread inits NRANKS ranks of one communicator inside a group: deferred to the outermost ncclGroupEnd,
    which runs them concurrently (each meets the others at the root)."""
    ours = _rank_library()
    nranks = int(os.environ["NRANKS"])
    uid = UniqueId()
    assert ours.ncclGetUniqueId(ctypes.byref(uid)) == NCCL_SUCCESS
    comms = [ctypes.c_void_p() for _ in range(nranks)]
    out: dict = {"start": ours.ncclGroupStart()}
    out["inits"] = [ours.ncclCommInitRank(ctypes.byref(c), nranks, uid, r) for r, c in enumerate(comms)]
    state = ctypes.c_int(-1)
    ours.ncclCommGetAsyncError(comms[0], ctypes.byref(state))
    out["state_in_group"] = state.value
    out["end"] = ours.ncclGroupEnd()
    out["end_error"] = last_error(ours)
    out["states"] = []
    for c in comms:
        ours.ncclCommGetAsyncError(c, ctypes.byref(state))
        out["states"].append(state.value)
    out["backends"] = [ours.jax_mscclpp_nccl_backend(c).decode() for c in comms]
    out["destroys"] = [ours.ncclCommDestroy(c) for c in comms]
    real = os.environ.get("JAX_MSCCLPP_REAL_NCCL")
    out["calls"] = stand_in_view(real).stand_in_calls().decode().split(";") if real and os.path.exists(real) else []
    return out


class SimInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("estimatedTime", ctypes.c_float)]


def simulate_end() -> dict:
    """ncclGroupSimulateEnd with our runtime on and no real library: it leaves the group, runs nothing now or at the
    next ncclGroupEnd (an init queued in the simulated group is never made), and fills the estimate."""
    ours = _rank_library()
    uid = UniqueId()
    assert ours.ncclGetUniqueId(ctypes.byref(uid)) == NCCL_SUCCESS
    out: dict = {"start": ours.ncclGroupStart(), "depth_in": ours.jax_mscclpp_nccl_group_depth()}
    comm = ctypes.c_void_p()
    out["init_in_group"] = ours.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)
    info = SimInfo(size=ctypes.sizeof(SimInfo), magic=0x74685283, version=23007, estimatedTime=-1.0)
    out["simulate"] = ours.ncclGroupSimulateEnd(ctypes.byref(info))
    out["estimate"] = info.estimatedTime
    out["depth_after"] = ours.jax_mscclpp_nccl_group_depth()
    out["next_group"] = [ours.ncclGroupStart(), ours.ncclGroupEnd()]
    state = ctypes.c_int(-1)
    out["async_error"] = (ours.ncclCommGetAsyncError(comm, ctypes.byref(state)), state.value)
    out["last_error"] = last_error(ours, comm)
    out["destroy"] = ours.ncclCommDestroy(comm)
    out["simulate_null"] = ours.ncclGroupSimulateEnd(None)
    return out


def buffers_without_gpu() -> dict:
    """ncclMemAlloc with our runtime on and no GPU: a CUDA failure reported, not a crash; ncclMemFree of a pointer
    nobody allocated goes to the real library (none here: ncclSystemError)."""
    ours = _rank_library()
    ptr = ctypes.c_void_p()
    out = {"alloc": ours.ncclMemAlloc(ctypes.byref(ptr), 1 << 20), "alloc_error": last_error(ours)}
    out["free_foreign"] = ours.ncclMemFree(ctypes.c_void_p(0x1000))
    window = ctypes.c_void_p()
    ours.ncclGetPeerDevicePointer.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    out["peer_pointer"] = ours.ncclGetPeerDevicePointer(None, 0, 1, ctypes.byref(window))
    return out


SCENARIOS = {f.__name__: f for f in (pass_through, nvidia_device_api, our_runtime, concurrent_first_calls, no_real_nccl, lifecycle_rank,
                                     group_inits, simulate_end, buffers_without_gpu,
                                     enable_after_devices, enable_beside_other_nccl, enable_before_devices,
                                     enable_without_real_nccl, startup_variable, startup_without_variable)}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]]()))
