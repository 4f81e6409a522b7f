"""NCCL's structures as the ctypes workers of the tests pass them to a libnccl.so.2 (ncclUniqueId, ncclConfig_t)."""

import ctypes


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class Config(ctypes.Structure):
    """ncclConfig_t of NCCL 2.30 (the members the tests set, then the rest as ints/pointers in order)."""

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int), ("minCTAs", ctypes.c_int),
                ("maxCTAs", ctypes.c_int), ("netName", ctypes.c_char_p), ("splitShare", ctypes.c_int),
                ("trafficClass", ctypes.c_int), ("commName", ctypes.c_char_p)] + [
                   (name, ctypes.c_int) for name in ("collnetEnable", "CTAPolicy", "shrinkShare", "nvlsCTAs",
                                                     "nChannelsPerNetPeer", "nvlinkCentricSched", "graphUsageMode",
                                                     "numRmaCtx", "maxP2pPeers", "graphStreamOrdering")]
