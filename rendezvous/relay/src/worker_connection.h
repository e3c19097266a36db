// WorkerConnection: one worker's connection to the node relay. It owns the
// socket, one input buffer and one output queue drained by one write at a
// time; its first bytes choose the forwarder of their dialect
// (TcpStoreForwarder for PyTorch's TCPStore), which it feeds from then on.
// It reads only while its forwarder can take more (not waiting for a reply,
// the store's acknowledgements within the relay's per-connection budget).
//
// Thread-safety: the relay's loop thread only.
// Ownership: shared_ptr: the read and write handlers and the forwarder's
// upstream handlers hold it; the relay lists it (weakly) to close it.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <memory>
#include <string>
#include <unordered_map>

#include "ddprun/rendezvous/input_buffer.h"
#include "ddprun/rendezvous/node_relay.h"
#include "shared_requests.h"

namespace ddprun::rendezvous::relay {

class WorkerConnection;

// What every connection of one relay shares.
struct RelayContext {
  RelayOptions options;
  RelayCounters counters;
  std::shared_ptr<SharedRequests> shared;
  std::unordered_map<std::uint64_t, std::weak_ptr<WorkerConnection>> open;
  std::uint64_t nextConnection = 1;
};

// A dialect's handling of one connection's requests.
class Forwarder {
 public:
  virtual ~Forwarder() = default;
  // Handles the complete requests in the input until it must wait for a
  // reply; false when the connection was closed.
  virtual bool process() = 0;
  // Whether it takes more input now.
  virtual bool wantsInput() const = 0;
  // The connection is closing: drop its waits upstream.
  virtual void closing() = 0;
};

class WorkerConnection : public std::enable_shared_from_this<WorkerConnection> {
 public:
  WorkerConnection(boost::asio::ip::tcp::socket socket, RelayContext& context);
  ~WorkerConnection();
  WorkerConnection(const WorkerConnection&) = delete;
  WorkerConnection& operator=(const WorkerConnection&) = delete;

  void start();
  // Closes the connection (idempotent); `why` goes to the log.
  void close(const std::string& why);
  // Stops reading; closes once the queued output is written.
  void closeAfterFlush(const std::string& why);

  // --- for its forwarder ---------------------------------------------------
  RelayContext& context() { return context_; }
  rendezvous::InputBuffer& input() { return input_; }
  std::string& output() { return output_; }
  const std::string& peer() const { return peer_; }
  bool closed() const { return closed_; }
  // Writes the queued output.
  void flush();
  // A reply it waited for came: handle more input, read again.
  void resume();

 private:
  void readMore();
  bool chooseForwarder();
  void process();

  boost::asio::ip::tcp::socket socket_;
  RelayContext& context_;
  std::uint64_t id_ = 0;
  std::string peer_ = "a worker";
  rendezvous::InputBuffer input_{4096};
  std::string output_;
  std::string writing_;
  bool reading_ = false;
  bool closed_ = false;
  std::string closeWhenWritten_;  // closeAfterFlush's reason
  std::unique_ptr<Forwarder> forwarder_;
};

}  // namespace ddprun::rendezvous::relay
