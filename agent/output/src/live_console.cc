#include "ddprun/agent/output/live_console.h"

namespace ddprun::agent {

namespace {
// Back to the start of the row and erase it (a redraw in place).
constexpr std::string_view kEraseRow = "\r\x1b[K";
}  // namespace

std::string_view LiveConsole::shown(std::string_view text) {
  std::size_t cr = text.rfind('\r');
  if (cr == std::string_view::npos) return text;
  if (cr + 1 == text.size()) {
    // Ends with '\r' (a bar that returned to the start): what it drew last.
    const std::size_t before = cr == 0 ? std::string_view::npos : text.rfind('\r', cr - 1);
    return text.substr(before == std::string_view::npos ? 0 : before + 1,
                       cr - (before == std::string_view::npos ? 0 : before + 1));
  }
  return text.substr(cr + 1);
}

void LiveConsole::draw(const OpenLine& open) {
  buffer_.assign(kEraseRow);
  buffer_ += open.prefix;
  buffer_ += open.shown;
  out_(open.fd, buffer_);
}

void LiveConsole::line(int owner, int fd, std::string_view prefix, std::string_view text) {
  const std::string_view visible = shown(text);
  if (open_ && open_->owner == owner) {
    // The open line is finished: draw its final text and end it.
    buffer_.assign(kEraseRow);
    buffer_ += prefix;
    buffer_ += visible;
    buffer_ += '\n';
    out_(fd, buffer_);
    open_.reset();
    return;
  }
  if (open_) out_(open_->fd, kEraseRow);
  buffer_.assign(prefix);
  buffer_ += visible;
  buffer_ += '\n';
  out_(fd, buffer_);
  if (open_) draw(*open_);
}

void LiveConsole::partial(int owner, int fd, std::string_view prefix, std::string_view text) {
  const std::string_view visible = shown(text);
  if (open_ && open_->owner == owner && open_->fd == fd && visible.size() > open_->shown.size() &&
      visible.starts_with(open_->shown)) {
    // Only appended to (dots, a line printed in pieces): write the rest.
    out_(fd, visible.substr(open_->shown.size()));
    open_->shown.assign(visible);
    return;
  }
  if (open_ && open_->fd != fd) out_(open_->fd, kEraseRow);
  open_ = OpenLine{owner, fd, std::string(prefix), std::string(visible)};
  draw(*open_);
}

void LiveConsole::close(int owner) {
  if (open_ && open_->owner == owner) endOpenLine();
}

void LiveConsole::endOpenLine() {
  if (!open_) return;
  out_(open_->fd, "\n");
  open_.reset();
}

}  // namespace ddprun::agent
