// The device variant's CUDA calls (kill ... -d cuda): a rank's all-reduce buffers in device
// memory of GPU 0 (the ranks, as processes, share it) and the non-blocking stream its calls are
// enqueued on. The only part of the harness that sees CUDA: without it (a build without CUDA)
// deviceUnavailable() says so and nothing else is reached.
#pragma once

#include <string>
#include <vector>

namespace squeeze::fault {

// Why the device variant cannot run here ("" when it can): a build without CUDA, or no GPU.
std::string deviceUnavailable();

// Two kCount-float buffers in device memory and a stream; every call returns "" or what failed.
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  // Frees the buffers and the stream: after the communicator is destroyed.
  ~DeviceBuffers();

  // cudaSetDevice(0) (so a communicator created next runs there), the buffers, the stream.
  std::string setUp();
  // Enqueues on the stream the upload of `in` to send and the poisoning (NaN) of recv.
  std::string upload(const std::vector<float>& in);
  // Waits for the stream: returns only once Squeeze has released it, failed call or not.
  std::string sync();
  // Copies recv into `out` (after sync()).
  std::string download(std::vector<float>& out);

  void* send = nullptr;
  void* recv = nullptr;
  void* stream = nullptr;  // a cudaStream_t
};

}  // namespace squeeze::fault
