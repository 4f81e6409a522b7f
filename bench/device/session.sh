#!/usr/bin/env bash
# Device session steps (nvidia-h200 / nvidia-h200-x2): bench/device/session.sh STEP... with outputs under $OUT.
# setup: use the module built for this machine's Python if it imports, else build it here (archs 90 only).
# Every environment built here keeps NVLink multicast off.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
unset JAX_MSCCLPP_NVLS
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log() { echo "== $(date +%T) $*"; }

step_setup() {
  nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -5
  if ! python3 -c "import jax_mscclpp as jm; assert jm.info()['cuda_built']" 2>/dev/null; then
    log "building"; rm -f jax_mscclpp/_jax_mscclpp*.so
    pip install -q --no-build-isolation --no-deps -e . -C cmake.define.JAX_MSCCLPP_CUDA_ARCHS=90 2>&1 | tail -3
  fi
  python3 -c "import jax, jax_mscclpp as jm; print(jax.__version__, jax.devices(), jm.info()['cuda_built'])"
}

step_env() { env | grep -E "^(CUDA|NCCL|XLA|JAX)" | sort; }

step_kernels() {  # virtual ranks on GPU 0: every kernel against numpy (a lost signal fails in 15 s, not 300)
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 420 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_collectives.py \
    tests/gpu/test_all_reduce_1pa_ll.py tests/gpu/test_executor.py 2>&1 | tee "$OUT/kernels.log" | tail -15
}

step_jax2() {  # one process, two GPUs: the JAX path against lax
  timeout 400 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_jax_single_process.py 2>&1 \
    | tee "$OUT/jax2.log" | tail -8
}

bench() {  # bench NAME OPS SIZES ALGORITHMS [ENV=VALUE...]: ours and lax, command buffers
  local name=$1 ops=$2 sizes=$3 algos=$4; shift 4
  env "$@" python3 -m jax_mscclpp.bench --ops "$ops" --sizes "$sizes" --dtype bfloat16 --algorithm "$algos" \
    --mode cmdbuf --iters 10 --warmup 3 --no-progress --quiet --out "$OUT" --name "$name" 2>&1 | tail -3
  python3 - "$OUT/$name.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    print(f"{r['op']:<15}{r['size']:>11}  {r['chosen']:<10}{r.get('ours_us') or 0:>9.1f}{r.get('lax_us') or 0:>9.1f}"
          f"{r.get('ours_busbw') or 0:>8.1f}{r.get('lax_busbw') or 0:>8.1f} {r.get('speedup') or 0:>6.2f}x {r['check']}")
PY
}

step_ar() { bench ar all_reduce 1M,4M,16M,64M,256M,1G 1pa_hb,2pa_hb; }
step_mid() {
  bench mid-bb32k all_reduce 1M,4M,16M 1pa_hb JAX_MSCCLPP_STREAM_BLOCK_BYTES=32768
  bench mid-bb64k-c1 all_reduce 1M,4M,16M 1pa_hb JAX_MSCCLPP_STREAM_BLOCK_BYTES=65536 JAX_MSCCLPP_STREAM_SLOTS=4
}
step_others() { bench others all_gather,reduce_scatter,all_to_all 64K,1M,16M,256M,1G allpairs; }

step_kernels_stream() {  # the streaming and fused kernels on virtual ranks, 2..8 and 16 ranks
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 80 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_collectives.py \
    tests/gpu/test_large_world.py -k "matrix and (2-all_reduce or 3-) or fused or supported or large_world" 2>&1 \
    | tee "$OUT/kernels.log" | tail -6
}

official() {  # official NAME OPS SIZES: the runtime's choice against lax (cmdbuf)
  timeout "$4" python3 -m jax_mscclpp.bench --ops "$2" --sizes "$3" --dtype bfloat16 --algorithm auto \
    --mode cmdbuf --iters 8 --warmup 2 --no-progress --quiet --out "$OUT" --name "$1" 2>&1 | tail -3
  python3 - "$OUT/$1.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    print(f"{r['op']:<15}{r['size']:>11}  {r['chosen']:<9}{r.get('ours_us') or 0:>9.1f}{r.get('lax_us') or 0:>9.1f}"
          f"{r.get('ours_busbw') or 0:>7.0f}{r.get('lax_busbw') or 0:>7.0f} {r.get('speedup') or 0:>5.2f}x {r['check']}")
PY
}
step_official() {
  official official-ar all_reduce 1K:1G:4 140
  official official-ag-rs-a2a all_gather,reduce_scatter,all_to_all 1K:1G:16 100
}

step_model() {
  timeout 40 python3 -m jax_mscclpp.bench.model --rows 8 --layers 64 --iters 10 --profile "$OUT/prof" \
    --out "$OUT" 2>&1 | tail -6
}

step_decode() {
  timeout 150 python3 examples/transformer_decode.py --preset 8b --layers 4 --batch 1,8,64 --steps 32 \
    --profile "$OUT/prof" --profile-steps 8 --profile-batches 8 --out "$OUT/decode.json" 2>&1 \
    | grep -v "^ \{4\}" | tail -24
}

step_train() {  # the issue's command: both configs (gradient sums started during the backward pass), profiled
  timeout 240 python3 examples/data_parallel_train.py --config 128MiB,1GiB --steps 10 --profile "$OUT/prof" \
    --profile-steps 3 --out "$OUT/train.json" 2>&1 | grep -v "^ \{4\}  " | tail -16
}

step_train_repeat() {  # the issue's command twice more, unprofiled: how much the ratio moves between runs
  for i in 2 3; do
    timeout 120 python3 examples/data_parallel_train.py --config 128MiB,1GiB --steps 20 --out "$OUT/train-$i.json" \
      2>&1 | grep -E "^(128MiB|1GiB)|PASS|FAIL"
  done
}

step_fused_check() {  # the fused kernel and 16 virtual ranks
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_collectives.py \
    tests/gpu/test_large_world.py -k "fused or large_world" 2>&1 | tee "$OUT/kernels2.log" | tail -4
}
step_official_others() { official official-ag-rs-a2a all_gather,reduce_scatter,all_to_all 1K:1G:16 190; }
step_decode_unfused() {
  timeout 60 python3 examples/transformer_decode.py --preset 8b --layers 4 --batch 8 --steps 24 --no-fused \
    --out "$OUT/decode-unfused.json" 2>&1 | tail -5
}

decode_b8() {  # decode_b8 NAME [XLA_FLAGS]: batch 8, profiled, and the runtime's host events per step
  XLA_FLAGS="${2:-}" timeout 100 python3 examples/transformer_decode.py --preset 8b --layers 4 --batch 8 --steps 24 \
    --profile "$OUT/prof-$1" --profile-steps 8 --out "$OUT/decode-$1.json" 2>&1 | grep -E "^ +8 |mscclpp/lax|profile"
  python3 - "$OUT/decode-$1.json" <<'PY'
import json, sys
p = {x["collectives"]: x for x in json.load(open(sys.argv[1]))["profiles"]}
names = list(dict.fromkeys(h["name"] for v in p.values() for h in v["host_calls"]))
calls = {k: {h["name"]: h for h in v["host_calls"]} for k, v in p.items()}
for n in names[:40]:
    print("  ".join(f"{calls[k].get(n, {}).get('calls_per_step', 0):6.1f} {calls[k].get(n, {}).get('total_us_per_step', 0):7.0f}"
                    for k in ("mscclpp", "lax")), n[:100])
PY
}
step_decode_diag() {
  decode_b8 default
  decode_b8 cmdbuf-all "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN --xla_gpu_graph_min_graph_size=1"
  decode_b8 no-cmdbuf "--xla_gpu_enable_command_buffer="
}

step_flax() {
  PYTHONPATH="$PYTHONPATH:$PWD/.deps/py312" timeout 120 python3 examples/flax_tensor_parallel.py --tp 2 --batch 8 --seq 512 --d-model 4096 --heads 32 \
    --d-ff 14336 --layers 4 --dtype bfloat16 --steps 20 --out "$OUT/flax-tp2.json" 2>&1 | tail -8
}

official_all() {  # official_all NAME TIMEOUT [--launch 2]: issue 12's command, every algorithm
  timeout "$2" python3 -m jax_mscclpp.bench --ops all_reduce,all_gather,reduce_scatter,all_to_all --sizes 1K:1G:4 \
    --dtype bfloat16 --algorithm all --mode cmdbuf --no-progress --quiet --out "$OUT" --name "$1" "${@:3}" 2>&1 | tail -3
  python3 - "$OUT/$1.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    if r.get("algorithm") == "auto":
        print(f"{r['op']:<15}{r['size']:>11}  {r.get('algorithm', ''):<9}{r['chosen']:<9}{r.get('ours_us') or 0:>9.1f}"
              f"{r.get('lax_us') or 0:>9.1f}{r.get('ours_busbw') or 0:>7.0f}{r.get('lax_busbw') or 0:>7.0f} "
              f"{r.get('speedup') or 0:>5.2f}x {r['check']}")
PY
}
step_official_all() { official_all bench-x2-official-all 500 --iters 10 --warmup 3; }
step_official_all_launch2() { official_all bench-x2-official-all-launch2 500 --iters 10 --warmup 3 --launch 2; }
step_copy_engine() { timeout 60 python3 bench/device/copy_engine_rate.py --out "$OUT/copy-engine.json" | tail -12; }

# A/B of JAX_MSCCLPP_COMMAND_BUFFERS (our calls inside XLA's CUDA graphs or outside them), in-model.
ab_cb() {  # ab_cb CB: decode (the issue's command), the model-shaped bench, training 128 MiB, small all_reduce
  export JAX_MSCCLPP_COMMAND_BUFFERS=$1
  timeout 150 python3 examples/transformer_decode.py --preset 8b --layers 4 --batch 1,8,64 --steps 32 \
    --out "$OUT/decode-cb$1.json" 2>&1 | grep -E "^ +[0-9]+ |mscclpp/lax|PASS|FAIL"
  timeout 60 python3 -m jax_mscclpp.bench.model --rows 8 --layers 64 --iters 10 --out "$OUT/model-cb$1" 2>&1 | tail -4
  timeout 90 python3 examples/data_parallel_train.py --config 128MiB --steps 10 --out "$OUT/train-cb$1.json" 2>&1 \
    | tail -3
  official small-cb$1 all_reduce 1K:1M:4 60
  unset JAX_MSCCLPP_COMMAND_BUFFERS
}
step_ab_cb0() { ab_cb 0; }
step_ab_cb1() { ab_cb 1; }

step_verify() {  # after a restructuring: the JAX path on two GPUs, streaming + 16-rank kernels, the executor
  timeout 300 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_jax_single_process.py 2>&1 \
    | tee "$OUT/jax2.log" | tail -4
  step_kernels_stream
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_executor.py \
    tests/gpu/test_all_reduce_1pa_ll.py 2>&1 | tee "$OUT/executor.log" | tail -4
}

step_recheck() {  # the executor on every program (no -x), 2PR on 4 ranks thrice more, the target choice on 2 GPUs
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_executor.py 2>&1 \
    | tee "$OUT/executor.log" | grep -E "passed|failed|FAILED|Mismatched" | tail -12
  for i in 1 2 3; do
    JAX_MSCCLPP_TIMEOUT_S=15 timeout 40 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_executor.py \
      -k "library_program and 2pr" 2>&1 | grep -E "passed|failed|Mismatched|indices" -A1 | tail -4
  done
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_jax_single_process.py -k graphs 2>&1 | tail -3
}

# Pending GPU work (issues 15 and 17): the 2PR plan fix, the rest of tests/gpu, the reliability tools' long forms.
step_executor_2pr() {  # the 2PR plan, ten times (before the barrier fix it failed 2 runs in 5)
  for i in $(seq 10); do
    JAX_MSCCLPP_TIMEOUT_S=15 timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_executor.py \
      -k "2pr and (test_library_program or test_replicated_program or test_repeated_calls)" 2>&1 | tail -1
  done
}
step_gpu_rest() {  # the GPU tests not run since the restructuring
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 500 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cross_process.py \
    tests/gpu/test_timeout.py tests/gpu/test_teardown.py tests/gpu/test_jax_multiprocess.py \
    tests/gpu/test_memory_channel.py tests/gpu/test_port_channel.py tests/gpu/test_switch_channel.py \
    tests/gpu/test_reduce.py 2>&1 | tee "$OUT/gpu-rest.log" | tail -6
}
step_soak_x2() {  # 10,000 random calls against lax on two GPUs, one process (about 27 calls/s: 7,577 in 280 s)
  timeout 450 python3 -m jax_mscclpp.soak --calls 10000 --programs 100 --duration 400 --quiet \
    --out "$OUT/soak-x2.json" > "$OUT/soak-x2.log" 2>&1; tail -4 "$OUT/soak-x2.log"
}
step_soak_launch2() {  # the same, one process per GPU (10,000 calls in 202 s)
  timeout 450 python3 -m jax_mscclpp.soak --calls 10000 --programs 100 --duration 400 --launch 2 --quiet \
    --out "$OUT/soak-x2-launch2.json" > "$OUT/soak-x2-launch2.log" 2>&1; tail -4 "$OUT/soak-x2-launch2.log"
}
step_proxy_stall() {  # the proxy's stall measurement (the timeout message's hint)
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_port_channel.py -k "fifo or proxy" 2>&1 | tail -2
}
shared_gpu_soak() {  # shared_gpu_soak PROCS SECONDS [ARGS...]: PROCS processes sharing GPU 0 of nvidia-h200, checked
  # against lax on CPU devices; every process's output kept (the first attempt, 2026-11-29, ended with process 1
  # unable to reach the coordinator and process 0's output lost)
  local procs=$1 seconds=$2; shift 2
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  timeout $((seconds + 60)) python3 -m jax_mscclpp.soak --launch "$procs" --reference cpu --calls 10000 \
    --duration "$seconds" --quiet --out "$OUT/soak-h200-${procs}proc.json" "$@" > "$OUT/soak-h200-${procs}proc.log" 2>&1
  echo "rc=$?"; grep -v "^\[process" "$OUT/soak-h200-${procs}proc.log" | tail -8; grep -m8 "^\[process" "$OUT/soak-h200-${procs}proc.log"
}
step_soak_shared_gpu2() { shared_gpu_soak 2 470 --programs 120; }
step_soak_shared_gpu4() { shared_gpu_soak 4 470 --programs 80 --max-bytes 16M; }
step_churn() { timeout 280 python3 -m jax_mscclpp.soak.churn --cycles 1000 --port-channels both \
  --out "$OUT/churn-x2.json" 2>&1 | tail -4; }
step_churn_split() {  # where the GPU memory of churn goes: lax alone, ours without and with port channels
  for mode in "--control" "--port-channels off" "--port-channels on"; do
    timeout 120 python3 -m jax_mscclpp.soak.churn --cycles 500 $mode --out "$OUT/churn-x2-${mode##* }.json" 2>&1 \
      | grep -E "^churn" | cut -c1-400
    python3 - "$OUT/churn-x2-${mode##* }.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["results"]["samples"]:
    print(s["cycle"], s["threads"], s["heap_mb"], s.get("gpu_free_mb"))
PY
  done
}
step_faults() { timeout 240 python3 -m jax_mscclpp.soak.faults --launch 2 --timeout 5 --heartbeat 15 \
  --out "$OUT/faults-x2.json" 2>&1 | tail -8; }

step_faults_size_unsharded() {  # the mismatched size again, autotuning not shared between processes: does the
  # smaller call's rank then report? (docs/reliability.md, two H200s, faults)
  XLA_FLAGS="--xla_gpu_shard_autotuning=false" timeout 200 python3 -m jax_mscclpp.soak.faults --launch 2 --timeout 5 \
    --heartbeat 15 --scenarios mismatched_size --out "$OUT/faults-x2-size-unsharded.json" 2>&1 | tail -6
}

step_jax2_default() {  # one process, two GPUs, the full check with default command buffers
  timeout 300 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_jax_single_process.py -k "default-full" 2>&1 \
    | tee "$OUT/jax2.log" | tail -4
}
step_mp4() {  # four processes on two GPUs
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_jax_multiprocess.py \
    -k "4-" 2>&1 | tee "$OUT/mp4.log" | tail -3
}

step_call_check() {  # the GPU call checks: mismatched calls on virtual ranks, then the timeouts, unchanged
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_call_check.py \
    tests/gpu/test_timeout.py tests/gpu/test_collectives.py -k "call_check or timeout or absent" 2>&1 \
    | tee "$OUT/call-check.log" | tail -6
}
step_check_cost() {  # what the call check costs a small all_reduce: the module without it against the one with
  # it, one process on two GPUs, chained in command buffers (a kernel's figure). build/old/module.so.gz: the module
  # built from the commit before the check (49f3a7a), gzipped and carried
  local so=jax_mscclpp/_jax_mscclpp.cpython-312-x86_64-linux-gnu.so
  cp "$so" /tmp/with-check.so; gunzip -c build/old/module.so.gz > /tmp/without-check.so
  for v in without-check with-check; do
    cp "/tmp/$v.so" "$so"
    bench "cost-$v" all_reduce 1K,16K,128K,1M 1pa_ll,2pa_ll,2pa_hb
  done
  cp /tmp/with-check.so "$so"
}
step_executor() {  # the plan executor and the 1PA-LL kernel on virtual ranks
  JAX_MSCCLPP_TIMEOUT_S=15 timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_executor.py \
    tests/gpu/test_all_reduce_1pa_ll.py 2>&1 | tee "$OUT/executor.log" | tail -4
}
step_decode_check() {  # the decode example with the call check: ours and lax in one run, profiled
  timeout 150 python3 examples/transformer_decode.py --preset 8b --layers 4 --batch 1,8 --steps 24 \
    --profile "$OUT/prof" --profile-steps 8 --profile-batches 8 --out "$OUT/decode.json" 2>&1 \
    | grep -v "^ \{4\}" | tail -24
}
step_faults_mismatch() {  # the mismatched calls between two processes (the call check's case)
  timeout 200 python3 -m jax_mscclpp.soak.faults --launch 2 --timeout 5 --heartbeat 15 \
    --scenarios mismatched_op,mismatched_size --out "$OUT/faults-x2-mismatch.json" 2>&1 | tail -8
}

step_pack() { rm -rf "$OUT/prof" "$OUT"/*.csv "$OUT"/*.png; ls "$OUT"; }

for s in "$@"; do log "$s"; "step_$s"; done
