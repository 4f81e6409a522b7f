/* A stand-in for NVIDIA's libnccl.so.2 in the tests of jax_mscclpp's libnccl.so.2: a few NCCL functions that
   record what they were called with, so that the tests can see what was forwarded. Compiled by the tests with the
   system C compiler; it defines only the types it needs, with the NCCL ABI. Functions it does not define are
   the tests' "missing in the real library" cases. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int result_t; /* ncclResult_t */

struct stand_in_comm {
  uint64_t tag; /* never jax_mscclpp's magic word */
  int nranks;
  int rank;
  unsigned char id[128];
};

typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
} config_head;

static char calls[8192];
static char last_error_text[256] = "";
static void* last_comm;
static const void* last_config;
static unsigned char last_id[128];
static int next_result;
static int unique_ids_made;

/* Calls can come from several threads at once (the inits of a group, made concurrently at its end). */
static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;

static void record(const char* call) {
  pthread_mutex_lock(&calls_lock);
  if (strlen(calls) + strlen(call) + 2 < sizeof(calls)) {
    strcat(calls, call);
    strcat(calls, ";");
  }
  pthread_mutex_unlock(&calls_lock);
}

const char* stand_in_calls(void) { return calls; }
void* stand_in_last_comm(void) { return last_comm; }
const void* stand_in_last_config(void) { return last_config; }
const unsigned char* stand_in_last_id(void) { return last_id; }
void stand_in_set_next_result(int result) { next_result = result; }

static result_t take_next_result(void) {
  result_t result = next_result;
  next_result = 0;
  if (result != 0) snprintf(last_error_text, sizeof(last_error_text), "stand-in failed with %d", result);
  return result;
}

result_t ncclGetVersion(int* version) {
  record("ncclGetVersion");
  *version = 22809;
  return 0;
}

result_t ncclGetUniqueId(unsigned char* id) {
  record("ncclGetUniqueId");
  ++unique_ids_made;
  for (int i = 0; i < 128; ++i) id[i] = (unsigned char)(i * 7 + unique_ids_made);
  return 0;
}

static result_t make_comm(void** comm, int nranks, const unsigned char* id, int rank) {
  memcpy(last_id, id, 128);
  if (nranks <= 0 || rank < 0 || rank >= nranks) {
    snprintf(last_error_text, sizeof(last_error_text), "stand-in: rank %d of %d is invalid", rank, nranks);
    return 4; /* ncclInvalidArgument */
  }
  struct stand_in_comm* made = calloc(1, sizeof(*made));
  made->tag = 0x4e490000u; /* any value but the magic word */
  made->nranks = nranks;
  made->rank = rank;
  memcpy(made->id, id, 128);
  *comm = made;
  last_comm = made;
  return 0;
}

/* ncclUniqueId is passed by value: 128 bytes, as a struct. */
typedef struct {
  unsigned char bytes[128];
} unique_id;

result_t ncclCommInitRank(void** comm, int nranks, unique_id id, int rank) {
  record("ncclCommInitRank");
  return make_comm(comm, nranks, id.bytes, rank);
}

result_t ncclCommInitRankConfig(void** comm, int nranks, unique_id id, int rank, config_head* config) {
  char line[128];
  snprintf(line, sizeof(line), "ncclCommInitRankConfig(version=%u,blocking=%d,splitShare=%d)", config->version,
           config->blocking, config->splitShare);
  record(line);
  last_config = config;
  return make_comm(comm, nranks, id.bytes, rank);
}

result_t ncclCommSplit(void* comm, int color, int key, void** newcomm, const void* config) {
  struct stand_in_comm* parent = comm;
  record("ncclCommSplit");
  last_comm = comm;
  last_config = config;
  if (color < 0) {
    *newcomm = NULL;
    return 0;
  }
  return make_comm(newcomm, parent->nranks, parent->id, key % parent->nranks);
}

/* Every device of one process, ranks in order; the id is all zeros. */
result_t ncclCommInitAll(void** comms, int ndev, const int* devlist) {
  unsigned char id[128] = {0};
  (void)devlist;
  record("ncclCommInitAll");
  for (int i = 0; i < ndev; ++i) {
    result_t result = make_comm(&comms[i], ndev, id, i);
    if (result != 0) return result;
  }
  return 0;
}

result_t ncclCommAbort(void* comm) {
  record("ncclCommAbort");
  last_comm = comm;
  free(comm);
  return 0;
}

result_t ncclCommCount(void* comm, int* count) {
  record("ncclCommCount");
  last_comm = comm;
  *count = ((struct stand_in_comm*)comm)->nranks;
  return 0;
}

result_t ncclCommUserRank(void* comm, int* rank) {
  record("ncclCommUserRank");
  last_comm = comm;
  *rank = ((struct stand_in_comm*)comm)->rank;
  return 0;
}

result_t ncclCommDestroy(void* comm) {
  record("ncclCommDestroy");
  last_comm = comm;
  result_t result = take_next_result();
  if (result == 0) free(comm);
  return result;
}

result_t ncclCommGetAsyncError(void* comm, result_t* error) {
  record("ncclCommGetAsyncError");
  last_comm = comm;
  *error = 0;
  return 0;
}

result_t ncclAllReduce(const void* send, void* recv, size_t count, int datatype, int op, void* comm, void* stream) {
  char line[128];
  snprintf(line, sizeof(line), "ncclAllReduce(count=%zu,datatype=%d,op=%d)", count, datatype, op);
  record(line);
  last_comm = comm;
  return take_next_result();
}

result_t ncclGroupStart(void) {
  record("ncclGroupStart");
  return take_next_result();
}

result_t ncclGroupEnd(void) {
  record("ncclGroupEnd");
  return take_next_result();
}

const char* ncclGetErrorString(result_t result) {
  static char text[64];
  snprintf(text, sizeof(text), "stand-in error string %d", result);
  return text;
}

const char* ncclGetLastError(void* comm) {
  last_comm = comm;
  return last_error_text;
}

/* Windows: NVIDIA's ncclWindow_t is an address in its device-side window pool, not readable from the host. The
   stand-in's is an address of a page that cannot be read at all (PROT_NONE), so that reading it crashes. */
static void* unreadable_window;
static void* window_buffer;

static void* unreadable_page(void) {
  if (unreadable_window == NULL) {
    void* page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unreadable_window = page == MAP_FAILED ? NULL : page;
  }
  return unreadable_window;
}

static void record_window_call(const char* function, void* comm, void* window) {
  char line[128];
  snprintf(line, sizeof(line), "%s(window=%s)", function, window == unreadable_window ? "stand-in's" : "other");
  record(line);
  last_comm = comm;
}

result_t ncclCommWindowRegister(void* comm, void* buff, size_t size, void** win, int flags) {
  (void)size;
  (void)flags;
  *win = unreadable_page();
  window_buffer = buff;
  record_window_call("ncclCommWindowRegister", comm, *win);
  return *win == NULL ? 2 : 0;
}

result_t ncclWinGetUserPtr(void* comm, void* win, void** user_ptr) {
  record_window_call("ncclWinGetUserPtr", comm, win);
  *user_ptr = win == unreadable_window ? window_buffer : NULL;
  return 0;
}

result_t ncclGetLsaDevicePointer(void* win, size_t offset, int lsa_rank, void** out) {
  record_window_call("ncclGetLsaDevicePointer", NULL, win);
  *out = (char*)window_buffer + offset + (size_t)lsa_rank;
  return 0;
}

result_t ncclCommWindowDeregister(void* comm, void* win) {
  record_window_call("ncclCommWindowDeregister", comm, win);
  return 0;
}

/* Host functions of the device API: the teams of the stand-in's communicator, from what it was given. */
typedef struct {
  int nRanks, rank, stride;
} team_t;

team_t ncclTeamLsa(void* comm) {
  struct stand_in_comm* made = comm;
  team_t team = {made->nranks, made->rank, 3};
  record("ncclTeamLsa");
  last_comm = comm;
  return team;
}

int ncclTeamRankToLsa(void* comm, team_t team, int rank) {
  record("ncclTeamRankToLsa");
  last_comm = comm;
  return 100 * team.nRanks + 10 * team.stride + rank;
}

result_t ncclGetMultimemDevicePointer(void* win, size_t offset, void* multimem_base, void** out) {
  record_window_call("ncclGetMultimemDevicePointer", NULL, win);
  *out = (char*)multimem_base + offset;
  return 0;
}

int ncclLLA2ACalcSlots(int max_elements, int max_element_size) {
  record("ncclLLA2ACalcSlots");
  return max_elements * ((max_element_size + 7) / 8);
}
