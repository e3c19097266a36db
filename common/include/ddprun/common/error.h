// ddprun error types.
//
// Public blocking APIs (the store client, the worker library) throw
// exceptions derived from ddprun::Error. Each message says what happened,
// to whom, and what to do about it. Expected outcomes inside asynchronous
// code are values (error codes), never these exceptions.
//
// Thread-safety: these are plain value types.
#pragma once

#include <stdexcept>
#include <string>

namespace ddprun {

// Base of every exception ddprun throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A blocking call did not complete before its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// The server itself answered that a wait ran out (a round that did not
// complete within the join timeout), as opposed to a deadline of the
// client's own: the answer came over a working connection.
class AnsweredTimeoutError : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

// The peer could not be reached, or the connection broke.
class NetworkError : public Error {
 public:
  using Error::Error;
};

// The peer sent bytes that do not follow the protocol.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// The peer refused our credentials (wrong or missing token).
class AuthError : public Error {
 public:
  using Error::Error;
};

// The server understood the request and refused it (for example a value
// over the size limit, or ADD on a key that does not hold an integer).
class ServerError : public Error {
 public:
  using Error::Error;
};

// Invalid configuration given by the user (options, environment, files).
class ConfigError : public Error {
 public:
  using Error::Error;
};

}  // namespace ddprun
