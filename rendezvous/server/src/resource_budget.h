// ResourceBudget: what every connection of one store server together may
// hold beyond the stored data (StoreState has its own limit): input
// buffers, requests being received, queued replies and pending waits, and
// the connections themselves (in all and per peer address).
//
// Each connection (Transport) holds a Charge and resizes it to what it holds
// after every step; growth that would pass the budget is refused, so the
// connection can answer with an error (or close) instead of allocating.
//
// Thread-safety: the server's loop thread only.
// Ownership: a Charge must not outlive its budget (connections go before it).
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace ddprun::rendezvous {

class ResourceBudget {
 public:
  // From StoreServerOptions (which holds the defaults).
  struct Limits {
    std::size_t maxBufferedBytes;
    std::size_t maxConnections;
    std::size_t maxConnectionsPerAddress;
  };

  explicit ResourceBudget(Limits limits) : limits_(limits) {}
  ResourceBudget(const ResourceBudget&) = delete;
  ResourceBudget& operator=(const ResourceBudget&) = delete;

  // One holder's share of maxBufferedBytes.
  class Charge {
   public:
    explicit Charge(ResourceBudget& budget) : budget_(&budget) {}
    ~Charge() { resize(0); }
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;

    // Sets the charge to `bytes`; false (nothing changed) when growing to it
    // would pass the budget. Shrinking always succeeds.
    bool resize(std::size_t bytes) {
      if (bytes > bytes_ && !budget_->fits(bytes - bytes_)) return false;
      budget_->used_ = budget_->used_ - bytes_ + bytes;
      bytes_ = bytes;
      return true;
    }
    std::size_t bytes() const { return bytes_; }

   private:
    ResourceBudget* budget_;
    std::size_t bytes_ = 0;
  };

  // Connections. admit() counts a new connection from `address`, or
  // returns false (counting nothing) when a cap is reached.
  bool admit(const std::string& address) {
    if (connections_ >= limits_.maxConnections) return false;
    std::size_t& fromAddress = perAddress_[address];
    if (fromAddress >= limits_.maxConnectionsPerAddress) return false;
    ++fromAddress;
    ++connections_;
    return true;
  }
  void leave(const std::string& address) {
    auto it = perAddress_.find(address);
    if (it != perAddress_.end() && --it->second == 0) perAddress_.erase(it);
    --connections_;
  }

  std::size_t connections() const { return connections_; }
  // Connections open now, by the peer's address (a node).
  const std::map<std::string, std::size_t>& connectionsByAddress() const { return perAddress_; }
  std::size_t used() const { return used_; }
  std::size_t limit() const { return limits_.maxBufferedBytes; }

 private:
  bool fits(std::size_t more) const { return more <= limits_.maxBufferedBytes - used_; }

  Limits limits_;
  std::size_t used_ = 0;
  std::size_t connections_ = 0;
  std::map<std::string, std::size_t> perAddress_;
};

}  // namespace ddprun::rendezvous
