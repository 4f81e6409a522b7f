#!/usr/bin/env bash
# The device measurements, one recipe each: bench/device/recipes.sh RECIPE... (outputs under $OUT, else /tmp/out).
# Run from anywhere on a GPU machine; `build` first on a fresh one. Every environment built here keeps NVLink
# multicast off (NCCL_NVLS_ENABLE=0, JAX_MSCCLPP_NVLS unset). `recipes.sh list` prints the recipes.
#
#   build            the package and the GPU tests' harness, for the visible GPUs (about 100 s on an H200, 180 s on
#                    an H100)
#   prebuilt         instead of build: the package and the harness built beforehand on another machine for this tree
#                    (`python3.12 bench/device/prebuilt.py make`, carry .devcache), installed in seconds; where
#                    they were built from other native sources, build
#   gpu_suite        the GPU tests, every part (bench/device/gpu_suite.py; a part fits ten minutes)
#   bench_auto       every collective, 1 KiB to 1 GiB, the runtime's choice against lax (cmdbuf mode)
#   bench_all        the same for every algorithm
#   model            a psum between matmuls, 64 blocks (jax_mscclpp.tools.bench.model), profiled
#   decode           the Llama-8B-shaped decode example, ours and lax, profiled
#   train            the data-parallel training example, 128 MiB and 1 GiB of gradients, profiled
#   soak             10,000 random calls against lax: one process on every GPU, then one process per GPU
#   soak_shared      the soak with 2 and 4 processes sharing GPU 0, checked against CPU devices
#   churn            communicators made, used and destroyed, with port channels and without
#   faults           a killed peer, a stalled peer and mismatched calls between two processes
#   stop_mode        what kernels that stop instead of trapping cost a model (decode and train against lax, with
#                    JAX_MSCCLPP_TRAP_ON_FAILURE=0: compare their ratios with decode and train), and the faults then
#   copy_engine      the copy engines' peer-to-peer rate (bench/device/copy_engine_rate.py)
#   nccl_clients     NCCL's real clients through our libnccl.so.2 in 2, 3 and 4 processes sharing GPU 0: nccl-tests
#                    (MPI), torch.distributed, JAX's multi-process tests (bench/device/nccl_clients.py; carry
#                    .devcache and .whl; everything at 2 processes, a core subset at 3 and 4; about 6 minutes)
#   kernel_record    the one-GPU speed record of every kernel (bench/kernels/kernel_record.py): every algorithm of
#                    every collective, 1 KiB to 256 MiB (x4), on 2, 4 and 8 virtual ranks and 2 and 4 processes
#                    sharing GPU 0, each beside a device-to-device copy of the same bytes; one JSON in $OUT, printed
#                    against the newest record of this GPU under bench/results, kernels over 10 % slower flagged.
#                    Made to follow build in one call (`COMMIT=<sha> recipes.sh build kernel_record`: COMMIT names
#                    the tree, which has no .git there): its budget is what ten minutes leave after the recipes
#                    before it (KERNEL_RECORD_BUDGET=S sets it); what does not fit is skipped, with a note
#   ragged_record    launch_ragged_all_to_all on 2, 4 and 8 virtual ranks at 64 KiB, 16 MiB and 256 MiB a rank,
#                    against the all_to_all of the composition and a device copy, with the DRAM bytes of one call
#                    of each under ncu (bench/kernels/ragged_record.py; COMMIT names the tree)
#   nccl_traffic     the NCCL library's all-reduce, all-gather and reduce-scatter on 2, 4 and 8 ranks of one process
#                    at 64 KiB, 16 MiB and 256 MiB, in windows (in place) and not, and the JAX path's kernel, with
#                    the DRAM bytes of one call under ncu (bench/kernels/nccl_traffic_record.py; COMMIT names the tree)
#   traffic_processes  the DRAM bytes of a call between 2 and 4 processes sharing GPU 0 (the JAX path's and XLA's
#                    through our library, in place and through scratch) under CUPTI's PM sampling
#                    (bench/kernels/traffic_between_processes.py; COMMIT names the tree)
#   host_time        host time of one call, entry to launch: the JAX path's call entry on 2, 4 and 8 virtual ranks,
#                    an NCCL call of ours on 1, 2 and 4 ranks of one process and of NVIDIA's on one rank
#                    (bench/kernels/host_time.py; COMMIT names the tree)
#   front_ends       the two-phase all-pairs all-reduce in our DSL, MSCCLang, MSCCL++'s DSL, their MSCCL-IR and JSON
#                    loaded back, and the hand-written kernel, on 2, 4 and 8 virtual ranks (bench/kernels/front_ends.py)
#   plan_fixed_cost  our DSL's two-phase all-reduces against the hand-written kernels at small sizes, and the same plans
#                    on 256 threads, without operations and with their first only (bench/kernels/plan_fixed_cost.py)
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
unset JAX_MSCCLPP_NVLS
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")

build() {
  # No package index here: no build isolation, so the machine's jaxlib's FFI headers where no build staged older ones
  python3 -m pip install -q --no-build-isolation --no-deps -e . -C cmake.define.JAX_MSCCLPP_TESTING=ON \
    -C cmake.define.JAX_MSCCLPP_NEWER_FFI_HEADERS=ON 2>&1 | tail -3
  installed
}
prebuilt() { if python3 bench/device/prebuilt.py install; then installed; else build; fi; }
installed() {
  python3 -c "import jax, jax_mscclpp as jm; print(jax.__version__, jax.devices(), jm.info()['cuda_built'])"
}
gpu_suite() { python3 bench/device/gpu_suite.py ${COMMIT:+--commit "$COMMIT"} kernels processes large_world nccl --out "$OUT"; }
bench_auto() {
  python3 -m jax_mscclpp.tools.bench --ops all_reduce,all_gather,reduce_scatter,all_to_all --sizes 1K:1G:4 \
    --dtype bfloat16 --algorithm auto --mode cmdbuf --no-progress --quiet --out "$OUT" --name bench-auto
}
bench_all() {
  python3 -m jax_mscclpp.tools.bench --ops all_reduce,all_gather,reduce_scatter,all_to_all --sizes 1K:1G:4 \
    --dtype bfloat16 --algorithm all --mode cmdbuf --no-progress --quiet --out "$OUT" --name bench-all
}
model() { python3 -m jax_mscclpp.tools.bench.model --rows 8 --layers 64 --iters 10 --profile "$OUT/prof" --out "$OUT"; }
decode() {
  python3 examples/transformer_decode.py --preset 8b --layers 4 --batch 1,8,64 --steps 32 --profile "$OUT/prof" \
    --profile-steps 8 --profile-batches 8 --out "$OUT/decode.json"
}
train() {
  python3 examples/data_parallel_train.py --config 128MiB,1GiB --steps 10 --profile "$OUT/prof" --profile-steps 3 \
    --out "$OUT/train.json"
}
soak() {
  python3 -m jax_mscclpp.tools.soak --calls 10000 --programs 100 --duration 400 --quiet --out "$OUT/soak.json"
  [ "$gpus" -ge 2 ] && python3 -m jax_mscclpp.tools.soak --calls 10000 --programs 100 --duration 400 --launch "$gpus" \
    --quiet --out "$OUT/soak-launch.json"
}
soak_shared() {
  python3 -m jax_mscclpp.tools.soak --launch 2 --reference cpu --calls 10000 --programs 120 --duration 470 --quiet \
    --out "$OUT/soak-shared-2proc.json"
  python3 -m jax_mscclpp.tools.soak --launch 4 --reference cpu --calls 1000 --programs 80 --max-bytes 16M --duration 420 \
    --quiet --out "$OUT/soak-shared-4proc.json"
}
churn() { python3 -m jax_mscclpp.tools.soak.churn --cycles 500 --port-channels both --out "$OUT/churn.json"; }
faults() {
  XLA_FLAGS=--xla_gpu_shard_autotuning=false python3 -m jax_mscclpp.tools.soak.faults --launch 2 --timeout 5 \
    --heartbeat 15 --out "$OUT/faults-2proc.json"
}
copy_engine() { python3 bench/device/copy_engine_rate.py --out "$OUT/copy-engine.json"; }
stop_mode() {
  JAX_MSCCLPP_TRAP_ON_FAILURE=0 python3 examples/transformer_decode.py --preset 8b --layers 4 --batch 1,8,64 \
    --steps 32 --out "$OUT/decode-stop-mode.json"
  JAX_MSCCLPP_TRAP_ON_FAILURE=0 python3 examples/data_parallel_train.py --config 128MiB,1GiB --steps 10 \
    --out "$OUT/train-stop-mode.json"
  JAX_MSCCLPP_TRAP_ON_FAILURE=0 XLA_FLAGS=--xla_gpu_shard_autotuning=false python3 -m jax_mscclpp.tools.soak.faults \
    --launch 2 --timeout 10 --heartbeat 15 --out "$OUT/faults-2proc-stop-mode.json"
}
nccl_clients() {
  local started=$SECONDS
  python3 bench/device/nccl_clients.py --clients nccl_tests,torch,jax --processes 2,3,4 --full-at 2 --budget 330 \
    --jax-jobs 2 --nccl-tests-jobs 2 --out "$OUT"
  echo "nccl_clients: $((SECONDS - started)) s"
}
kernel_record() {
  # Ten minutes a call: this recipe ends by 560 s after the first recipe of this run started (the build's ~130 s
  # before it), the rest kept for stopping.
  local budget=${KERNEL_RECORD_BUDGET:-$((560 - SECONDS))}
  [ "$budget" -lt 60 ] && budget=60
  python3 bench/kernels/kernel_record.py --budget "$budget" ${COMMIT:+--commit "$COMMIT"} --out "$OUT"
}

ragged_record() { python3 bench/kernels/ragged_record.py --ncu ${COMMIT:+--commit "$COMMIT"} --out "$OUT"; }
front_ends() { COMMIT=${COMMIT:-} python3 bench/kernels/front_ends.py --out "$OUT/front-ends.json"; }
plan_fixed_cost() { COMMIT=${COMMIT:-} python3 bench/kernels/plan_fixed_cost.py --out "$OUT/plan-fixed-cost.json"; }
host_time() { python3 bench/kernels/host_time.py ${COMMIT:+--commit "$COMMIT"} --out "$OUT"; }
nccl_traffic() { python3 bench/kernels/nccl_traffic_record.py --ncu ${COMMIT:+--commit "$COMMIT"} --out "$OUT"; }
traffic_processes() { python3 bench/kernels/traffic_between_processes.py ${COMMIT:+--commit "$COMMIT"} --out "$OUT"; }

RECIPES="build prebuilt gpu_suite bench_auto bench_all model decode train soak soak_shared churn faults stop_mode"
RECIPES+=" copy_engine nccl_clients kernel_record ragged_record nccl_traffic traffic_processes host_time front_ends"
RECIPES+=" plan_fixed_cost"
[ $# -eq 0 ] && set -- list
for recipe in "$@"; do
  if [ "$recipe" = list ]; then
    sed -n '/^#   /s/^#   //p' "$0"
  elif [[ " $RECIPES " == *" $recipe "* ]]; then
    echo "== $(date +%T) $recipe"
    "$recipe"
  else
    echo "unknown recipe '$recipe'; recipes: $RECIPES" >&2
    exit 2
  fi
done
