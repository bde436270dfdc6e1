#include "options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace fmha_cli {

Options::Options(const std::vector<std::string> &args, const std::vector<std::string> &accepted,
                 const std::vector<std::string> &flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'");
    std::string name = arg.substr(2);
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) {
      if (!flags_.insert(name).second) throw UsageError("option --" + name + " given twice");
      continue;
    }
    std::string value;
    const size_t equals = name.find('=');
    if (equals != std::string::npos) {
      value = name.substr(equals + 1);
      name.resize(equals);
    } else {
      if (i + 1 == args.size()) throw UsageError("option --" + name + " needs a value");
      value = args[++i];
    }
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) {
      throw UsageError("option --" + name + " takes no value");
    }
    if (std::find(accepted.begin(), accepted.end(), name) == accepted.end()) {
      throw UsageError("unknown option --" + name);
    }
    if (!values_.emplace(name, value).second) throw UsageError("option --" + name + " given twice");
  }
}

std::string Options::text(const std::string &name, const std::string &fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

namespace {

int64_t parse_integer(const std::string &name, const std::string &value, int64_t min, int64_t max) {
  char *end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || parsed < min || parsed > max) {
    throw UsageError("--" + name + " must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                     "], not '" + value + "'");
  }
  return parsed;
}

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

int64_t Options::integer(const std::string &name, int64_t fallback, int64_t min, int64_t max) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : parse_integer(name, it->second, min, max);
}

double Options::number(const std::string &name, double fallback, double min, double max) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string &value = it->second;
  char *end = nullptr;
  errno = 0;
  const double parsed = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(parsed) || parsed < min || parsed > max) {
    throw UsageError("--" + name + " must be a number in [" + format_number(min) + ", " + format_number(max) +
                     "], not '" + value + "'");
  }
  return parsed;
}

std::vector<std::string> Options::list(const std::string &name, const std::vector<std::string> &fallback) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  std::vector<std::string> items;
  std::stringstream stream(it->second);
  for (std::string item; std::getline(stream, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

std::vector<int64_t> Options::integers(const std::string &name, const std::vector<int64_t> &fallback, int64_t min,
                                       int64_t max) const {
  if (!has(name)) return fallback;
  std::vector<int64_t> values;
  for (const std::string &item : list(name)) values.push_back(parse_integer(name, item, min, max));
  if (values.empty()) throw UsageError("--" + name + " needs at least one integer");
  return values;
}

std::string Options::choice(const std::string &name, const std::string &fallback,
                            const std::vector<std::string> &choices) const {
  std::string value = text(name, fallback);
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return value;
  std::string listed;
  for (const std::string &c : choices) listed += (listed.empty() ? "" : "|") + c;
  throw UsageError("--" + name + " must be one of " + listed + ", not '" + value + "'");
}

}  // namespace fmha_cli
