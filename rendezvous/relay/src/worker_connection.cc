#include "worker_connection.h"

#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include "ddprun/common/logging.h"
#include "ddprun/rendezvous/tcpstore_codec.h"
#include "native_forwarder.h"
#include "tcpstore_forwarder.h"

namespace ddprun::rendezvous::relay {

namespace asio = boost::asio;
namespace tcpstore = rendezvous::tcpstore;

WorkerConnection::WorkerConnection(asio::ip::tcp::socket socket, RelayContext& context)
    : socket_(std::move(socket)), context_(context) {
  boost::system::error_code ec;
  const auto remote = socket_.remote_endpoint(ec);
  if (!ec) peer_ = fmt::format("{}:{}", remote.address().to_string(), remote.port());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
}

WorkerConnection::~WorkerConnection() = default;

void WorkerConnection::start() {
  id_ = context_.nextConnection++;
  context_.open[id_] = weak_from_this();
  ++context_.counters.connectionsAccepted;
  ++context_.counters.connectionsOpen;
  readMore();
}

void WorkerConnection::closeAfterFlush(const std::string& why) {
  if (closed_) return;
  closeWhenWritten_ = why.empty() ? "closed" : why;
  if (writing_.empty() && output_.empty()) close(closeWhenWritten_);
}

void WorkerConnection::readMore() {
  if (closed_ || reading_ || !closeWhenWritten_.empty()) return;
  // A forwarder that takes input has consumed every complete request: what
  // is left is one partial request, which needs more bytes whatever its size.
  if (forwarder_ && !forwarder_->wantsInput()) return;  // resume() reads again
  reading_ = true;
  std::size_t space = 0;
  char* into = input_.writable(0, space);
  socket_.async_read_some(
      asio::buffer(into, space),
      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
        self->reading_ = false;
        if (self->closed_) return;
        if (ec) {
          self->close(ec == asio::error::eof ? "it closed the connection" : ec.message());
          return;
        }
        self->input_.commit(n);
        self->process();
        self->readMore();
      });
}

bool WorkerConnection::chooseForwarder() {
  switch (tcpstore::classifyOpening(input_.readable())) {
    case tcpstore::Opening::kNeedMore:
      return true;
    case tcpstore::Opening::kTcpStoreV1:
      forwarder_ = std::make_unique<TcpStoreForwarder>(*this, tcpstore::Dialect::kV1);
      return true;
    case tcpstore::Opening::kTcpStoreV2:
      input_.consume(tcpstore::kValidateBytes);
      ++context_.counters.answeredLocally;  // the VALIDATE
      forwarder_ = std::make_unique<TcpStoreForwarder>(*this, tcpstore::Dialect::kV2);
      return true;
    case tcpstore::Opening::kNative:
      forwarder_ = std::make_unique<NativeForwarder>(*this);
      return true;
    case tcpstore::Opening::kUnknown:
      close("it is not a PyTorch TCPStore client");
      return false;
  }
  return false;
}

void WorkerConnection::process() {
  if (!forwarder_ && !chooseForwarder()) return;
  if (forwarder_ && forwarder_->process()) flush();
}

void WorkerConnection::resume() {
  if (closed_) return;
  process();
  readMore();
}

void WorkerConnection::flush() {
  if (closed_ || !writing_.empty() || output_.empty()) return;
  writing_.swap(output_);
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      if (self->closed_) return;
                      if (ec) {
                        self->close(ec.message());
                        return;
                      }
                      self->writing_.clear();
                      self->flush();
                      if (!self->closeWhenWritten_.empty() && self->writing_.empty()) {
                        self->close(self->closeWhenWritten_);
                      }
                    });
}

void WorkerConnection::close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  DDPRUN_DEBUG("The node relay closes the connection of {}: {}.", peer_, why);
  if (forwarder_) forwarder_->closing();
  boost::system::error_code ignored;
  socket_.close(ignored);
  context_.open.erase(id_);
  --context_.counters.connectionsOpen;
}

}  // namespace ddprun::rendezvous::relay
