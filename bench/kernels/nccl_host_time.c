/* Host time of one NCCL operation call, entry point to launch: N ranks of one process on GPU 0 (one group of inits,
   a stream per rank), each round issuing CALLS operations of every rank back to back (an operation is one group
   of the N ranks' calls; a single rank calls without a group), timed on the host with no synchronization inside
   the round. Rounds end with every stream synchronized, so a round's launches never fill the launch queue (CALLS * N
   stays under its depth) and what is timed is the host's work per call, not the GPU's.

     nccl_host_time LIBRARY COLLECTIVE NRANKS BYTES CALLS ROUNDS

   COLLECTIVE: all_reduce, all_gather or reduce_scatter (float32 sum; BYTES a rank's larger buffer). Prints one JSON
   object: host microseconds per rank call (median and minimum over the rounds: a round's host time over CALLS * N)
   and device microseconds per operation (a round's host time to the streams' synchronization, over CALLS: the
   launches' time when the GPU, not the host, is slower). Built by host_time.py against CUDA's runtime; NCCL's
   functions are looked up in LIBRARY, which may be jax_mscclpp's libnccl.so.2 or NVIDIA's. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int result_t; /* ncclResult_t */
typedef void* comm_t; /* ncclComm_t */
typedef struct {
  char bytes[128];
} unique_id_t; /* ncclUniqueId */

enum { kFloat32 = 7, kSum = 0, kMaxRanks = 8 };

typedef result_t (*get_unique_id_fn)(unique_id_t*);
typedef result_t (*init_rank_fn)(comm_t*, int, unique_id_t, int);
typedef result_t (*group_fn)(void);
typedef result_t (*all_reduce_fn)(const void*, void*, size_t, int, int, comm_t, cudaStream_t);
typedef result_t (*all_gather_fn)(const void*, void*, size_t, int, comm_t, cudaStream_t);
typedef result_t (*reduce_scatter_fn)(const void*, void*, size_t, int, int, comm_t, cudaStream_t);
typedef result_t (*destroy_fn)(comm_t);
typedef const char* (*last_error_fn)(comm_t);

static void* library;
static last_error_fn last_error;

static void* symbol(const char* name) {
  void* found = dlsym(library, name);
  if (found == NULL) {
    fprintf(stderr, "nccl_host_time: %s not in the library\n", name);
    exit(2);
  }
  return found;
}

static void check(result_t result, const char* what) {
  if (result != 0) {
    fprintf(stderr, "nccl_host_time: %s returned %d: %s\n", what, result, last_error ? last_error(NULL) : "");
    exit(1);
  }
}

static void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    fprintf(stderr, "nccl_host_time: %s: %s\n", what, cudaGetErrorString(error));
    exit(1);
  }
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Destruction waits for every rank (a barrier): each rank's from a thread of its own, as a process per rank would. */
static destroy_fn destroy;
static void* destroy_rank(void* comm) {
  check(destroy((comm_t)comm), "ncclCommDestroy");
  return NULL;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: nccl_host_time LIBRARY COLLECTIVE NRANKS BYTES CALLS ROUNDS\n");
    return 2;
  }
  const char* collective = argv[2];
  const int n = atoi(argv[3]), calls = atoi(argv[5]), rounds = atoi(argv[6]);
  const size_t bytes = strtoull(argv[4], NULL, 10);
  if (n < 1 || n > kMaxRanks || calls < 1 || rounds < 1 || bytes < 4 * (size_t)n) {
    fprintf(stderr, "nccl_host_time: NRANKS 1..%d, CALLS and ROUNDS positive, BYTES at least 4 * NRANKS\n", kMaxRanks);
    return 2;
  }
  const int kind = !strcmp(collective, "all_reduce") ? 0 : !strcmp(collective, "all_gather") ? 1
                   : !strcmp(collective, "reduce_scatter")                                   ? 2
                                                                                             : -1;
  if (kind < 0) {
    fprintf(stderr, "nccl_host_time: unknown collective %s\n", collective);
    return 2;
  }
  library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "nccl_host_time: %s\n", dlerror());
    return 2;
  }
  last_error = (last_error_fn)symbol("ncclGetLastError");
  get_unique_id_fn get_unique_id = (get_unique_id_fn)symbol("ncclGetUniqueId");
  init_rank_fn init_rank = (init_rank_fn)symbol("ncclCommInitRank");
  group_fn group_start = (group_fn)symbol("ncclGroupStart"), group_end = (group_fn)symbol("ncclGroupEnd");
  all_reduce_fn all_reduce = (all_reduce_fn)symbol("ncclAllReduce");
  all_gather_fn all_gather = (all_gather_fn)symbol("ncclAllGather");
  reduce_scatter_fn reduce_scatter = (reduce_scatter_fn)symbol("ncclReduceScatter");
  destroy = (destroy_fn)symbol("ncclCommDestroy");

  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  void *send[kMaxRanks], *recv[kMaxRanks];
  cudaStream_t streams[kMaxRanks];
  comm_t comms[kMaxRanks];
  for (int r = 0; r < n; ++r) {
    check_cuda(cudaMalloc(&send[r], bytes), "cudaMalloc");
    check_cuda(cudaMalloc(&recv[r], bytes), "cudaMalloc");
    check_cuda(cudaMemset(send[r], 0x3f, bytes), "cudaMemset"); /* floats near 0.75, never zero */
    check_cuda(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking), "cudaStreamCreate");
  }
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  unique_id_t id;
  check(get_unique_id(&id), "ncclGetUniqueId");
  check(group_start(), "ncclGroupStart");
  for (int r = 0; r < n; ++r) check(init_rank(&comms[r], n, id, r), "ncclCommInitRank");
  check(group_end(), "ncclGroupEnd");

  /* all-reduce: BYTES in and out; all-gather: BYTES / N in; reduce-scatter: BYTES / N out. */
  const size_t count = kind == 0 ? bytes / 4 : bytes / 4 / n;
  double* host_us = malloc(sizeof(double) * rounds);
  double* device_us = malloc(sizeof(double) * rounds);
  for (int round = -2; round < rounds; ++round) { /* two rounds unmeasured: first calls set things up */
    const double start = now_us();
    for (int i = 0; i < calls; ++i) {
      if (n > 1) check(group_start(), "ncclGroupStart");
      for (int r = 0; r < n; ++r) {
        if (kind == 0) check(all_reduce(send[r], recv[r], count, kFloat32, kSum, comms[r], streams[r]), collective);
        if (kind == 1) check(all_gather(send[r], recv[r], count, kFloat32, comms[r], streams[r]), collective);
        if (kind == 2) check(reduce_scatter(send[r], recv[r], count, kFloat32, kSum, comms[r], streams[r]), collective);
      }
      if (n > 1) check(group_end(), "ncclGroupEnd");
    }
    const double issued = now_us();
    for (int r = 0; r < n; ++r) check_cuda(cudaStreamSynchronize(streams[r]), "cudaStreamSynchronize");
    const double done = now_us();
    if (round >= 0) {
      host_us[round] = (issued - start) / ((double)calls * n);
      device_us[round] = (done - start) / calls;
    }
  }
  double sorted_host[rounds > 0 ? rounds : 1], sorted_device[rounds > 0 ? rounds : 1];
  memcpy(sorted_host, host_us, sizeof(double) * rounds);
  memcpy(sorted_device, device_us, sizeof(double) * rounds);
  qsort(sorted_host, rounds, sizeof(double), by_value);
  qsort(sorted_device, rounds, sizeof(double), by_value);
  printf("{\"collective\": \"%s\", \"ranks\": %d, \"bytes\": %zu, \"calls\": %d, \"rounds\": %d, "
         "\"host_us_per_rank_call\": %.3f, \"host_us_per_rank_call_min\": %.3f, \"us_per_operation\": %.3f}\n",
         collective, n, bytes, calls, rounds, sorted_host[rounds / 2], sorted_host[0], sorted_device[rounds / 2]);
  pthread_t threads[kMaxRanks];
  for (int r = 0; r < n; ++r) pthread_create(&threads[r], NULL, destroy_rank, comms[r]);
  for (int r = 0; r < n; ++r) pthread_join(threads[r], NULL);
  return 0;
}
