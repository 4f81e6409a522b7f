// The plan kernel for int8, uint8, int16 (each with sum, max and min).
#include "executor/plan_kernel.cuh"

JAX_MSCCLPP_PLAN_KERNELS(int8_t)
JAX_MSCCLPP_PLAN_KERNELS(uint8_t)
JAX_MSCCLPP_PLAN_KERNELS(int16_t)
