// The plan kernel for uint16, int32, uint32 (each with sum, max and min).
#include "executor/plan_kernel.cuh"

JAX_MSCCLPP_PLAN_KERNELS(uint16_t)
JAX_MSCCLPP_PLAN_KERNELS(int32_t)
JAX_MSCCLPP_PLAN_KERNELS(uint32_t)
