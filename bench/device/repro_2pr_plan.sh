#!/usr/bin/env bash
# The soak's first GPU failure (a DSL 2PR plan, chained 5 times, timed out in PortChannel::wait), alone and varied.
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD JAX_MSCCLPP_TIMEOUT_S=5; unset JAX_MSCCLPP_NVLS
base='"op":"all_reduce","dtype":"uint32","mesh_shape":[2],"mesh_axes":["x"],"axes":["x"],"local_shape":[1,1,228],"redop":"max","dim":0,"concat":0,"tiled":false'
run() {  # NAME ALGORITHM CHAIN MESH_SEED [ENV=VALUE...]
  local name=$1 algorithm=$2 chain=$3 seed=$4; shift 4
  set -- "$name" "$algorithm" "$chain" "$seed" "$@"
  env "${@:5}" timeout 60 python3 -m jax_mscclpp.soak --devices 2 --calls 4 --config "{$base,\"algorithm\":\"$2\",\"chain\":$3,\"mesh_seed\":$4}" --data 0:32 > "$OUT/$1.log" 2>&1
  echo "$1 rc=$? $(grep -c 'timed out' $OUT/$1.log) timeouts; $(grep -m1 -o 'calls: [0-9]*\|[0-9]* calls' $OUT/$1.log)"; grep -m2 "timed out" "$OUT/$1.log" | cut -c1-250
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
esac
