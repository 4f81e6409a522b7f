// The plan kernel for float32, bfloat16, float16 (each with sum, max and min).
#include "executor/plan_kernel.cuh"

JAX_MSCCLPP_PLAN_KERNELS(float)
JAX_MSCCLPP_PLAN_KERNELS(__nv_bfloat16)
JAX_MSCCLPP_PLAN_KERNELS(__half)
