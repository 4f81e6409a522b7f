"""One of two processes of a jax.distributed job on CPU devices, driven by tests/test_setup_exchange.py: a GPU
communicator's setup steps over JAX's own key-value store (jax_mscclpp/setup_exchange.py, with the communicator's
store calls), twice. In the first generation process 1 fails before publishing its frame; in the second both
succeed. Prints one JSON line: what each generation gave this process."""

import json
import sys
import time


def setup(generation: int, me: int, fail: bool, timeout_s: float):
    from jax_mscclpp import _compat
    from jax_mscclpp.setup_exchange import SetupExchange

    exchange = SetupExchange(f"jax_mscclpp/{generation}/test", "setting up collectives over ('x',)", {0: 0, 1: 1},
                             {0: 0, 1: 1}, me, timeout_s,
                             lambda key, value: _compat.kv_set_bytes(key, value, replace=True), _compat.kv_get_bytes)
    try:
        if fail:
            raise MemoryError("out of memory making the scratch")
        exchange.publish(me, f"frame of rank {me}".encode())
        frames = {str(r): exchange.fetch(r).decode() for r in (0, 1)}
        exchange.ready()
        return frames
    except Exception as error:
        exchange.fail(f"{type(error).__name__}: {error}")
        return f"{type(error).__name__}: {error}"


def main() -> int:
    me, port = int(sys.argv[1]), int(sys.argv[2])
    import jax

    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=me)
    started = time.monotonic()
    first = setup(0, me, fail=me == 1, timeout_s=60)
    first_s = time.monotonic() - started
    second = setup(1, me, fail=False, timeout_s=60)
    print(json.dumps({"first": first, "first_s": first_s, "second": second}), flush=True)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
