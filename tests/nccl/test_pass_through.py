"""Our libnccl.so.2 in front of a stand-in "real NCCL" (stand_in_nccl.c) that records what it receives: every call
is forwarded, communicators made through our library are ours and wrap the real ones, foreign communicators pass
untouched, the group depth is counted, and error codes and texts come back as the real library gave them.
Without a real library every call that needs one is ncclSystemError with a last error saying what to do."""

import pytest

from tests.nccl.conftest import run_worker

NCCL_SUCCESS, NCCL_SYSTEM_ERROR, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE = 0, 2, 4, 5
HEADER_VERSION = 23007


@pytest.fixture(scope="module")
def through_stand_in(our_library, stand_in):
    return run_worker("pass_through", stand_in, extra_env={"OUR_NCCL": our_library})


def test_version_is_the_real_librarys(through_stand_in, stand_in):
    assert through_stand_in["version"] == [NCCL_SUCCESS, 22809]
    assert through_stand_in["real_library"] == stand_in


def test_unique_id_round_trip(through_stand_in):
    r = through_stand_in
    assert r["get_unique_id"] == NCCL_SUCCESS and r["id_nonzero"]
    assert r["init_rank"] == NCCL_SUCCESS
    assert r["id_received"], "the init did not receive the id GetUniqueId made"
    assert r["count"] == [NCCL_SUCCESS, 4]
    assert r["user_rank"] == [NCCL_SUCCESS, 2]
    assert r["async_error"] == [NCCL_SUCCESS, 0]


def test_communicators_made_through_us_are_ours_and_wrap_the_real_one(through_stand_in):
    r = through_stand_in
    assert r["comm_is_ours"] == 1
    assert r["real_made_by_stand_in"]
    assert r["count_saw_real"], "the real library was given our handle, not its own communicator"
    assert r["config_comm_is_ours"] == 1


def test_config_passes_unchanged(through_stand_in):
    assert through_stand_in["init_rank_config"] == NCCL_SUCCESS
    assert through_stand_in["config_same_pointer"]
    assert "ncclCommInitRankConfig(version=23007,blocking=1,splitShare=1)" in through_stand_in["calls"]


def test_split_of_ours(through_stand_in):
    r = through_stand_in
    assert r["split"] == NCCL_SUCCESS
    assert r["split_child_is_ours"] == 1
    assert r["split_child_rank"] == [NCCL_SUCCESS, 3]
    assert r["split_no_color"] == [NCCL_SUCCESS, None]


def test_foreign_communicator_passes_untouched(through_stand_in):
    r = through_stand_in
    assert r["foreign_is_ours"] == 0
    assert r["foreign_count"] == [NCCL_SUCCESS, 8]
    assert r["foreign_untouched"]


def test_group_depth(through_stand_in):
    r = through_stand_in
    assert r["group_start"] == NCCL_SUCCESS and r["group_end"] == NCCL_SUCCESS
    assert r["group_depths"] == [0, 1, 2, 1, 0, 0]
    assert r["group_depth_other_thread"] == 0
    assert r["group_start_refused"] == [NCCL_INVALID_USAGE, 0]
    assert r["allreduce_in_group"] == NCCL_SUCCESS
    calls = r["calls"]
    start = calls.index("ncclGroupStart")
    assert calls[start:start + 5] == ["ncclGroupStart", "ncclGroupStart", "ncclAllReduce(count=16,datatype=7,op=0)",
                                      "ncclGroupEnd", "ncclGroupEnd"]


def test_error_codes_and_texts_come_from_the_real_library(through_stand_in):
    r = through_stand_in
    assert r["allreduce_error"] == NCCL_INVALID_USAGE
    assert r["error_string"] == "stand-in error string 5"
    assert r["last_error"] == "stand-in failed with 5"
    assert r["init_invalid"] == NCCL_INVALID_ARGUMENT
    assert r["init_invalid_comm"] is None
    assert r["init_invalid_last_error"] == "stand-in: rank 7 of 2 is invalid"


def test_function_missing_in_the_real_library(through_stand_in, stand_in):
    r = through_stand_in
    assert r["missing_function"] == NCCL_SYSTEM_ERROR
    assert "ncclCommQueryProperties" in r["missing_function_last_error"]
    assert stand_in in r["missing_function_last_error"]
    count_result, text = r["our_error_after_next_call"]
    assert count_result == NCCL_SUCCESS and "jax_mscclpp" not in text


def test_init_all_and_abort(through_stand_in):
    r = through_stand_in
    assert r["init_all"] == NCCL_SUCCESS
    assert r["init_all_ours"] == [1, 1, 1]
    assert r["init_all_ranks"] == [0, 1, 2]
    assert r["abort"] == NCCL_SUCCESS and r["abort_saw_real"]


def test_concurrent_first_calls(our_library, stand_in):
    r = run_worker("concurrent_first_calls", stand_in, extra_env={"OUR_NCCL": our_library})
    assert r["results"] == [NCCL_SUCCESS] * 8
    assert r["calls"] == 8
    assert r["real_library"] == stand_in


def test_destroy(through_stand_in):
    r = through_stand_in
    assert r["destroy_failed"] == [NCCL_INVALID_USAGE, 1], "a failed destroy must leave the handle valid"
    assert r["destroy"] == NCCL_SUCCESS
    assert r["destroy_saw_real"]


@pytest.mark.parametrize("path,expected", [
    ("/nonexistent/libnccl.so.2", "cannot open the real NCCL named by JAX_MSCCLPP_REAL_NCCL: /nonexistent/libnccl.so.2"),
    ("libnccl.so.2", "JAX_MSCCLPP_REAL_NCCL must be an absolute path, got 'libnccl.so.2'"),
], ids=["missing", "relative"])
def test_no_real_nccl(our_library, path, expected):
    r = run_worker("no_real_nccl", path, extra_env={"OUR_NCCL": our_library})
    assert r["get_unique_id"] == NCCL_SYSTEM_ERROR
    assert r["init_rank"] == NCCL_SYSTEM_ERROR
    assert r["last_error"].startswith("jax_mscclpp libnccl.so.2: ncclGetUniqueId: ")
    assert expected in r["last_error"]
    assert expected in r["init_last_error"] and "ncclCommInitRank" in r["init_last_error"]
    assert r["error_string"], "our own text when there is no real library"
    assert r["last_error_after_error_string"] == r["init_last_error"]
    assert r["version"] == [NCCL_SUCCESS, HEADER_VERSION]
    assert r["group_start"] == NCCL_SYSTEM_ERROR and r["group_depth"] == 0
    assert r["real_library"] == ""


def test_our_own_library_is_refused_as_the_real_one(our_library):
    r = run_worker("no_real_nccl", our_library, extra_env={"OUR_NCCL": our_library})
    assert r["get_unique_id"] == NCCL_SYSTEM_ERROR
    assert "is this library itself, not NVIDIA's" in r["last_error"]


def test_without_variable_the_wheel_beside_the_package_is_looked_for(our_library):
    import importlib.util

    if importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.nccl") is not None:
        pytest.skip("the nvidia-nccl wheel is installed here: the library would open it")
    r = run_worker("no_real_nccl", None, extra_env={"OUR_NCCL": our_library})
    assert r["get_unique_id"] == NCCL_SYSTEM_ERROR
    assert "found no real NCCL to forward to" in r["last_error"]
    assert "nvidia/nccl/lib/libnccl.so.2" in r["last_error"]
    assert "set JAX_MSCCLPP_REAL_NCCL" in r["last_error"]


@pytest.fixture(scope="module")
def nvidia_device_api(our_library, stand_in):
    return run_worker("nvidia_device_api", stand_in, extra_env={"OUR_NCCL": our_library})


def test_windows_of_nvidias_communicators_pass_unread(nvidia_device_api):
    r = nvidia_device_api
    assert r["init"] == [NCCL_SUCCESS, NCCL_SUCCESS]
    assert r["register"] == NCCL_SUCCESS and r["register_saw_real"]
    assert r["user_ptr"] == [NCCL_SUCCESS, True]
    assert r["lsa_pointer"] == [NCCL_SUCCESS, 17]
    assert r["multimem_pointer"] == [NCCL_SUCCESS, 0x10000 + 40]
    assert r["deregister"] == NCCL_SUCCESS and r["deregister_saw_real"]
    assert r["destroy"] == NCCL_SUCCESS
    window_calls = [call for call in r["calls"] if "(window=" in call]
    assert window_calls == [f"{name}(window=stand-in's)" for name in (
        "ncclCommWindowRegister", "ncclWinGetUserPtr", "ncclGetLsaDevicePointer", "ncclGetMultimemDevicePointer",
        "ncclCommWindowDeregister")]


def test_device_api_host_functions_go_to_nvidias_library(nvidia_device_api):
    r = nvidia_device_api
    # The stand-in's LSA team of rank 4 of 6 (stride 3), from the real communicator it was given, by value.
    assert r["team_lsa"] == [6, 4, 3, True]
    assert r["rank_to_lsa"] == 100 * 6 + 10 * 3 + 2
    assert r["calc_slots"] == 5 * 2
    assert {"ncclTeamLsa", "ncclTeamRankToLsa", "ncclLLA2ACalcSlots"} <= set(r["calls"])
