// The model split over several GPUs of this host (docs/PARALLEL.md): one CudaBackend per GPU
// holding that rank's slices of the weights (uploaded straight from the mmapped GGUF), one host
// thread per GPU that runs its rank's part of every forward, NCCL for the sums. To the runtime
// it is one ForwardBackend; a State's device part holds every rank's own State.
// Internal to the backend's CUDA sources.
#pragma once
#include <memory>

#include "model/backend.h"
#include "model/model.h"

namespace dsv4::cuda {

// gpus >= 2 of the visible devices (0 .. gpus - 1); throws naming what is missing (devices, NCCL)
// or what cannot be split (Model::shard_plan).
std::unique_ptr<ForwardBackend> make_sharded_backend(const Model& m, int gpus);

}  // namespace dsv4::cuda
