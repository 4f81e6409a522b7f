// The block layout of each collective: the one C++ owner (jax_mscclpp/layout.py is Python's; tests/test_codes.py
// compares them). A call moves blocks of n elements ("block_count"), contiguous and row-major; the input and the
// output each hold one block, or one block per rank (world blocks, block r for or from rank r), as codes.def's
// collective rows say:
//   all_reduce:     in[n]        -> out[n]
//   all_gather:     in[n]        -> out[world][n]   (block r from rank r)
//   reduce_scatter: in[world][n] -> out[n]          (block r reduced over ranks goes to rank r)
//   all_to_all:     in[world][n] -> out[world][n]   (out block r = rank r's in block of mine)
// Host and device code alike; collective codes of codes.def.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jax_mscclpp {

constexpr bool is_collective(int32_t code) {
  switch (code) {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, value, ...) case value:
#include "jax_mscclpp/codes.def"
    return true;
    default: return false;
  }
}

// Whether the input (output) of `collective` holds one block per rank; false for an unknown code.
constexpr bool input_per_rank(int32_t collective) {
  switch (collective) {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, name, input_blocks, ...)           \
  case code:                                                                        \
    return input_blocks != 0;
#include "jax_mscclpp/codes.def"
    default: return false;
  }
}

constexpr bool output_per_rank(int32_t collective) {
  switch (collective) {
#define JAX_MSCCLPP_COLLECTIVE(enumerator, code, name, input_blocks, output_blocks, ...) \
  case code:                                                                             \
    return output_blocks != 0;
#include "jax_mscclpp/codes.def"
    default: return false;
  }
}

// Blocks of the input and of the output over `world` ranks.
constexpr size_t input_blocks(int32_t collective, size_t world) { return input_per_rank(collective) ? world : 1; }
constexpr size_t output_blocks(int32_t collective, size_t world) { return output_per_rank(collective) ? world : 1; }

// The block's element count from the input and output element counts; false when they do not fit the layout
// (or `collective` is not a collective code, or world is 0).
constexpr bool block_count_of(int32_t collective, size_t in_elems, size_t out_elems, size_t world, size_t* block) {
  if (world == 0 || !is_collective(collective)) return false;
  const size_t in_blocks = input_blocks(collective, world);
  if (in_elems % in_blocks != 0) return false;
  *block = in_elems / in_blocks;
  return out_elems == *block * output_blocks(collective, world);
}

}  // namespace jax_mscclpp
