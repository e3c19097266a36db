// TcpStoreForwarder: a worker's PyTorch TCPStore connection (1.13/2.0, or
// 2.2+ after VALIDATE) carried to the job's store: each request decoded
// (tcpstore::Decoder, the store's own limits), refused as the store refuses
// it (a control key, WATCH_KEY), answered here (PING, CANCEL_WAIT) or sent
// up as its native twin; the answer is written back in the dialect's
// bytes. As on the store: a new request drops a pending WAIT or BARRIER,
// and a write the store refuses closes the connection (the dialect has no
// error reply).
//
// Thread-safety: the relay's loop thread only.
// Ownership: owned by its WorkerConnection; upstream handlers hold the
// connection.
#pragma once

#include <cstdint>
#include <string>

#include "ddprun/rendezvous/tcpstore_codec.h"
#include "shared_requests.h"
#include "worker_connection.h"

namespace ddprun::rendezvous::relay {

class TcpStoreForwarder : public Forwarder {
 public:
  TcpStoreForwarder(WorkerConnection& connection, rendezvous::tcpstore::Dialect dialect);

  bool process() override;
  bool wantsInput() const override;
  void closing() override;

 private:
  // Sends `request` up; `reply` writes its answer (kOk only; a refusal
  // closes). The connection reads on once it has.
  void ask(const rendezvous::protocol::Request& request,
           std::function<void(std::string& out, std::string_view body)> reply);
  // A write with no answer in the dialect: on its way, counted against the
  // connection's budget until the store acknowledges it.
  void write(const rendezvous::protocol::Request& request, std::size_t bytes);
  void handle(rendezvous::tcpstore::Request& request);
  void dropWait();
  // Its WAIT or BARRIER was answered.
  void waitEnded();
  void refuse(const std::string& why);
  // Whether a read's answer can be written (else the connection closed).
  bool readAnswered(const UpstreamReply& answer);
  void answered();

  WorkerConnection& connection_;
  RelayContext& context_;
  rendezvous::tcpstore::Decoder decoder_;
  Caller caller_;
  bool awaiting_ = false;         // a reply is due before the next request
  std::size_t unacked_ = 0;       // bytes of writes not acknowledged
  std::uint64_t waitTicket_ = 0;  // a WAIT in progress (SharedRequests' ticket)
  std::uint32_t barrierId_ = 0;   // a BARRIER in progress (its upstream id)
};

}  // namespace ddprun::rendezvous::relay
