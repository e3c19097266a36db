// A growable receive buffer: bytes are appended at the back by socket reads
// and consumed from the front by the frame parser, without zero-filling or
// copying on every read.
//
// Thread-safety: none; owned by one session.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>

namespace ddprun::rendezvous {

class InputBuffer {
 public:
  explicit InputBuffer(std::size_t initialCapacity = 64 * 1024)
      : data_(new char[initialCapacity]), capacity_(initialCapacity) {}

  std::string_view readable() const { return {data_.get() + begin_, end_ - begin_}; }
  void consume(std::size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }

  // Makes room for at least `want` bytes in total of readable data (so a
  // frame of that size fits) and returns the writable tail.
  char* writable(std::size_t want, std::size_t& space) {
    const std::size_t size = end_ - begin_;
    if (want < size + 4096) want = size + 4096;
    if (capacity_ - begin_ < want) {
      if (capacity_ >= want) {
        if (size > 0) std::memmove(data_.get(), data_.get() + begin_, size);
      } else {
        std::size_t grown = std::max<std::size_t>(capacity_ * 2, 4096);
        while (grown < want) grown *= 2;
        std::unique_ptr<char[]> bigger(new char[grown]);
        if (size > 0) std::memcpy(bigger.get(), data_.get() + begin_, size);
        data_ = std::move(bigger);
        capacity_ = grown;
      }
      begin_ = 0;
      end_ = size;
    }
    space = capacity_ - end_;
    return data_.get() + end_;
  }
  void commit(std::size_t n) { end_ += n; }

  // Makes room for exactly `want` bytes of readable data in all (a frame of
  // known size plus read slack), without the doubling of writable(): what
  // the buffer holds is charged to a budget, so it must not be twice the
  // frame.
  void reserveExactly(std::size_t want) {
    const std::size_t size = end_ - begin_;
    if (capacity_ >= want) {
      if (capacity_ - begin_ < want) {
        std::memmove(data_.get(), data_.get() + begin_, size);
        begin_ = 0;
        end_ = size;
      }
      return;
    }
    std::unique_ptr<char[]> bigger(new char[want]);
    if (size > 0) std::memcpy(bigger.get(), data_.get() + begin_, size);
    data_ = std::move(bigger);
    capacity_ = want;
    begin_ = 0;
    end_ = size;
  }
  std::size_t capacity() const { return capacity_; }

  // Frees the memory (a closed or idle connection's buffer); writable()
  // allocates again.
  void release() {
    data_.reset();
    capacity_ = begin_ = end_ = 0;
  }

  // Returns memory after a large frame has been consumed.
  void shrinkTo(std::size_t capacity) {
    if (capacity_ > capacity && end_ - begin_ <= capacity) {
      std::unique_ptr<char[]> smaller(new char[capacity]);
      std::memcpy(smaller.get(), data_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
      data_ = std::move(smaller);
      capacity_ = capacity;
    }
  }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t capacity_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

}  // namespace ddprun::rendezvous
