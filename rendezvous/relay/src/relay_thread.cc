#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <future>

#include "ddprun/rendezvous/node_relay.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;

RelayThread::RelayThread(RelayOptions options,
                         std::function<void(const std::string&)> onUpstreamLost)
    : relay_(std::make_unique<NodeRelay>(io_, std::move(options), std::move(onUpstreamLost))),
      port_(relay_->port()) {
  relay_->start();
  thread_ = std::thread([this] {
    auto work = asio::make_work_guard(io_);
    io_.run();
  });
}

RelayThread::~RelayThread() { stop(); }

RelayCounters RelayThread::counters() {
  if (!thread_.joinable()) return relay_->counters();
  std::promise<RelayCounters> copy;
  asio::post(io_, [&] { copy.set_value(relay_->counters()); });
  return copy.get_future().get();
}

void RelayThread::stop() {
  if (!thread_.joinable()) return;
  asio::post(io_, [this] {
    relay_->stop();
    io_.stop();
  });
  thread_.join();
}

}  // namespace ddprun::rendezvous
