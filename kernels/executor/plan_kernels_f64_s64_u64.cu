// The plan kernel for float64, int64, uint64 (each with sum, max and min).
#include "executor/plan_kernel.cuh"

JAX_MSCCLPP_PLAN_KERNELS(double)
JAX_MSCCLPP_PLAN_KERNELS(int64_t)
JAX_MSCCLPP_PLAN_KERNELS(uint64_t)
