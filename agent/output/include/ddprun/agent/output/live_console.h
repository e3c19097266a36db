// LiveConsole: draws workers' output on a terminal as it comes, the way a
// program writing to the terminal itself would show it, with each line's
// rank prefix.
//
// A complete line is written as prefix + text + newline. An unfinished line
// (a progress bar: tqdm and Lightning redraw it with '\r') is drawn at once
// and redrawn in place on each update, prefix first: at most one such line is
// open on the terminal, owned by the stream that drew it last. A complete line
// of another stream while one is open clears the open line, is written, and
// the open line is drawn again below it, so progress bars stay at the bottom
// as they do under tqdm's own logging. Text containing '\r' is shown as a
// terminal would leave it: the part after the last '\r' (after the one
// before that, when the text ends with '\r').
//
// Every descriptor given to it is taken to be the same terminal (ddprun's
// stdout and stderr); it writes through `out`, in order.
//
// Thread-safety: one thread (the agent's loop).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::agent {

class LiveConsole {
 public:
  using Output = std::function<void(int fd, std::string_view bytes)>;

  explicit LiveConsole(Output out) : out_(std::move(out)) {}

  // What a terminal shows of `text` (see above).
  static std::string_view shown(std::string_view text);

  // A complete line of stream `owner` (any id; one per worker stream).
  void line(int owner, int fd, std::string_view prefix, std::string_view text);
  // The unfinished line of `owner` so far (the whole of it, not the change).
  void partial(int owner, int fd, std::string_view prefix, std::string_view text);
  // Ends the open line (with a newline) when `owner` holds it.
  void close(int owner);
  // Ends the open line, whoever holds it, before other output (ddprun's own
  // messages) reaches the terminal.
  void endOpenLine();

 private:
  struct OpenLine {
    int owner;
    int fd;
    std::string prefix;
    std::string shown;
  };
  void draw(const OpenLine& open);

  Output out_;
  std::optional<OpenLine> open_;
  std::string buffer_;
};

}  // namespace ddprun::agent
