// frame_decoder_make_corpus: writes the seed corpus of frame_decoder_fuzz.
//
//   build-fuzz/bin/frame_decoder_make_corpus fuzz/corpus
//
// Each seed is a byte stream built with the public encoder, so the seeds
// stay valid when the encoder changes: client streams (preamble, HELLO and
// requests of every op), a server stream (replies, errors, the goodbye
// push) and a few broken streams (unknown op, truncated and oversized
// frames). The file names say what each holds.
//
// Thread-safety: a single-threaded program.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "ddprun/rendezvous/protocol.h"

namespace {

namespace protocol = ddprun::rendezvous::protocol;
using protocol::Op;
using protocol::Reply;
using protocol::Request;
using protocol::Status;

Request make(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {}) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

std::string hello() {
  std::string out(protocol::kPreamble);
  protocol::encodeRequest(out, 1, make(Op::kHello, {"worker-0"}, {"s3cret"}));
  return out;
}

void put(std::string& out, std::uint32_t id, Request r) { protocol::encodeRequest(out, id, r); }

std::vector<std::pair<std::string, std::string>> seeds() {
  std::vector<std::pair<std::string, std::string>> all;

  all.emplace_back("hello", hello());

  std::string setGet = hello();
  put(setGet, 2, make(Op::kSet, {"k"}, {"v"}));
  Request get = make(Op::kGet, {"k"});
  get.timeoutMs = 1000;
  put(setGet, 3, get);
  all.emplace_back("hello_set_get", setGet);

  std::string everyOp = hello();
  std::uint32_t id = 2;
  put(everyOp, id++, make(Op::kSet, {"rank/0"}, {"10.0.0.1:29500"}));
  put(everyOp, id++, make(Op::kAppend, {"log"}, {"line\n"}));
  Request add = make(Op::kAdd, {"counter"});
  add.delta = -5;
  put(everyOp, id++, add);
  put(everyOp, id++, make(Op::kCompareSet, {"leader"}, {"", "node-1"}));
  put(everyOp, id++, make(Op::kCheck, {"a", "b"}));
  Request wait = make(Op::kWait, {"a", "b", "a"});
  wait.timeoutMs = protocol::kNoTimeout;
  put(everyOp, id++, wait);
  put(everyOp, id++, make(Op::kDeleteKey, {"a"}));
  put(everyOp, id++, make(Op::kNumKeys));
  Request multiGet = make(Op::kMultiGet, {"x", "y"});
  multiGet.timeoutMs = 0;
  put(everyOp, id++, multiGet);
  put(everyOp, id++, make(Op::kMultiSet, {"x", "y", "z"}, {"1", "", "3"}));
  put(everyOp, id++, make(Op::kPing, {}, {"echo"}));
  all.emplace_back("every_op", everyOp);

  // Frames without the preamble, as the decoder sees them after it.
  std::string bare;
  put(bare, 7, make(Op::kMultiSet, {"k1", "k2"}, {"v1", "v2"}));
  put(bare, 8, make(Op::kWait, {}));
  put(bare, 9, make(Op::kPing, {}, {""}));
  all.emplace_back("bare_frames", bare);

  // An agent's rendezvous calls.
  std::string agent = hello();
  Request join = make(Op::kJoin);
  join.join = {"job", "node-a", 0, 8, 2, 4, 30000, 15000, "10.0.0.7", 29511, 3};
  join.timeoutMs = 600000;
  put(agent, 2, join);
  Request report = make(Op::kReportFailure);
  report.node = {"job", "node-a", 1, 3, 137, "rank 5 was killed by SIGKILL"};
  put(agent, 3, report);
  Request leave = make(Op::kLeave);
  leave.node = {"job", "node-a", 1, 0, 0, ""};
  put(agent, 4, leave);
  Request status = make(Op::kRendezvousStatus);
  status.rdzvId = "job";
  put(agent, 5, status);
  all.emplace_back("rendezvous_calls", agent);

  // What the server sends back: replies to every op, errors, the push.
  std::string replies;
  Reply r;
  r.values = {"ddprun-rendezvous"};
  protocol::encodeReply(replies, 1, Op::kHello, r);
  protocol::encodeReply(replies, 2, Op::kSet, Reply{});
  r.values = {"v"};
  protocol::encodeReply(replies, 3, Op::kGet, r);
  r.values = {"1", "", "3"};
  protocol::encodeReply(replies, 4, Op::kMultiGet, r);
  Reply integer;
  integer.integer = 42;
  protocol::encodeReply(replies, 5, Op::kAdd, integer);
  Reply flag;
  flag.flag = true;
  protocol::encodeReply(replies, 6, Op::kCheck, flag);
  protocol::encodeError(replies, 7, Status::kTimeout, "WAIT timed out waiting for key 'a'");
  protocol::encodeError(replies, 0, Status::kGoodbye, "idle for 3600000 ms; reconnect to continue");
  Reply joined;
  joined.assignment = {2, 1, 2, 8, 16, 1, "10.0.0.1", 29500};
  protocol::encodeReply(replies, 8, Op::kJoin, joined);
  Reply progress;
  progress.rendezvous = {true, 1, false, 2, 2, 4, 5000, 1, {"node rank 3"}};
  protocol::encodeReply(replies, 9, Op::kRendezvousStatus, progress);
  protocol::encodeClosed(replies, 10, "the rendezvous is closed: the job failed",
                         {137, "rank 5 was killed by SIGKILL"});
  all.emplace_back("server_replies", replies);

  // Broken streams: the decoder must refuse them without harm.
  std::string unknownOp = hello();
  protocol::appendHeader(unknownOp, 2, 0xEE, 0);
  all.emplace_back("unknown_op", unknownOp);

  std::string truncated = hello();
  put(truncated, 2, make(Op::kSet, {"key"}, {"value"}));
  truncated.resize(truncated.size() - 3);
  all.emplace_back("truncated_frame", truncated);

  std::string oversized = hello();
  protocol::appendHeader(oversized, 2, static_cast<std::uint8_t>(Op::kSet), 0xFFFFFFFFu);
  all.emplace_back("oversized_frame", oversized);

  std::string manyKeys = hello();
  protocol::appendHeader(manyKeys, 2, static_cast<std::uint8_t>(Op::kCheck), 4);
  manyKeys += std::string("\xFF\xFF\xFF\x7F", 4);  // 2^31 - 1 keys in 0 bytes
  all.emplace_back("key_count_too_large", manyKeys);

  return all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " DIRECTORY\n"
              << "Writes the seed corpus of frame_decoder_fuzz into DIRECTORY.\n";
    return 2;
  }
  for (const auto& [name, bytes] : seeds()) {
    const std::string path = std::string(argv[1]) + "/" + name + ".bin";
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!file) {
      std::cerr << "cannot write " << path << "\n";
      return 1;
    }
    std::cout << path << " (" << bytes.size() << " bytes)\n";
  }
  return 0;
}
