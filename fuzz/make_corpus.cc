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
using protocol::Request;
using protocol::Status;

std::string hello() {
  std::string out(protocol::kPreamble);
  protocol::encodeRequest(out, 1, protocol::Hello{.token = "s3cret", .clientName = "worker-0"});
  return out;
}

void put(std::string& out, std::uint32_t id, const Request& r) {
  protocol::encodeRequest(out, id, r);
}

std::vector<std::pair<std::string, std::string>> seeds() {
  std::vector<std::pair<std::string, std::string>> all;

  all.emplace_back("hello", hello());

  std::string setGet = hello();
  put(setGet, 2, protocol::Set{.key = "k", .value = "v"});
  put(setGet, 3, protocol::Get{.key = "k", .timeoutMs = 1000});
  all.emplace_back("hello_set_get", setGet);

  std::string everyOp = hello();
  std::uint32_t id = 2;
  put(everyOp, id++, protocol::Set{.key = "rank/0", .value = "10.0.0.1:29500"});
  put(everyOp, id++, protocol::Append{.key = "log", .value = "line\n"});
  put(everyOp, id++, protocol::Add{.key = "counter", .delta = -5});
  put(everyOp, id++, protocol::CompareSet{.key = "leader", .expected = "", .desired = "node-1"});
  put(everyOp, id++, protocol::Check{.keys = {"a", "b"}});
  put(everyOp, id++, protocol::Wait{.timeoutMs = protocol::kNoTimeout, .keys = {"a", "b", "a"}});
  put(everyOp, id++, protocol::DeleteKey{.key = "a"});
  put(everyOp, id++, protocol::NumKeys{});
  put(everyOp, id++, protocol::MultiGet{.timeoutMs = 0, .keys = {"x", "y"}});
  put(everyOp, id++, protocol::MultiSet{.keys = {"x", "y", "z"}, .values = {"1", "", "3"}});
  put(everyOp, id++, protocol::Ping{.payload = "echo"});
  all.emplace_back("every_op", everyOp);

  // Frames without the preamble, as the decoder sees them after it.
  std::string bare;
  put(bare, 7, protocol::MultiSet{.keys = {"k1", "k2"}, .values = {"v1", "v2"}});
  put(bare, 8, protocol::Wait{.timeoutMs = 0, .keys = {}});
  put(bare, 9, protocol::Ping{.payload = ""});
  all.emplace_back("bare_frames", bare);

  // An agent's rendezvous calls.
  std::string agent = hello();
  put(agent, 2,
      protocol::JoinRequest{.rdzvId = "job",
                            .nodeId = "node-a",
                            .nodeRank = 0,
                            .localWorldSize = 8,
                            .minNodes = 2,
                            .maxNodes = 4,
                            .lastCallMs = 30000,
                            .keepAliveMs = 15000,
                            .timeoutMs = 600000,
                            .address = "10.0.0.7",
                            .masterPort = 29511,
                            .maxRestarts = 3});
  put(agent, 3,
      protocol::ReportFailure{{"job", "node-a", 1, 3, 137, "rank 5 was killed by SIGKILL"}});
  put(agent, 4, protocol::Leave{{"job", "node-a", 1, 0, 0, ""}});
  put(agent, 5, protocol::RendezvousStatusQuery{"job"});
  all.emplace_back("rendezvous_calls", agent);

  // What the server sends back: replies to every op, errors, the push.
  std::string replies;
  protocol::encodeReply(replies, 1, protocol::HelloReply{1, "ddprun-rendezvous"});
  protocol::encodeReply(replies, 2, protocol::EmptyReply{});
  protocol::encodeReply(replies, 3, protocol::ValueReply{"v"});
  protocol::encodeReply(replies, 4, protocol::ValuesReply{{"1", "", "3"}});
  protocol::encodeReply(replies, 5, protocol::IntegerReply{42});
  protocol::encodeReply(replies, 6, protocol::FlagReply{true});
  protocol::encodeError(replies, 7, Status::kTimeout, "WAIT timed out waiting for key 'a'");
  protocol::encodeError(replies, 0, Status::kGoodbye, "idle for 3600000 ms; reconnect to continue");
  protocol::encodeReply(replies, 8, protocol::Assignment{2, 1, 2, 8, 16, 1, "10.0.0.1", 29500});
  protocol::encodeReply(
      replies, 9, protocol::RendezvousStatus{true, 1, false, 2, 2, 4, 5000, 1, {"node rank 3"}});
  protocol::encodeReply(replies, 11, protocol::RestartDecision{1, true});
  protocol::encodeClosed(replies, 10, "the rendezvous is closed: the job failed",
                         {137, "rank 5 was killed by SIGKILL"});
  all.emplace_back("server_replies", replies);

  // Broken streams: the decoder must refuse them without harm.
  std::string unknownOp = hello();
  protocol::appendHeader(unknownOp, 2, 0xEE, 0);
  all.emplace_back("unknown_op", unknownOp);

  std::string truncated = hello();
  put(truncated, 2, protocol::Set{.key = "key", .value = "value"});
  truncated.resize(truncated.size() - 3);
  all.emplace_back("truncated_frame", truncated);

  std::string oversized = hello();
  protocol::appendHeader(oversized, 2, static_cast<std::uint8_t>(protocol::Op::kSet), 0xFFFFFFFFu);
  all.emplace_back("oversized_frame", oversized);

  std::string manyKeys = hello();
  protocol::appendHeader(manyKeys, 2, static_cast<std::uint8_t>(protocol::Op::kCheck), 4);
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
