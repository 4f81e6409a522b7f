// DRAM bytes read and written on one GPU over windows of time, by every process using it: CUPTI's PM sampling reads
// the device's memory counters at a fixed interval without replaying or serializing kernels, so it counts kernels of
// several processes that wait for each other, which Nsight Compute cannot profile (it runs one kernel at a time).
//
//   dram_sampler DEVICE INTERVAL_NS
//
// Reads commands, one a line, on stdin, and answers each with one line on stdout:
//   start  sampling begins                                   -> {"started": true}
//   stop   sampling ends; every sample of the window decoded -> {"samples": S, "read_bytes": R, "write_bytes": W,
//                                                                "first_ns": T0, "last_ns": T1, "overflow": 0|1}
//   quit   exits                                             -> (nothing)
// A window's bytes are the sum over its completed samples (each counts what happened in its interval, and the
// intervals follow each other): whatever ran on the GPU in the window, from any process, is counted; an interval cut
// short by the stop is not, so the caller leaves the GPU idle for a few intervals before it stops. Errors go to
// stderr with CUPTI's message, and the exit status is 1. Built by bench/kernels/traffic_between_processes.py.
#include <cuda.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

const char* kMetrics[] = {"dram__bytes_read.sum", "dram__bytes_write.sum"};
constexpr size_t kNumMetrics = sizeof(kMetrics) / sizeof(kMetrics[0]);
constexpr uint32_t kMaxSamples = 100000;
constexpr size_t kHardwareBufferBytes = 512ull << 20;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* message = "";
  cuptiGetResultString(r, &message);
  std::fprintf(stderr, "dram_sampler: %s failed: %s (%d)\n", what, message, static_cast<int>(r));
  std::exit(1);
}

template <class Params>
Params params(size_t size) {
  Params p;
  std::memset(&p, 0, sizeof(p));
  p.structSize = size;
  return p;
}
#define PARAMS(T) params<T>(T##_STRUCT_SIZE)

class Sampler {
 public:
  Sampler(int device, uint64_t interval_ns) : device_(device) {
    auto init = PARAMS(CUpti_Profiler_Initialize_Params);
    check(cuptiProfilerInitialize(&init), "cuptiProfilerInitialize");

    auto chip = PARAMS(CUpti_Device_GetChipName_Params);
    chip.deviceIndex = static_cast<size_t>(device);
    check(cuptiDeviceGetChipName(&chip), "cuptiDeviceGetChipName");

    auto avail = PARAMS(CUpti_PmSampling_GetCounterAvailability_Params);
    avail.deviceIndex = static_cast<size_t>(device);
    check(cuptiPmSamplingGetCounterAvailability(&avail), "cuptiPmSamplingGetCounterAvailability (size)");
    availability_.resize(avail.counterAvailabilityImageSize);
    avail.pCounterAvailabilityImage = availability_.data();
    check(cuptiPmSamplingGetCounterAvailability(&avail), "cuptiPmSamplingGetCounterAvailability");

    auto host = PARAMS(CUpti_Profiler_Host_Initialize_Params);
    host.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
    host.pChipName = chip.pChipName;
    host.pCounterAvailabilityImage = availability_.data();
    check(cuptiProfilerHostInitialize(&host), "cuptiProfilerHostInitialize");
    host_ = host.pHostObject;

    auto add = PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
    add.pHostObject = host_;
    add.ppMetricNames = kMetrics;
    add.numMetrics = kNumMetrics;
    check(cuptiProfilerHostConfigAddMetrics(&add), "cuptiProfilerHostConfigAddMetrics");

    auto size = PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
    size.pHostObject = host_;
    check(cuptiProfilerHostGetConfigImageSize(&size), "cuptiProfilerHostGetConfigImageSize");
    config_.resize(size.configImageSize);
    auto image = PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
    image.pHostObject = host_;
    image.pConfigImage = config_.data();
    image.configImageSize = config_.size();
    check(cuptiProfilerHostGetConfigImage(&image), "cuptiProfilerHostGetConfigImage");

    auto passes = PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
    passes.pConfigImage = config_.data();
    passes.configImageSize = config_.size();
    check(cuptiProfilerHostGetNumOfPasses(&passes), "cuptiProfilerHostGetNumOfPasses");
    if (passes.numOfPasses != 1) {
      std::fprintf(stderr, "dram_sampler: the DRAM metrics need %zu passes, PM sampling takes one\n",
                   passes.numOfPasses);
      std::exit(1);
    }

    auto enable = PARAMS(CUpti_PmSampling_Enable_Params);
    enable.deviceIndex = static_cast<size_t>(device);
    check(cuptiPmSamplingEnable(&enable), "cuptiPmSamplingEnable");
    sampling_ = enable.pPmSamplingObject;

    auto set = PARAMS(CUpti_PmSampling_SetConfig_Params);
    set.pPmSamplingObject = sampling_;
    set.configSize = config_.size();
    set.pConfig = config_.data();
    set.hardwareBufferSize = kHardwareBufferBytes;
    set.samplingInterval = interval_ns;
    set.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
    set.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
    check(cuptiPmSamplingSetConfig(&set), "cuptiPmSamplingSetConfig");

    auto data_size = PARAMS(CUpti_PmSampling_GetCounterDataSize_Params);
    data_size.pPmSamplingObject = sampling_;
    data_size.pMetricNames = kMetrics;
    data_size.numMetrics = kNumMetrics;
    data_size.maxSamples = kMaxSamples;
    check(cuptiPmSamplingGetCounterDataSize(&data_size), "cuptiPmSamplingGetCounterDataSize");
    counter_data_.resize(data_size.counterDataSize);
  }

  void start() {
    auto init = PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params);
    init.pPmSamplingObject = sampling_;
    init.counterDataSize = counter_data_.size();
    init.pCounterData = counter_data_.data();
    check(cuptiPmSamplingCounterDataImageInitialize(&init), "cuptiPmSamplingCounterDataImageInitialize");
    auto p = PARAMS(CUpti_PmSampling_Start_Params);
    p.pPmSamplingObject = sampling_;
    check(cuptiPmSamplingStart(&p), "cuptiPmSamplingStart");
  }

  // Stops, decodes the window's samples and prints their sums.
  void stop() {
    auto p = PARAMS(CUpti_PmSampling_Stop_Params);
    p.pPmSamplingObject = sampling_;
    check(cuptiPmSamplingStop(&p), "cuptiPmSamplingStop");
    bool overflow = false;
    for (;;) {
      auto decode = PARAMS(CUpti_PmSampling_DecodeData_Params);
      decode.pPmSamplingObject = sampling_;
      decode.pCounterDataImage = counter_data_.data();
      decode.counterDataImageSize = counter_data_.size();
      check(cuptiPmSamplingDecodeData(&decode), "cuptiPmSamplingDecodeData");
      overflow |= decode.overflow != 0;
      if (decode.decodeStopReason != CUPTI_PM_SAMPLING_DECODE_STOP_REASON_OTHER) {
        if (decode.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL) overflow = true;
        break;
      }
    }
    auto info = PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params);
    info.pCounterDataImage = counter_data_.data();
    info.counterDataImageSize = counter_data_.size();
    check(cuptiPmSamplingGetCounterDataInfo(&info), "cuptiPmSamplingGetCounterDataInfo");
    double sums[kNumMetrics] = {};
    uint64_t first_ns = 0, last_ns = 0;
    for (size_t i = 0; i < info.numCompletedSamples; ++i) {
      auto sample = PARAMS(CUpti_PmSampling_CounterData_GetSampleInfo_Params);
      sample.pPmSamplingObject = sampling_;
      sample.pCounterDataImage = counter_data_.data();
      sample.counterDataImageSize = counter_data_.size();
      sample.sampleIndex = i;
      check(cuptiPmSamplingCounterDataGetSampleInfo(&sample), "cuptiPmSamplingCounterDataGetSampleInfo");
      if (i == 0) first_ns = sample.startTimestamp;
      last_ns = sample.endTimestamp;
      double values[kNumMetrics] = {};
      auto eval = PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
      eval.pHostObject = host_;
      eval.pCounterDataImage = counter_data_.data();
      eval.counterDataImageSize = counter_data_.size();
      eval.rangeIndex = i;
      eval.ppMetricNames = kMetrics;
      eval.numMetrics = kNumMetrics;
      eval.pMetricValues = values;
      check(cuptiProfilerHostEvaluateToGpuValues(&eval), "cuptiProfilerHostEvaluateToGpuValues");
      for (size_t m = 0; m < kNumMetrics; ++m) sums[m] += values[m];
    }
    std::printf("{\"samples\": %zu, \"read_bytes\": %.0f, \"write_bytes\": %.0f, \"first_ns\": %llu, "
                "\"last_ns\": %llu, \"overflow\": %d}\n",
                info.numCompletedSamples, sums[0], sums[1], static_cast<unsigned long long>(first_ns),
                static_cast<unsigned long long>(last_ns), overflow ? 1 : 0);
    std::fflush(stdout);
  }

  ~Sampler() {
    auto disable = PARAMS(CUpti_PmSampling_Disable_Params);
    disable.pPmSamplingObject = sampling_;
    cuptiPmSamplingDisable(&disable);
    auto deinit = PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
    deinit.pHostObject = host_;
    cuptiProfilerHostDeinitialize(&deinit);
  }

 private:
  int device_;
  std::vector<uint8_t> availability_;
  std::vector<uint8_t> config_;
  std::vector<uint8_t> counter_data_;
  CUpti_Profiler_Host_Object* host_ = nullptr;
  CUpti_PmSampling_Object* sampling_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: dram_sampler DEVICE INTERVAL_NS\n");
    return 2;
  }
  if (cuInit(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "dram_sampler: cuInit failed\n");
    return 1;
  }
  Sampler sampler(std::atoi(argv[1]), std::strtoull(argv[2], nullptr, 10));
  std::string command;
  while (std::getline(std::cin, command)) {
    if (command == "start") {
      sampler.start();
      std::printf("{\"started\": true}\n");
      std::fflush(stdout);
    } else if (command == "stop") {
      sampler.stop();
    } else if (command == "quit") {
      break;
    } else {
      std::fprintf(stderr, "dram_sampler: unknown command '%s'\n", command.c_str());
      return 1;
    }
  }
  return 0;
}
