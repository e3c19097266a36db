#include "ddprun/common/secret.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "ddprun/common/error.h"

namespace ddprun {

bool constantTimeEquals(std::string_view a, std::string_view b) {
  // Walk the longer input fully; fold length difference into the result.
  const std::size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::string readTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(
        fmt::format("cannot read the token file '{}'; check the path and its permissions", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  if (!token.empty() && token.back() == '\n') token.pop_back();
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty()) {
    throw ConfigError(fmt::format("the token file '{}' is empty; put a secret in it", path));
  }
  return token;
}

std::optional<std::string> tokenFromEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string randomToken() {
  std::random_device device;  // /dev/urandom on Linux.
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", device());
  return token;
}

namespace {

constexpr std::string_view kWorkerPrefix = "worker:";

std::string hmacHex(std::string_view key, std::string_view message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ::HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
         reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace

std::string workerCredential(std::string_view token, std::string_view job) {
  if (token.empty()) return "";
  return std::string(kWorkerPrefix) + std::string(job) + ":" + hmacHex(token, job);
}

std::optional<std::string> workerCredentialJob(std::string_view credential,
                                               std::string_view token) {
  if (token.empty() || credential.substr(0, kWorkerPrefix.size()) != kWorkerPrefix) {
    return std::nullopt;
  }
  const std::string_view rest = credential.substr(kWorkerPrefix.size());
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  const std::string_view job = rest.substr(0, colon);
  if (!constantTimeEquals(rest.substr(colon + 1), hmacHex(token, job))) return std::nullopt;
  return std::string(job);
}

}  // namespace ddprun
