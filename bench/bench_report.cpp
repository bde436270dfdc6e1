#include "bench_report.h"

#include <ctime>
#include <fstream>
#include <stdexcept>

namespace fmha_cli {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string problem_json(const BenchResult &r, double read_bandwidth_gbps) {
  const BenchCase &c = r.bench_case;
  std::string json = "    {\"name\": " + json_string(c.spec.name) + ", \"kind\": " + json_string(c.spec.kind) +
                     ", \"dtype\": \"bf16\", \"kv_bytes\": " + json_integer(c.kv_bytes());
  // dtype is that of Q and O; the K/V format of a quantised problem is the
  // grid's quant field (problems.txt).
  if (c.spec.quant.kv_quant != FMHA_KV_QUANT_NONE) json += ", \"kv_quant\": " + json_string(c.spec.quant.text);
  if (c.layout == FMHA_KV_PAGED) json += ", \"page_size\": " + std::to_string(c.spec.page_size);
  if (!c.reference.empty()) json += ", \"reference\": " + json_string(c.reference);
  json += ",\n     \"time_us\": " + json_number(r.time_us) +
          ", \"pct_read\": " + json_number(pct_read(r, read_bandwidth_gbps)) +
          ", \"host_run_us\": " + json_number(r.host_run_us) + ", \"plan_us\": " + json_number(r.plan_us) +
          ", \"plan_external_us\": " + json_number(r.plan_external_us) +
          ", \"split_k\": " + (r.kernel.empty() ? std::string("null") : std::to_string(r.split_k)) +
          ", \"kernel\": " + (r.kernel.empty() ? std::string("null") : json_string(r.kernel)) +
          ", \"config_source\": " + (r.config_source.empty() ? std::string("null") : json_string(r.config_source)) +
          ", \"rel_err\": " + json_number(r.rel_err) + ", \"peers\": {}";
  if (!r.error.empty()) json += ", \"error\": " + json_string(r.error);
  return json + "}";
}

}  // namespace

std::string json_string(const std::string &text) {
  std::string quoted = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          quoted += escaped;
        } else {
          quoted += c;
        }
    }
  }
  return quoted + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string json_integer(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", value);
  return text;
}

void write_text_file(const std::string &path, const std::string &text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

double pct_read(const BenchResult &result, double read_bandwidth_gbps) {
  return result.bench_case.bytes_moved() / (result.time_us * 1e-6) / (read_bandwidth_gbps * 1e9) * 100.0;
}

void print_table_header(std::FILE *out) {
  std::fprintf(out, "%-24s %9s %10s %7s %8s %7s  %-40s %8s %9s  %s\n", "name", "kv MiB", "time us", "% read", "GB/s",
               "split_k", "kernel", "host us", "rel err", "config");
}

void print_table_row(std::FILE *out, const BenchResult &r, double read_bandwidth_gbps) {
  const BenchCase &c = r.bench_case;
  if (!r.error.empty()) {
    std::fprintf(out, "%-24s %9.1f  error: %s\n", c.spec.name.c_str(), c.kv_bytes() / kMiB, r.error.c_str());
    return;
  }
  char error[32] = "-";
  if (r.checked) {
    std::snprintf(error, sizeof error, "%9.2e%s", r.rel_err, r.rel_err <= kBenchErrorLimit ? "" : " FAILED");
  }
  std::fprintf(out, "%-24s %9.1f %10.2f %7.1f %8.1f %7d  %-40s %8.2f %9s  %s\n", c.spec.name.c_str(),
               c.kv_bytes() / kMiB, r.time_us, pct_read(r, read_bandwidth_gbps), c.bytes_moved() / (r.time_us * 1e3),
               r.split_k, r.kernel.c_str(), r.host_run_us, error, r.config_source.c_str());
}

void write_report_json(const std::string &path, const BenchReport &report) {
  std::string json = "{\n  \"gpu\": " + json_string(report.gpu) +
                     ",\n  \"commit\": " + (report.commit.empty() ? std::string("null") : json_string(report.commit)) +
                     ",\n  \"date\": " + json_string(report.date) +
                     ",\n  \"copy_bandwidth_gbps\": " + json_number(report.copy_bandwidth_gbps) +
                     ",\n  \"read_bandwidth_gbps\": " + json_number(report.read_bandwidth_gbps) +
                     ",\n  \"problems\": [";
  for (size_t i = 0; i < report.results.size(); ++i) {
    json += (i ? ",\n" : "\n") + problem_json(report.results[i], report.read_bandwidth_gbps);
  }
  json += report.results.empty() ? "]\n}\n" : "\n  ]\n}\n";
  write_text_file(path, json);
}

}  // namespace fmha_cli
