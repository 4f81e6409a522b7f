"""The built libnccl.so.2: its SONAME, and that it exports every NCCL function XLA resolves, every function of our
header with its p<name> alias, and nothing else but the introspection functions."""

import re
from pathlib import Path

from tests.nccl import elf_symbols

HERE = Path(__file__).resolve().parent
DEFINITIONS = HERE.parents[1] / "nccl" / "include" / "jax_mscclpp_nccl" / "api_functions.def"
INTROSPECTION = set(re.findall(r"\b(jax_mscclpp_nccl_\w+)\(", (DEFINITIONS.parent / "introspection.h").read_text()))


# The host functions of NCCL 2.30.7's device API (its src/include/nccl_device/*.h, defined in src/dev_runtime.cc and
# src/nccl_device/*.cc): exported by NVIDIA's library, so by ours.
DEVICE_API_HOST_FUNCTIONS = {
    "ncclCommQueryProperties", "ncclDevCommCreate", "ncclDevCommDestroy", "ncclGetLsaMultimemDevicePointer",
    "ncclGetMultimemDevicePointer", "ncclGetLsaDevicePointer", "ncclGetPeerDevicePointer", "ncclTeamWorld",
    "ncclTeamLsa", "ncclTeamRail", "ncclTeamRankToWorld", "ncclTeamRankToLsa", "ncclGinBarrierCreateRequirement",
    "ncclLsaBarrierCreateRequirement", "ncclLLA2ACalcSlots", "ncclLLA2ACreateRequirement",
    "ncclGinOutboxCreateRequirement", "ncclGinInboxA2ACreateRequirement",
}


def header_functions() -> set[str]:
    text = DEFINITIONS.read_text()
    return set(re.findall(r"^JAX_MSCCLPP_NCCL_FUNCTION\(\s*\w+\s*,[^,]+,\s*(nccl\w+)", text, flags=re.M))


def xla_functions() -> set[str]:
    lines = (HERE / "xla_nccl_symbols.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_soname_is_libnccl_so_2(our_library):
    assert Path(our_library).name == "libnccl.so.2"
    assert elf_symbols.soname(our_library) == "libnccl.so.2"


def test_header_table_is_read():
    functions = header_functions()
    assert {"ncclGetUniqueId", "ncclCommInitRankConfig", "ncclAllReduce", "ncclGroupEnd"} <= functions
    assert len(functions) == 82
    assert DEVICE_API_HOST_FUNCTIONS <= functions, sorted(DEVICE_API_HOST_FUNCTIONS - functions)


def test_exports_every_function_xla_resolves(our_library):
    exported = elf_symbols.defined_dynamic_symbols(our_library)
    missing = sorted(xla_functions() - exported)
    assert not missing, f"XLA resolves these, the library does not export them: {missing}"


def test_xla_functions_are_all_in_the_header():
    assert sorted(xla_functions() - header_functions()) == []


def test_exports_every_header_function_and_its_profiling_alias(our_library):
    exported = elf_symbols.defined_dynamic_symbols(our_library)
    functions = header_functions()
    assert sorted(functions - exported) == []
    assert sorted({"p" + name for name in functions} - exported) == []


def test_exports_nothing_else(our_library):
    exported = elf_symbols.defined_dynamic_symbols(our_library)
    functions = header_functions()
    expected = functions | {"p" + name for name in functions} | INTROSPECTION
    assert sorted(exported - expected) == []
