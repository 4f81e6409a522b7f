"""One of two processes of a jax.distributed job on CPU devices (2 per process, local ordinals 0 and 1): prints, as
one JSON line, what processes_share_gpus says of device sets spanning both processes. JAX gives a device of the
other process no local hardware id, so the answer needs what each process published of its own. CPU devices have
no GPU identity: each process gives its device of ordinal k the identity of GPU k of one host (the frame
runtime/common/gpu_identity.h writes), as processes on the GPUs of one machine would have."""

import json
import os
import struct
import sys


def _text(s: bytes) -> bytes:
    return struct.pack("<I", len(s)) + s


def identity_of_gpu(device) -> bytes:
    """GpuIdentity{host, process, gpu_uuid, gpu_name} as write_gpu_identity frames it: GPU k of host "host"."""
    uuid = f"gpu-uuid-{device.local_hardware_id:07d}".encode()  # 16 bytes, as a CUDA UUID
    return _text(b"host") + struct.pack("<q", os.getpid()) + _text(uuid) + _text(b"a GPU")


def main() -> int:
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    import jax

    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=pid)
    from jax_mscclpp import communicator
    from jax_mscclpp.communicator import processes_share_gpus

    communicator._local_identity = identity_of_gpu

    devices = jax.devices()
    first = [d for d in devices if d.process_index == 0]
    second = [d for d in devices if d.process_index == 1]
    result = {
        "remote_ids": [d.local_hardware_id for d in devices if d.process_index != pid],
        "all": processes_share_gpus(devices),
        "same_ordinal": processes_share_gpus([first[0], second[0]]),
        "other_ordinals": processes_share_gpus([first[0], second[1]]),
        "one_process": processes_share_gpus(first),
    }
    print(json.dumps(result), flush=True)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
