// SwitchChannel: reduce / broadcast over a group of buffers, one per rank, at the same offset.
//
// Two backends behind one device API:
//   hardware : `multicast` is an NVLink multicast address (NVLS); multimem.ld_reduce makes the switch
//              reduce the group's values, multimem.st makes it store to every member. sm_90+, and only when
//              the host built the channel with JAX_MSCCLPP_NVLS=1 (never when NCCL_NVLS_ENABLE=0; see
//              the NVLink-multicast safety rule of docs/architecture.md). Offsets must be 16-byte aligned, sizes multiples of 16 bytes, and
//              (dtype, op) one the hardware has: multimem_supported<T, Op>().
//   emulated : `multicast` is null; `members[r]` is rank r's buffer mapped here (peer access / IPC). The
//              same calls read every member and reduce in registers, or store to every member. Any size.
// Neither backend orders anything (relaxed multimem accesses; weak loads and stores in the emulation).
// Callers put the group's barriers (MemoryChannel signal/wait, whose fences and asm memory clobbers also
// keep the compiler from reusing earlier loads) around them, as they would around multimem instructions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "atomics.cuh"
#include "reduce.cuh"

namespace jax_mscclpp {

constexpr int kMaxSwitchMembers = 8;

#if defined(__CUDACC__)

// Whether multimem.ld_reduce has this element type and reduction (vector forms for 16-bit and f32 floats;
// scalar forms for 32/64-bit integers and f64). 8/16-bit integers have none.
template <class T, class Op>
constexpr bool multimem_supported() {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return std::is_same_v<Op, SumOp>;
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) return true;
  if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t> || std::is_same_v<T, int64_t> ||
                std::is_same_v<T, uint64_t>)
    return true;
  return false;
}

namespace detail {

#define JAX_MSCCLPP_MM_V4(OP, TY)                                                        \
  asm volatile("multimem.ld_reduce.relaxed.sys.global." OP "." TY " {%0, %1, %2, %3}, [%4];" \
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)                              \
               : "l"(addr)                                                               \
               : "memory")
#define JAX_MSCCLPP_MM_S32(OP, TY, OUT, ADDR) \
  asm volatile("multimem.ld_reduce.relaxed.sys.global." OP "." TY " %0, [%1];" : "=r"(OUT) : "l"(ADDR) : "memory")
#define JAX_MSCCLPP_MM_S64(OP, TY, OUT, ADDR) \
  asm volatile("multimem.ld_reduce.relaxed.sys.global." OP "." TY " %0, [%1];" : "=l"(OUT) : "l"(ADDR) : "memory")

// 16 bytes reduced by the switch across the group at multicast address `addr`.
template <class T, class Op>
JAX_MSCCLPP_DEVICE_INLINE uint4 multimem_ld_reduce16(const void* addr) {
  uint4 r = make_uint4(0, 0, 0, 0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Op, SumOp>) {
    JAX_MSCCLPP_MM_V4("add", "v4.f32");
  } else if constexpr (std::is_same_v<T, double> && std::is_same_v<Op, SumOp>) {
    const char* a = static_cast<const char*>(addr);
    uint64_t lo, hi;
    JAX_MSCCLPP_MM_S64("add", "f64", lo, a);
    JAX_MSCCLPP_MM_S64("add", "f64", hi, a + 8);
    r = make_uint4(static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32), static_cast<uint32_t>(hi),
                   static_cast<uint32_t>(hi >> 32));
  } else if constexpr (std::is_same_v<T, __half>) {
    if constexpr (std::is_same_v<Op, SumOp>) JAX_MSCCLPP_MM_V4("add", "v4.f16x2");
    else if constexpr (std::is_same_v<Op, MaxOp>) JAX_MSCCLPP_MM_V4("max", "v4.f16x2");
    else JAX_MSCCLPP_MM_V4("min", "v4.f16x2");
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (std::is_same_v<Op, SumOp>) JAX_MSCCLPP_MM_V4("add", "v4.bf16x2");
    else if constexpr (std::is_same_v<Op, MaxOp>) JAX_MSCCLPP_MM_V4("max", "v4.bf16x2");
    else JAX_MSCCLPP_MM_V4("min", "v4.bf16x2");
  } else if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t>) {
    const uint32_t* a = static_cast<const uint32_t*>(addr);
    uint32_t v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, int32_t>) {
        if constexpr (std::is_same_v<Op, SumOp>) JAX_MSCCLPP_MM_S32("add", "s32", v[i], a + i);
        else if constexpr (std::is_same_v<Op, MaxOp>) JAX_MSCCLPP_MM_S32("max", "s32", v[i], a + i);
        else JAX_MSCCLPP_MM_S32("min", "s32", v[i], a + i);
      } else {
        if constexpr (std::is_same_v<Op, SumOp>) JAX_MSCCLPP_MM_S32("add", "u32", v[i], a + i);
        else if constexpr (std::is_same_v<Op, MaxOp>) JAX_MSCCLPP_MM_S32("max", "u32", v[i], a + i);
        else JAX_MSCCLPP_MM_S32("min", "u32", v[i], a + i);
      }
    }
    r = make_uint4(v[0], v[1], v[2], v[3]);
  } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>) {
    const uint64_t* a = static_cast<const uint64_t*>(addr);
    uint64_t v[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (std::is_same_v<T, int64_t>) {
        if constexpr (std::is_same_v<Op, SumOp>) JAX_MSCCLPP_MM_S64("add", "u64", v[i], a + i);  // wraps alike
        else if constexpr (std::is_same_v<Op, MaxOp>) JAX_MSCCLPP_MM_S64("max", "s64", v[i], a + i);
        else JAX_MSCCLPP_MM_S64("min", "s64", v[i], a + i);
      } else {
        if constexpr (std::is_same_v<Op, SumOp>) JAX_MSCCLPP_MM_S64("add", "u64", v[i], a + i);
        else if constexpr (std::is_same_v<Op, MaxOp>) JAX_MSCCLPP_MM_S64("max", "u64", v[i], a + i);
        else JAX_MSCCLPP_MM_S64("min", "u64", v[i], a + i);
      }
    }
    r = make_uint4(static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[0] >> 32), static_cast<uint32_t>(v[1]),
                   static_cast<uint32_t>(v[1] >> 32));
  } else {
    __trap();  // no multimem form: the host never builds a hardware channel for this (dtype, op)
  }
#else
  (void)addr;
  __trap();  // multimem needs sm_90
#endif
  return r;
}

#undef JAX_MSCCLPP_MM_V4
#undef JAX_MSCCLPP_MM_S32
#undef JAX_MSCCLPP_MM_S64

JAX_MSCCLPP_DEVICE_INLINE void multimem_st16(void* addr, const uint4& v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
#else
  (void)addr;
  (void)v;
  __trap();
#endif
}

}  // namespace detail

#endif  // __CUDACC__

struct SwitchChannelDeviceHandle {
  char* multicast;       // hardware backend; null selects the emulation
  char* const* members;  // emulation: device array of nranks member buffers, in rank order
  char* local;           // this rank's own buffer (unicast)
  int32_t nranks;
  int32_t rank;

#if defined(__CUDACC__)
  // The group's 16 bytes at `off`, reduced element-wise.
  template <class T, class Op>
  JAX_MSCCLPP_DEVICE_INLINE uint4 reduce16(uint64_t off) const {
    if (multicast != nullptr) return detail::multimem_ld_reduce16<T, Op>(multicast + off);
    uint4 v[kMaxSwitchMembers];
#pragma unroll
    for (int r = 0; r < kMaxSwitchMembers; ++r) {
      if (r < nranks) v[r] = *reinterpret_cast<const uint4*>(members[r] + off);
    }
    VecAccumulator<T, Op> acc;
    acc.init(v[0]);
#pragma unroll
    for (int r = 1; r < kMaxSwitchMembers; ++r) {
      if (r < nranks) acc.add(v[r]);
    }
    return acc.result();
  }

  // Stores 16 bytes at `off` in every member's buffer.
  JAX_MSCCLPP_DEVICE_INLINE void broadcast16(uint64_t off, const uint4& value) const {
    if (multicast != nullptr) {
      detail::multimem_st16(multicast + off, value);
      return;
    }
#pragma unroll
    for (int r = 0; r < kMaxSwitchMembers; ++r) {
      if (r < nranks) *reinterpret_cast<uint4*>(members[r] + off) = value;
    }
  }

  // dst[i] = reduction over members of buffer[off + i*sizeof(T)], i < count; threads [tid, nthreads).
  template <class T, class Op>
  JAX_MSCCLPP_DEVICE_INLINE void reduce(T* dst, uint64_t off, uint64_t count, uint32_t tid, uint32_t nthreads) const {
    constexpr uint64_t L = 16 / sizeof(T);
    const bool vec = ((off | reinterpret_cast<uintptr_t>(dst)) & 15) == 0;
    const uint64_t nvec = vec ? count / L : 0;
    for (uint64_t i = tid; i < nvec; i += nthreads) reinterpret_cast<uint4*>(dst)[i] = reduce16<T, Op>(off + 16 * i);
    for (uint64_t i = nvec * L + tid; i < count; i += nthreads) dst[i] = reduce_one<T, Op>(off + i * sizeof(T));
  }

  // Every member's buffer[off + i*sizeof(T)] = src[i], i < count.
  template <class T>
  JAX_MSCCLPP_DEVICE_INLINE void broadcast(uint64_t off, const T* src, uint64_t count, uint32_t tid,
                                           uint32_t nthreads) const {
    constexpr uint64_t L = 16 / sizeof(T);
    const bool vec = ((off | reinterpret_cast<uintptr_t>(src)) & 15) == 0;
    const uint64_t nvec = vec ? count / L : 0;
    for (uint64_t i = tid; i < nvec; i += nthreads) broadcast16(off + 16 * i, reinterpret_cast<const uint4*>(src)[i]);
    for (uint64_t i = nvec * L + tid; i < count; i += nthreads) broadcast_one<T>(off + i * sizeof(T), src[i]);
  }

  // In-place all-reduce of one chunk: every member's buffer[off, +count) becomes the group's reduction.
  // No staging copy: each 16-byte vector is reduced and stored back to all members by the same thread.
  template <class T, class Op>
  JAX_MSCCLPP_DEVICE_INLINE void reduce_broadcast(uint64_t off, uint64_t count, uint32_t tid,
                                                  uint32_t nthreads) const {
    constexpr uint64_t L = 16 / sizeof(T);
    const bool vec = (off & 15) == 0;
    const uint64_t nvec = vec ? count / L : 0;
    for (uint64_t i = tid; i < nvec; i += nthreads) broadcast16(off + 16 * i, reduce16<T, Op>(off + 16 * i));
    for (uint64_t i = nvec * L + tid; i < count; i += nthreads) {
      const uint64_t o = off + i * sizeof(T);
      broadcast_one<T>(o, reduce_one<T, Op>(o));
    }
  }

 private:
  // Scalar element (emulation only: the host keeps hardware channels to 16-byte multiples).
  template <class T, class Op>
  JAX_MSCCLPP_DEVICE_INLINE T reduce_one(uint64_t off) const {
    if (multicast != nullptr) __trap();
    T r = *reinterpret_cast<const T*>(members[0] + off);
    for (int m = 1; m < nranks; ++m) r = reduce_scalar<T, Op>(r, *reinterpret_cast<const T*>(members[m] + off));
    return r;
  }
  template <class T>
  JAX_MSCCLPP_DEVICE_INLINE void broadcast_one(uint64_t off, T value) const {
    if (multicast != nullptr) __trap();
    for (int m = 0; m < nranks; ++m) *reinterpret_cast<T*>(members[m] + off) = value;
  }
#endif
};

}  // namespace jax_mscclpp
