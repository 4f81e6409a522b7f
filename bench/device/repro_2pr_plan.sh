#!/usr/bin/env bash
# The soak's first GPU failure (a DSL 2PR plan, chained 5 times, timed out in PortChannel::wait), alone and varied.
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD JAX_MSCCLPP_TIMEOUT_S=5; unset JAX_MSCCLPP_NVLS
base='"op":"all_reduce","dtype":"uint32","mesh_shape":[2],"mesh_axes":["x"],"axes":["x"],"local_shape":[1,1,228],"redop":"max","dim":0,"concat":0,"tiled":false'
run() {  # NAME ALGORITHM CHAIN MESH_SEED [ENV=VALUE | --soak-option ...]
  local name=$1 algorithm=$2 chain=$3 seed=$4 envs=() opts=(); shift 4
  for a in "$@"; do if [[ $a == --* || ${#opts[@]} -gt 0 && $a != *=* ]]; then opts+=("$a"); else envs+=("$a"); fi; done
  env "${envs[@]}" timeout 60 python3 -m jax_mscclpp.soak --devices 2 --calls 4 "${opts[@]}" \
    --config "{$base,\"algorithm\":\"$algorithm\",\"chain\":$chain,\"mesh_seed\":$seed}" --data 0:32 > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(grep -c 'timed out' $OUT/$name.log) timeouts; $(grep -m1 -o 'calls: [0-9]*\|[0-9]* calls' $OUT/$name.log)"; grep -m2 "timed out" "$OUT/$name.log" | cut -c1-250
}
case "${1:-all}" in
  all)
    run plan-chain5 soak_allreduce_2pr 5 27582
    run plan-chain1 soak_allreduce_2pr 1 27582
    run plan-chain5-reversed soak_allreduce_2pr 5 3
    run native-chain5 2pr 5 27582 ;;
  graphs)  # the failing config without XLA's command buffers, and with ours outside / inside them
    run plan-chain5-no-command-buffers soak_allreduce_2pr 5 27582 XLA_FLAGS=--xla_gpu_enable_command_buffer=
    run plan-chain5-ours-outside soak_allreduce_2pr 5 27582 JAX_MSCCLPP_COMMAND_BUFFERS=0
    run plan-chain5-ours-inside soak_allreduce_2pr 5 27582 JAX_MSCCLPP_COMMAND_BUFFERS=1 ;;
  loading)  # the suspect: kernels loaded lazily (at first launch, which may synchronize the context) while a
            # port-channel kernel spins on the proxy; eager loading does all of it before anything runs
    run plan-chain5-eager soak_allreduce_2pr 5 27582 CUDA_MODULE_LOADING=EAGER
    run plan-chain5-lazy soak_allreduce_2pr 5 27582 CUDA_MODULE_LOADING=LAZY ;;
  reference)  # the reference on CPU devices: no GPU program of XLA's runs while ours does
    run plan-chain5-cpu-reference soak_allreduce_2pr 5 27582 --reference cpu ;;
  stacks)  # the host threads' stacks while it hangs (cuda-gdb attaches; there is no gdb)
    JAX_MSCCLPP_TIMEOUT_S=60 timeout 90 python3 -m jax_mscclpp.soak --devices 2 --calls 4 \
      --config "{$base,\"algorithm\":\"soak_allreduce_2pr\",\"chain\":5,\"mesh_seed\":27582}" --data 0:32 \
      > "$OUT/plan-chain5-stacks.log" 2>&1 &
    pid=$!; sleep 35
    timeout 40 cuda-gdb -p "$(pgrep -f -n 'jax_mscclpp.soak')" -batch -ex "info threads" -ex "thread apply all bt 14" \
      > "$OUT/plan-chain5-gdb.log" 2>&1
    echo "gdb rc=$?"; grep -E "^Thread|^#" "$OUT/plan-chain5-gdb.log" | grep -v "pthread_cond\|futex_wait\|epoll\|poll ()" | head -80
    wait $pid; echo "soak rc=$?"; tail -3 "$OUT/plan-chain5-stacks.log" | cut -c1-300 ;;
esac
