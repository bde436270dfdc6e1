#include "core/backend_candidate.h"

#include "core/error.h"
#include "core/names.h"

namespace fmha::core {

namespace {

// What is wrong with the table, or "" when the core can use it.
std::string table_defect(const fmha_backend_v1 *table) {
  if (table == nullptr) return "fmha_backend_init_v1 returned NULL";
  if (table->api_version != FMHA_BACKEND_API_VERSION)
    return cat("backend API version mismatch: the table has api_version ", table->api_version, ", the core needs ",
               FMHA_BACKEND_API_VERSION);
  if (table->struct_size < sizeof(fmha_backend_v1))
    return cat("table struct_size = ", table->struct_size, " is smaller than the ", sizeof(fmha_backend_v1),
               " bytes of fmha_backend_v1");
  if (table->kind != FMHA_BACKEND_CPU && table->kind != FMHA_BACKEND_CUDA && table->kind != FMHA_BACKEND_HIP)
    return cat("unknown backend kind ", table->kind);
  if (table->name == nullptr) return "table has no name";
  const std::pair<bool, const char *> functions[] = {{table->device_props != nullptr, "device_props"},
                                                     {table->plan != nullptr, "plan"},
                                                     {table->run != nullptr, "run"},
                                                     {table->merge != nullptr, "merge"},
                                                     {table->merge_backward != nullptr, "merge_backward"},
                                                     {table->alloc != nullptr, "alloc"},
                                                     {table->free != nullptr, "free"}};
  for (const auto &[present, function] : functions)
    if (!present) return cat("table has no ", function, " function");
  if (table->device_count < 0) return cat("table has device_count = ", table->device_count);
  return "";
}

}  // namespace

void retire(BackendCandidate &candidate, const std::string &reason) {
  if (candidate.table != nullptr && candidate.table->shutdown != nullptr) candidate.table->shutdown();
  candidate.table = nullptr;
  candidate.available = false;
  candidate.reason = reason;
}

fmha_status adopt_table(BackendCandidate &candidate, const fmha_backend_v1 *table) {
  candidate.available = false;
  candidate.reason = table_defect(table);
  if (!candidate.reason.empty()) return FMHA_STATUS_SUCCESS;
  candidate.table = table;
  candidate.kind = table->kind;
  candidate.name = table->name;
  candidate.device_count = table->device_count;
  if (table->device_count == 0) {
    candidate.reason = cat("loaded (score ", candidate.score, ") but it sees no device");
    return FMHA_STATUS_SUCCESS;
  }
  fmha_device_props props{};
  BackendMessage message;
  const fmha_status status = table->device_props(0, &props, message.msg());
  if (status != FMHA_STATUS_SUCCESS) {
    candidate.reason = cat("device_props(0) failed with status ", static_cast<int>(status), ": ", message.text());
    return status;
  }
  props.name[sizeof(props.name) - 1] = '\0';
  candidate.device_name = props.name;
  candidate.available = true;
  candidate.reason = cat("loaded (score ", candidate.score, ", ", table->device_count, " device(s))");
  return FMHA_STATUS_SUCCESS;
}

}  // namespace fmha::core
