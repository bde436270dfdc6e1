#include "core/registry.h"

#include <strings.h>

#include <cstdlib>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/names.h"
#include "core/plugin_loader.h"

namespace fmha::core {

namespace {

// fmha_backend_kind of a FMHA_SPLITK_BACKEND value (any case), or -1.
int32_t parse_backend_kind(const char *text) {
  for (int32_t kind : {FMHA_BACKEND_AUTO, FMHA_BACKEND_CPU, FMHA_BACKEND_CUDA, FMHA_BACKEND_HIP})
    if (strcasecmp(text, backend_kind_name(kind)) == 0) return kind;
  return -1;
}

}  // namespace

const Registry &Registry::instance() {
  // Leaked on purpose (see the header); C++11 statics initialise once, thread safe.
  static const Registry *const registry = new Registry();
  return *registry;
}

Registry::Registry() {
  BackendCandidate cpu;
  cpu.name = "cpu";
  cpu.score = 1;
  // The built-in backend fails to start only for lack of memory (its thread
  // pool). Recorded, that would disable it for the life of the process;
  // thrown, this first call fails with OUT_OF_MEMORY and the next one builds
  // the registry again.
  if (adopt_table(cpu, fmha::cpu::backend_table()) == FMHA_STATUS_OUT_OF_MEMORY)
    fail(FMHA_STATUS_OUT_OF_MEMORY, cat("starting the CPU backend: ", cpu.reason));
  candidates_.push_back(cpu);

  PluginSearch search = find_plugins();
  searched_ = std::move(search.searched);
  for (const std::string &path : search.files) candidates_.push_back(load_plugin(path));

  // Best score per kind; on a tie the first found (the core's own directory
  // comes first) wins.
  for (size_t index = 0; index < candidates_.size(); ++index) {
    const BackendCandidate &candidate = candidates_[index];
    if (!candidate.available) continue;
    int &best = chosen_[static_cast<size_t>(candidate.kind)];
    if (best < 0 || candidate.score > candidates_[static_cast<size_t>(best)].score) best = static_cast<int>(index);
  }
  for (size_t index = 0; index < candidates_.size(); ++index) {
    BackendCandidate &candidate = candidates_[index];
    if (candidate.table == nullptr) continue;
    const int best = candidate.available ? chosen_[static_cast<size_t>(candidate.kind)] : -1;
    if (best == static_cast<int>(index)) {
      candidate.reason = cat("taken: ", candidate.path.empty() ? "built in, " : "", "score ", candidate.score, ", ",
                             candidate.device_count, " device(s)");
    } else if (best >= 0) {
      const BackendCandidate &winner = candidates_[static_cast<size_t>(best)];
      retire(candidate, cat("not taken: ", winner.path, " serves ", backend_kind_name(candidate.kind), " with score ",
                            winner.score, " (this one: ", candidate.score, ")"));
    } else {
      retire(candidate, candidate.reason);
    }
  }
}

const BackendCandidate *Registry::usable(int32_t kind) const {
  if (kind < 0 || static_cast<size_t>(kind) >= chosen_.size()) return nullptr;
  const int index = chosen_[static_cast<size_t>(kind)];
  return index < 0 ? nullptr : &candidates_[static_cast<size_t>(index)];
}

std::string Registry::why_unavailable(int32_t kind) const {
  std::string reasons;
  for (const BackendCandidate &candidate : candidates_)
    if (!candidate.available && (candidate.kind == kind || candidate.kind == FMHA_BACKEND_AUTO))
      reasons += cat(reasons.empty() ? "" : "; ", candidate.path.empty() ? candidate.name : candidate.path, ": ",
                     candidate.reason);
  if (reasons.empty()) reasons = "no plugin provides it";
  return cat(reasons, " (plugins searched for in: ", searched_.empty() ? "no directory" : searched_,
             "; FMHA_SPLITK_PLUGIN_PATH adds directories)");
}

BackendChoice Registry::choose_device(const BackendCandidate &backend, int32_t device_id,
                                      const std::string &what) const {
  if (backend.kind == FMHA_BACKEND_CPU) return {&backend, 0};
  if (device_id < 0 || device_id >= backend.device_count)
    invalid(cat(what, " = ", device_id, " is outside [0, ", backend.device_count, "), the devices of the ",
                backend.name, " backend"));
  return {&backend, device_id};
}

BackendChoice Registry::select(int32_t requested, int32_t device_id) const {
  int32_t kind = requested;
  std::string what = cat("problem.backend = ", backend_kind_name(kind));
  const char *forced = std::getenv("FMHA_SPLITK_BACKEND");
  if (kind == FMHA_BACKEND_AUTO && forced != nullptr && forced[0] != '\0') {
    kind = parse_backend_kind(forced);
    if (kind < 0) invalid(cat("FMHA_SPLITK_BACKEND = \"", forced, "\" is not one of cpu, cuda, hip (or auto)"));
    what = cat("FMHA_SPLITK_BACKEND = ", forced);
  }
  if (kind == FMHA_BACKEND_AUTO) {
    for (int32_t preferred : {FMHA_BACKEND_CUDA, FMHA_BACKEND_HIP, FMHA_BACKEND_CPU})
      if (const BackendCandidate *backend = usable(preferred))
        return choose_device(*backend, device_id, "problem.device_id");
    fail(FMHA_STATUS_BACKEND_UNAVAILABLE, cat("no backend is usable: ", why_unavailable(FMHA_BACKEND_CPU)));
  }
  const BackendCandidate *backend = usable(kind);
  if (backend == nullptr)
    fail(FMHA_STATUS_BACKEND_UNAVAILABLE,
         cat(what, ": the ", backend_kind_name(kind), " backend is unavailable: ", why_unavailable(kind)));
  return choose_device(*backend, device_id, "problem.device_id");
}

BackendChoice Registry::for_device(DLDevice device, const char *tensor) const {
  int32_t kind = FMHA_BACKEND_AUTO;
  switch (device.device_type) {
    case kDLCPU:
      kind = FMHA_BACKEND_CPU;
      break;
    case kDLCUDA:
      kind = FMHA_BACKEND_CUDA;
      break;
    case kDLROCM:
      kind = FMHA_BACKEND_HIP;
      break;
    default:
      invalid(cat(tensor, " is on ", dl_device_string(device), ": only cpu, cuda and rocm tensors are supported"));
  }
  const BackendCandidate *backend = usable(kind);
  if (backend == nullptr)
    fail(FMHA_STATUS_BACKEND_UNAVAILABLE,
         cat(tensor, " is on ", dl_device_string(device), " but the ", backend_kind_name(kind),
             " backend is unavailable: ", why_unavailable(kind)));
  if (kind == FMHA_BACKEND_CPU && device.device_id != 0)
    invalid(cat(tensor, "->device.device_id = ", device.device_id, " must be 0 for a cpu tensor"));
  return choose_device(*backend, device.device_id, cat(tensor, "->device.device_id"));
}

}  // namespace fmha::core
