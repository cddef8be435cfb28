#include "model/backend.h"

#include <map>
#include <mutex>

#include "core/error.h"

namespace dsv4 {

namespace {
std::map<std::string, BackendFactory>& registry() {
    static std::map<std::string, BackendFactory> r;
    return r;
}
std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
}
}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
    std::lock_guard<std::mutex> lk(registry_mutex());
    registry()[name] = factory;
}

std::unique_ptr<ForwardBackend> open_backend(const std::string& name, const Model& model, int gpus) {
    if (gpus < 1) throw UsageError(cat("--gpus ", gpus, ": needs at least one GPU"));
    BackendFactory f = nullptr;
    {
        std::lock_guard<std::mutex> lk(registry_mutex());
        auto it = registry().find(name);
        if (it != registry().end()) f = it->second;
    }
    if (!f) {
        if (name == "cuda")
            throw UsageError("--backend cuda: this build has no CUDA backend (nvcc was not found when it was built)");
        throw UsageError(cat("--backend ", name, ": unknown backend (cpu or cuda)"));
    }
    return f(model, gpus);
}

}  // namespace dsv4
