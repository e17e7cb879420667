// How long a small device round trip takes to reach the host, by the way the host learns that it
// finished: the shape of a `simple` request on oip::cuda (two 16-value INT32 inputs up, one add
// kernel, two outputs down, on one non-blocking stream), waited for in each of the ways CUDA
// offers. oip::cuda's executor threads wait with cudaStreamSynchronize because of these figures
// (docs/performance.md, CUDA section). Without a usable device every case reports an error.

#include <condition_variable>
#include <mutex>

#include <benchmark/benchmark.h>

#include <cuda_runtime.h>

namespace {

__global__ void add(const int* a, const int* b, int* sum, int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < n) sum[i] = a[i] + b[i];
}

constexpr int values = 16;
constexpr std::size_t bytes = values * sizeof(int);

// A thread waiting for a host function or stream callback to say the work is done.
struct completion {
  std::mutex mutex;
  std::condition_variable done_signal;
  bool done = false;

  void finish() {
    {
      const std::lock_guard lock{mutex};
      done = true;
    }
    done_signal.notify_one();
  }
  void wait() {
    std::unique_lock lock{mutex};
    done_signal.wait(lock, [this] { return done; });
  }
};

void CUDART_CB on_stream_callback(cudaStream_t /*stream*/, cudaError_t /*status*/, void* waiting) {
  static_cast<completion*>(waiting)->finish();
}
void CUDART_CB on_host_function(void* waiting) { static_cast<completion*>(waiting)->finish(); }

enum class wait_by {
  stream_synchronize,
  event_query,
  blocking_event,
  stream_callback,
  host_function
};

void round_trip(benchmark::State& state, wait_by how) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("no usable CUDA device");
    return;
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  int* host_in = nullptr;
  int* host_out = nullptr;
  cudaMallocHost(&host_in, bytes);
  cudaMallocHost(&host_out, 2 * bytes);
  int* device_a = nullptr;
  int* device_b = nullptr;
  int* device_sum = nullptr;
  cudaMalloc(&device_a, bytes);
  cudaMalloc(&device_b, bytes);
  cudaMalloc(&device_sum, bytes);
  cudaEvent_t spinning = nullptr;
  cudaEvent_t blocking = nullptr;
  cudaEventCreateWithFlags(&spinning, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&blocking, cudaEventDisableTiming | cudaEventBlockingSync);
  for (int i = 0; i < values; ++i) host_in[i] = i;

  for (auto _ : state) {
    cudaMemcpyAsync(device_a, host_in, bytes, cudaMemcpyHostToDevice, stream);
    cudaMemcpyAsync(device_b, host_in, bytes, cudaMemcpyHostToDevice, stream);
    add<<<1, values, 0, stream>>>(device_a, device_b, device_sum, values);
    cudaMemcpyAsync(host_out, device_sum, bytes, cudaMemcpyDeviceToHost, stream);
    cudaMemcpyAsync(host_out + values, device_sum, bytes, cudaMemcpyDeviceToHost, stream);
    completion waiting;
    switch (how) {
      case wait_by::stream_synchronize: cudaStreamSynchronize(stream); break;
      case wait_by::event_query:
        cudaEventRecord(spinning, stream);
        while (cudaEventQuery(spinning) == cudaErrorNotReady) {
        }
        break;
      case wait_by::blocking_event:
        cudaEventRecord(blocking, stream);
        cudaEventSynchronize(blocking);
        break;
      case wait_by::stream_callback:
        cudaStreamAddCallback(stream, &on_stream_callback, &waiting, 0);
        waiting.wait();
        break;
      case wait_by::host_function:
        cudaLaunchHostFunc(stream, &on_host_function, &waiting);
        waiting.wait();
        break;
    }
    benchmark::DoNotOptimize(host_out[values - 1]);
  }
  if (host_out[values - 1] != 2 * (values - 1))
    state.SkipWithError("the device computed a wrong sum");

  cudaEventDestroy(blocking);
  cudaEventDestroy(spinning);
  cudaFree(device_sum);
  cudaFree(device_b);
  cudaFree(device_a);
  cudaFreeHost(host_out);
  cudaFreeHost(host_in);
  cudaStreamDestroy(stream);
}

}  // namespace

BENCHMARK_CAPTURE(round_trip, stream_synchronize, wait_by::stream_synchronize)->UseRealTime();
BENCHMARK_CAPTURE(round_trip, event_query_loop, wait_by::event_query)->UseRealTime();
BENCHMARK_CAPTURE(round_trip, blocking_sync_event, wait_by::blocking_event)->UseRealTime();
BENCHMARK_CAPTURE(round_trip, stream_callback, wait_by::stream_callback)->UseRealTime();
BENCHMARK_CAPTURE(round_trip, host_function, wait_by::host_function)->UseRealTime();

BENCHMARK_MAIN();
