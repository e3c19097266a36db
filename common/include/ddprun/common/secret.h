// Loading and comparing shared secrets (the store token).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

// Compares two secrets in time that depends only on their lengths, so a
// client cannot learn a token byte by byte from response times.
bool constantTimeEquals(std::string_view a, std::string_view b);

// Reads a token from `path`, stripping one trailing newline.
// Throws ConfigError if the file cannot be read or is empty.
std::string readTokenFile(const std::string& path);

// The token from the environment variable `name`, if set and non-empty.
std::optional<std::string> tokenFromEnv(const char* name);

// A fresh random token (hex, 128 bits) from the OS's random source.
std::string randomToken();

// Worker credentials (docs/security.md). Workers never receive the agents'
// token: they get "worker:<job>:<HMAC-SHA256(token, job) in hex>", which a
// store holding the token can check without keeping any state, and which
// grants key-value operations under "<job>/" only. An empty token (an open
// store) gives an empty credential.
std::string workerCredential(std::string_view token, std::string_view job);
// The job a worker credential was made for, when `token` made it.
std::optional<std::string> workerCredentialJob(std::string_view credential, std::string_view token);

}  // namespace ddprun
