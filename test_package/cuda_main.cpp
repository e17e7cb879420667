// Consumes the installed oip::cuda component: asks where models would run with --device auto and
// checks that a bad choice is refused. Runs with or without a GPU.
#include <oip/cuda/device.hpp>
#include <oip/cuda/memory_pool.hpp>

#include <iostream>

int main() {
  const oip::result<oip::cuda::device_selection> where = oip::cuda::select_device("auto");
  if (!where) {
    std::cerr << where.error().message() << "\n";
    return 1;
  }
  if (oip::cuda::select_device("tpu").ok()) {
    std::cerr << "select_device accepted 'tpu'\n";
    return 1;
  }
  std::cout << "oip::cuda: models would run on " << where->reason
            << " (block of 1000 bytes: " << oip::cuda::memory_pool::block_size(1000) << ")\n";
  return 0;
}
