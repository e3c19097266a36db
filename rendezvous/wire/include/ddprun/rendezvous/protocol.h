// The ddprun native store protocol: pure encoding and decoding, no I/O.
//
// docs/protocol.md is the specification; this file is its implementation.
// In short: a client opens a connection with the 4-byte preamble "DDPR" and
// a HELLO frame carrying its protocol version and the token. After that,
// both sides exchange frames
//
//     u32 body_size | u32 request_id | u8 code | body (body_size bytes)
//
// (all integers little-endian). In a request `code` is an Op; in a reply it
// is a Status and the request id is echoed, so one connection can carry
// several requests at once (a heartbeat while a WAIT is pending). Request id
// 0 is reserved for frames the server pushes on its own (kGoodbye).
//
// Everything here works on byte strings (std::string / std::string_view) and
// never allocates more than the bytes actually present: sizes claimed in a
// header are checked against Limits before anything is reserved.
//
// Thread-safety: free functions and plain structs, no shared state.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::rendezvous::protocol {

inline constexpr std::string_view kPreamble = "DDPR";
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::size_t kHeaderSize = 9;
// A timeout field of this value means "wait without limit".
inline constexpr std::uint32_t kNoTimeout = 0xFFFFFFFFu;

// Operations a client can ask for. The numbers are part of the wire format.
enum class Op : std::uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kCheck = 6,
  kWait = 7,
  kDeleteKey = 8,
  kNumKeys = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kAppend = 12,
  kPing = 13,
  // Rendezvous (docs/protocol.md, "Rendezvous"): computed in the server.
  kJoin = 14,              // blocks until the node's round is complete
  kLeave = 15,             // the node is done; the round goes on for the others
  kReportFailure = 16,     // a worker failed: end the round, or fail the job
  kRendezvousStatus = 17,  // who has joined the round being formed (progress)
};

// Reply codes. Anything but kOk carries a human-readable message as body.
enum class Status : std::uint8_t {
  kOk = 0,
  kTimeout = 1,             // a blocking request's timeout passed on the server
  kAuthFailed = 2,          // wrong or missing token; the server then closes
  kBadRequest = 3,          // malformed body, unknown op, handshake missing
  kTooLarge = 4,            // a key, value, count or frame over the limits
  kUnsupportedVersion = 5,  // HELLO asked for a version the server lacks
  kNotInteger = 6,          // ADD on a value that is not a decimal integer
  kStoreFull = 7,           // the store's total size limit would be passed
  kGoodbye = 8,             // pushed (request id 0) before the server closes
  kEvent = 9,               // pushed (request id 0): a rendezvous event
  kClosed = 10,             // the rendezvous is closed (the job failed or ended)
};

// What a kEvent push says.
enum class EventType : std::uint8_t {
  kRoundEnded = 1,  // stop the workers and join again (failure or membership change)
  kJobFailed = 2,   // no restarts left: stop the workers and report `report`
};

const char* opName(Op op);
const char* statusName(Status status);
bool isKnownOp(std::uint8_t code);

// Size limits, enforced when decoding (server) and before sending (client).
struct Limits {
  std::size_t maxKeyBytes = 64 * 1024;
  std::size_t maxValueBytes = 32 * 1024 * 1024;
  std::size_t maxFrameBytes = 64 * 1024 * 1024;
  std::size_t maxKeysPerRequest = 1 << 20;
};

struct FrameHeader {
  std::uint32_t bodySize = 0;
  std::uint32_t requestId = 0;
  std::uint8_t code = 0;
};

// One request, flat: which fields are used depends on `op` (see protocol.md);
// each op's layout (its request and reply, written and read) is one entry
// of the table in protocol.cc.
//   kHello:      version, values[0] = token, keys[0] = client name
//   kSet/kAppend: keys[0], values[0]
//   kGet:        keys[0], timeout
//   kAdd:        keys[0], delta
//   kCompareSet: keys[0], values[0] = expected, values[1] = desired
//   kCheck:      keys
//   kWait/kMultiGet: keys, timeout
//   kDeleteKey:  keys[0]
//   kMultiSet:   keys[i] -> values[i]
//   kPing:       values[0] = payload echoed back
// A node's request to join rendezvous `rdzvId` (kJoin).
struct JoinRequest {
  std::string rdzvId;
  std::string nodeId;          // unique per agent process
  std::int64_t nodeRank = -1;  // requested group rank, -1: by arrival
  std::uint32_t localWorldSize = 1;
  std::uint32_t minNodes = 1;
  std::uint32_t maxNodes = 1;
  std::uint32_t lastCallMs = 0;   // wait for more nodes after min joined
  std::uint32_t keepAliveMs = 0;  // silence after which the node is dead, 0: never
  std::string address;            // address workers use for this node; empty: peer address
  std::uint32_t masterPort = 0;   // a free port on this node, used if it gets rank 0
  // The job-wide restart budget: fixed by the JOIN that creates the
  // rendezvous; later JOINs must agree and REPORT_FAILURE cannot change it.
  std::int64_t maxRestarts = 0;
};

// The server's answer when the round completes.
struct Assignment {
  std::int64_t round = 0;
  std::uint32_t groupRank = 0;
  std::uint32_t groupWorldSize = 1;
  std::uint32_t rankOffset = 0;
  std::uint32_t worldSize = 1;
  std::int64_t restarts = 0;  // failure restarts used by the job so far
  std::string masterAddr;
  std::uint32_t masterPort = 0;
};

// The kRendezvousStatus reply: the round being formed, for a waiting node's
// progress line and timeout message.
struct RendezvousStatus {
  bool exists = false;     // false: no node has joined rendezvous `rdzvId` yet
  std::int64_t round = 0;  // rounds completed so far
  bool running = false;    // a round is complete and its workers run
  std::uint32_t joined = 0;
  std::uint32_t minNodes = 0;
  std::uint32_t maxNodes = 0;
  std::int64_t lastCallMs = -1;      // until the last call ends; -1: not counting
  std::uint32_t missingCount = 0;    // nodes known to be missing (0: unknown)
  std::vector<std::string> missing;  // the first kMaxMissingShown of them, described
};
inline constexpr std::size_t kMaxMissingShown = 16;

// "; missing: node rank 1, node rank 3 and 97 more", or "" when no node is
// known to be missing: the same words in the server's timeout and the
// agent's progress line.
std::string missingNodesText(const RendezvousStatus& status);

// The CLOSED reply's typed part: how the job failed.
struct JobFailure {
  std::int64_t exitCode = 1;
  std::string report;  // the failing node's root-cause report
};

// kLeave and kReportFailure.
struct NodeReport {
  std::string rdzvId;
  std::string nodeId;
  std::int64_t round = 0;
  std::int64_t maxRestarts = 0;  // unused by the server (the JOIN fixed the budget)
  std::int64_t exitCode = 0;     // kReportFailure: the root cause's code
  std::string report;            // kReportFailure: the root-cause report text
};

// Control keys: the server's own, which only agents (the full token) may
// touch (docs/security.md).
inline constexpr std::string_view kControlKeyPrefix = "__ddprun/";
inline bool isControlKey(std::string_view key) {
  return key.substr(0, kControlKeyPrefix.size()) == kControlKeyPrefix;
}

// The control key the server sets once every node of rendezvous `rdzvId`
// has left, so the agent hosting the store can WAIT for it before shutting
// down.
inline std::string rendezvousFinishedKey(std::string_view rdzvId) {
  return std::string(kControlKeyPrefix) + "rendezvous/" + std::string(rdzvId) + "/finished";
}

// A kEvent push.
struct Event {
  EventType type = EventType::kRoundEnded;
  std::string rdzvId;
  std::int64_t round = 0;
  std::int64_t exitCode = 0;
  std::string message;  // why the round ended, or the job's failure report
};

struct Request {
  Op op = Op::kPing;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t delta = 0;
  std::uint32_t timeoutMs = 0;
  std::uint16_t version = kVersion;
  JoinRequest join;    // kJoin
  NodeReport node;     // kLeave, kReportFailure
  std::string rdzvId;  // kRendezvousStatus
};

// One reply, flat: which fields are used depends on the request's op.
//   kOk:  kHello -> version, values[0] = server name; kGet/kCompareSet/kPing
//         -> values[0]; kMultiGet -> values; kAdd/kNumKeys -> integer;
//         kCheck/kDeleteKey -> flag.
//   else: message.
struct Reply {
  Status status = Status::kOk;
  std::string message;
  std::vector<std::string> values;
  std::int64_t integer = 0;
  bool flag = false;
  std::uint16_t version = kVersion;
  Assignment assignment;        // kJoin
  RendezvousStatus rendezvous;  // kRendezvousStatus
  JobFailure failure;           // status kClosed
};

// Converts a duration to the wire's timeout field (clamped; negative -> 0).
std::uint32_t toTimeoutMs(std::chrono::milliseconds timeout);

// --- framing ---------------------------------------------------------------

enum class ParseResult { kNeedMore, kFrame, kTooLarge };

// Looks at the front of `input`. kFrame: `header` is filled and the whole
// body (header.bodySize bytes after kHeaderSize) is present. kTooLarge: the
// header claims a body over `maxFrameBytes` (header is still filled).
ParseResult parseFrameHeader(std::string_view input, std::size_t maxFrameBytes,
                             FrameHeader& header);

void appendHeader(std::string& out, std::uint32_t requestId, std::uint8_t code,
                  std::uint32_t bodySize);

// --- requests --------------------------------------------------------------

// Appends the framed request to `out`.
void encodeRequest(std::string& out, std::uint32_t requestId, const Request& request);

// Result of decoding: kOk, or an error status and a message for the reply.
struct DecodeError {
  Status status = Status::kOk;
  std::string message;
  bool ok() const { return status == Status::kOk; }
};

// Decodes the body of a request frame whose header code is `code`.
DecodeError decodeRequest(std::uint8_t code, std::string_view body, const Limits& limits,
                          Request& request);

// --- replies ---------------------------------------------------------------

// Appends a framed kOk reply to a request of kind `op`.
void encodeReply(std::string& out, std::uint32_t requestId, Op op, const Reply& reply);

// Appends a framed error reply (any status but kOk) with its message.
// Appends a CLOSED reply: the message, then the job's exit code and report
// (docs/protocol.md §10b), typed instead of packed into the text.
void encodeClosed(std::string& out, std::uint32_t requestId, std::string_view message,
                  const JobFailure& failure);

void encodeError(std::string& out, std::uint32_t requestId, Status status,
                 std::string_view message);

// Appends a kEvent push (request id 0).
void encodeEvent(std::string& out, const Event& event);
// Decodes the body of a kEvent push.
bool decodeEvent(std::string_view body, Event& event);

// Decodes a reply frame to a request of kind `op`. Returns false (with
// `error` set) when the body does not match the op's reply layout.
bool decodeReply(Op op, std::uint8_t code, std::string_view body, Reply& reply, std::string& error);

}  // namespace ddprun::rendezvous::protocol
