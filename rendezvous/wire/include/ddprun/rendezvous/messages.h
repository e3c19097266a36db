// The native protocol's vocabulary: the ops and reply statuses, and one
// typed message per op with the type of its OK reply (docs/protocol.md §5
// and §10b, field for field in wire order). protocol.h encodes, decodes
// and checks them; this header is only data.
//
// Thread-safety: plain structs and free functions, no shared state.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ddprun::rendezvous::protocol {

// Version 2: JOIN carries the restart budget, CLOSED the job's outcome as
// fields, and RENDEZVOUS_STATUS exists. Version 3: JOIN carries
// max_node_failures and node_cooldown_ms, EXCLUDED and the
// NODE_EXCLUDED/NODE_READMITTED events exist. Older peers are refused at
// HELLO (their JOIN would not decode). Version 4: RENDEZVOUS_STATUS may ask
// for details (members, restarts, the last failure) for `ddprun status`.
// Version 6: every op of PyTorch's TCPStore (queues, LIST_KEYS, BARRIER),
// SHARED_WAIT and CANCEL, for the node relay; a version 5 client is still
// served (it never sends them). Version 7: REPORT_FAILURE ends with u8
// give_up (a crash loop fails the job); a version 5/6 body ends before it.
inline constexpr std::uint16_t kVersion = 8;
inline constexpr std::uint16_t kMinVersion = 5;
// A timeout field of this value means "wait without limit".
inline constexpr std::uint32_t kNoTimeout = 0xFFFFFFFFu;
// GET and MULTI_GET's timeout field of this value: answer at once, a
// missing key reads as empty (TCPStore's GET).
inline constexpr std::uint32_t kNoWait = 0xFFFFFFFEu;

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
  // PyTorch TCPStore's remaining ops (version 6), for the node relay.
  kQueuePush = 18,
  kQueuePop = 19,  // never waits
  kQueueLen = 20,
  kListKeys = 21,
  kBarrier = 22,     // one arrival; answered when the count reaches the world size
  kSharedWait = 23,  // WAIT that says whether a key write or a queue push ended it
  kCancel = 24,      // drops a pending wait, GET, MULTI_GET or BARRIER of this connection
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
  kExcluded = 11,           // JOIN: this node's host is excluded for a cooldown
};

// What a kEvent push says.
enum class EventType : std::uint8_t {
  kRoundEnded = 1,      // stop the workers and join again (failure or membership change)
  kJobFailed = 2,       // no restarts left: stop the workers and report `report`
  kNodeExcluded = 3,    // a host failed in too many rounds in a row: left out for a cooldown
  kNodeReadmitted = 4,  // that host's cooldown ended
};

const char* opName(Op op);
const char* statusName(Status status);
bool isKnownOp(std::uint8_t code);

// One request type per op, each naming the type of its OK reply (`Reply`):
// protocol.md §5 and §10b field for field, in wire order. Each type's
// layout (written, read, and checked against Limits) is one `fields()`
// function in protocol.cc.

// The OK reply bodies.
struct EmptyReply {
  bool operator==(const EmptyReply&) const = default;
};
struct ValueReply {
  std::string value;
  bool operator==(const ValueReply&) const = default;
};
struct ValuesReply {
  std::vector<std::string> values;
  bool operator==(const ValuesReply&) const = default;
};
struct IntegerReply {
  std::int64_t value = 0;
  bool operator==(const IntegerReply&) const = default;
};
struct FlagReply {
  bool value = false;
  bool operator==(const FlagReply&) const = default;
};
// QUEUE_POP: the queue's length before the pop (0: it was empty and
// `value` is empty), and the value taken.
struct QueuePopReply {
  std::int64_t length = 0;
  std::string value;
  bool operator==(const QueuePopReply&) const = default;
};
struct HelloReply {
  std::uint16_t version = kVersion;
  std::string serverName;
  bool operator==(const HelloReply&) const = default;
};
// The server's answer to JOIN when the round completes.
struct Assignment {
  std::int64_t round = 0;
  std::uint32_t groupRank = 0;
  std::uint32_t groupWorldSize = 1;
  std::uint32_t rankOffset = 0;
  std::uint32_t worldSize = 1;
  std::int64_t restarts = 0;  // failure restarts used by the job so far
  std::string masterAddr;
  std::uint32_t masterPort = 0;
  bool operator==(const Assignment&) const = default;
};
// REPORT_FAILURE's answer.
struct RestartDecision {
  std::int64_t restarts = 0;  // failure restarts used by the job so far
  bool restartAllowed = false;
  bool operator==(const RestartDecision&) const = default;
};
// One node of a rendezvous, as RENDEZVOUS_STATUS's details list it.
struct RendezvousMember {
  std::string nodeId;
  std::string address;          // where its workers are reached
  std::int64_t groupRank = -1;  // in the running round; -1: waiting to join
  std::uint32_t localWorldSize = 1;
  bool operator==(const RendezvousMember&) const = default;
};
// The job's latest worker failure (REPORT_FAILURE), for operators.
struct FailureSummary {
  std::string nodeId;      // empty: no failure yet
  std::int64_t round = 0;  // the round it failed in
  std::int64_t exitCode = 0;
  std::int64_t failedAtMs = 0;  // Unix ms, the failing node's clock
  std::string report;           // the root-cause report's text
  bool operator==(const FailureSummary&) const = default;
};

// RENDEZVOUS_STATUS's answer: the round being formed, for a waiting node's
// progress line and timeout message; with details, also the members, the
// restart budget and the last failure (`ddprun status`).
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
  // Details (only when asked for; else empty and zero).
  bool closed = false;  // the job failed: no restarts left
  std::int64_t restarts = 0;
  std::int64_t maxRestarts = 0;
  std::vector<RendezvousMember> members;  // running round by group rank, then waiting
  FailureSummary lastFailure;
  bool operator==(const RendezvousStatus&) const = default;
};
inline constexpr std::size_t kMaxMissingShown = 16;

// "; missing: node rank 1, node rank 3 and 97 more", or "" when no node is
// known to be missing: the same words in the server's timeout and the
// agent's progress line.
std::string missingNodesText(const RendezvousStatus& status);

// "node node2:4121:ab12cd at 10.0.0.2, node rank 1": a node as waiting
// and failure messages name it (the node id begins with its host's name;
// nodeRank -1: none known). Each part is made printable: it came from
// another node.
std::string nodeText(std::string_view nodeId, std::string_view address, std::int64_t nodeRank);

// "node node2:4121:ab12cd at 10.0.0.2, node rank 1, lost (connection
// closed)": a node lost without leaving, as the c10d store and etcd name it
// (the node id begins with its host's name; nodeRank -1: none asked for).
// Each part is made printable: it came from another node.
std::string lostNodeText(std::string_view nodeId, std::string_view address, std::int64_t nodeRank,
                         std::string_view reason);

// Why a node that LEAVEs with a non-zero `exitCode` is lost to the others:
// "it left the job (its ddprun exits with code 143, SIGTERM)".
std::string leftJobText(std::int64_t exitCode);

// The report of a job whose nodes are a fixed set (a Slurm job step's
// `fixedNodes`) that lost `lost` (lostNodeText()s) and so can no longer
// reach `minNodes`: "the job lost a node: ... Its nodes are a fixed set ...;
// the job ends now instead of waiting for it" (no prefix, no full stop).
// The same words from the c10d store and from etcd.
std::string lostNodesReport(const std::vector<std::string>& lost, std::uint32_t fixedNodes,
                            std::uint32_t minNodes);

// HELLO: the agents' token or a worker credential; the name is for logs.
struct Hello {
  static constexpr Op kOp = Op::kHello;
  using Reply = HelloReply;
  std::uint16_t version = kVersion;
  std::string token;
  std::string clientName;
  bool operator==(const Hello&) const = default;
};
struct Set {
  static constexpr Op kOp = Op::kSet;
  using Reply = EmptyReply;
  std::string key;
  std::string value;
  bool operator==(const Set&) const = default;
};
struct Get {
  static constexpr Op kOp = Op::kGet;
  using Reply = ValueReply;
  std::string key;
  std::uint32_t timeoutMs = 0;
  bool operator==(const Get&) const = default;
};
struct Add {
  static constexpr Op kOp = Op::kAdd;
  using Reply = IntegerReply;  // the sum
  std::string key;
  std::int64_t delta = 0;
  bool operator==(const Add&) const = default;
};
struct CompareSet {
  static constexpr Op kOp = Op::kCompareSet;
  using Reply = ValueReply;  // the value now
  std::string key;
  std::string expected;
  std::string desired;
  bool operator==(const CompareSet&) const = default;
};
struct Check {
  static constexpr Op kOp = Op::kCheck;
  using Reply = FlagReply;  // all present
  std::vector<std::string> keys;
  bool operator==(const Check&) const = default;
};
struct Wait {
  static constexpr Op kOp = Op::kWait;
  using Reply = EmptyReply;
  std::uint32_t timeoutMs = 0;
  std::vector<std::string> keys;
  bool operator==(const Wait&) const = default;
};
struct DeleteKey {
  static constexpr Op kOp = Op::kDeleteKey;
  using Reply = FlagReply;  // it existed
  std::string key;
  bool operator==(const DeleteKey&) const = default;
};
struct NumKeys {
  static constexpr Op kOp = Op::kNumKeys;
  using Reply = IntegerReply;
  bool operator==(const NumKeys&) const = default;
};
struct MultiGet {
  static constexpr Op kOp = Op::kMultiGet;
  using Reply = ValuesReply;  // one per key, in order
  std::uint32_t timeoutMs = 0;
  std::vector<std::string> keys;
  bool operator==(const MultiGet&) const = default;
};
// keys[i] -> values[i]: both have the same length.
struct MultiSet {
  static constexpr Op kOp = Op::kMultiSet;
  using Reply = EmptyReply;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  bool operator==(const MultiSet&) const = default;
};
struct Append {
  static constexpr Op kOp = Op::kAppend;
  using Reply = EmptyReply;
  std::string key;
  std::string value;
  bool operator==(const Append&) const = default;
};
struct Ping {
  static constexpr Op kOp = Op::kPing;
  using Reply = ValueReply;  // the payload, echoed
  std::string payload;
  bool operator==(const Ping&) const = default;
};

// Queues (PyTorch 2.8+): a queue lives beside the keys under its own name;
// a non-empty one counts as present for WAIT and CHECK, and a push wakes
// the oldest waiter it makes ready (docs/protocol.md "Queues and barriers").
struct QueuePush {
  static constexpr Op kOp = Op::kQueuePush;
  using Reply = EmptyReply;
  std::string key;
  std::string value;
  bool operator==(const QueuePush&) const = default;
};
struct QueuePop {
  static constexpr Op kOp = Op::kQueuePop;
  using Reply = QueuePopReply;
  std::string key;
  bool operator==(const QueuePop&) const = default;
};
struct QueueLen {
  static constexpr Op kOp = Op::kQueueLen;
  using Reply = IntegerReply;
  std::string key;
  bool operator==(const QueueLen&) const = default;
};
// Every key this client may see (not the queues).
struct ListKeys {
  static constexpr Op kOp = Op::kListKeys;
  using Reply = ValuesReply;
  bool operator==(const ListKeys&) const = default;
};
// One arrival at the barrier `key` of `worldSize` (PyTorch's BARRIER):
// answered once the count at `key` reaches it. A cancelled arrival counts.
struct Barrier {
  static constexpr Op kOp = Op::kBarrier;
  using Reply = EmptyReply;
  std::string key;
  std::int64_t worldSize = 0;
  std::uint32_t timeoutMs = 0;
  bool operator==(const Barrier&) const = default;
};
// WAIT, answered with how it ended: true when every key is present as a
// key (a write wakes every waiter), false when a queue made it ready (a
// push wakes one). The relay wakes all its callers, or only the oldest.
struct SharedWait {
  static constexpr Op kOp = Op::kSharedWait;
  using Reply = FlagReply;
  std::uint32_t timeoutMs = 0;
  std::vector<std::string> keys;
  bool operator==(const SharedWait&) const = default;
};
// Drops this connection's pending GET, WAIT, MULTI_GET, SHARED_WAIT or
// BARRIER `requestId`: true, and that request gets no reply; false when
// none is pending under that id (its reply went before this one).
struct Cancel {
  static constexpr Op kOp = Op::kCancel;
  using Reply = FlagReply;
  std::uint32_t requestId = 0;
  bool operator==(const Cancel&) const = default;
};

// JOIN: a node asks to join rendezvous `rdzvId`; answered when its round
// is complete.
struct JoinRequest {
  static constexpr Op kOp = Op::kJoin;
  using Reply = Assignment;
  std::string rdzvId;
  std::string nodeId;          // unique per agent process
  std::int64_t nodeRank = -1;  // requested group rank, -1: by arrival
  std::uint32_t localWorldSize = 1;
  std::uint32_t minNodes = 1;
  std::uint32_t maxNodes = 1;
  std::uint32_t lastCallMs = 0;   // wait for more nodes after min joined
  std::uint32_t keepAliveMs = 0;  // silence after which the node is dead, 0: never
  std::uint32_t timeoutMs = 0;    // how long the server waits for the round
  std::string address;            // address workers use for this node; empty: peer address
  std::uint32_t masterPort = 0;   // a free port on this node, used if it gets rank 0
  // The job-wide restart budget: fixed by the JOIN that creates the
  // rendezvous; later JOINs must agree and REPORT_FAILURE cannot change it.
  std::int64_t maxRestarts = 0;
  // Elastic jobs: a host (address) whose workers failed in this many
  // rounds in a row is refused for nodeCooldownMs. 0: never. Fixed by the
  // JOIN that creates the rendezvous.
  std::uint32_t maxNodeFailures = 0;
  std::uint32_t nodeCooldownMs = 0;
  // The nodes that can ever take part (a Slurm job step's nodes): a lost
  // node never returns, so the job fails as soon as fewer than MIN of them
  // are left. 0: any node may join later. Fixed by the JOIN that creates
  // the rendezvous.
  std::uint32_t fixedNodes = 0;
  bool operator==(const JoinRequest&) const = default;
};

// What LEAVE and REPORT_FAILURE say about the node.
struct NodeReport {
  std::string rdzvId;
  std::string nodeId;
  std::int64_t round = 0;
  std::int64_t maxRestarts = 0;  // unused by the server (the JOIN fixed the budget)
  std::int64_t exitCode = 0;     // REPORT_FAILURE: the root cause's code; LEAVE: the node's
  std::string report;            // REPORT_FAILURE: the root-cause report text
  // REPORT_FAILURE: when the root cause failed (Unix ms, the node's clock):
  // the earliest failure of a round is blamed on its host, not the
  // knock-on failures of other nodes.
  std::int64_t failedAtMs = 0;
  // REPORT_FAILURE (version 7): the node's attempts made no progress for
  // --max_no_progress_restarts in a row: the job fails now with `exitCode`,
  // whatever its restart budget.
  bool giveUp = false;
  // REPORT_FAILURE (version 8): the root cause failed because a peer went
  // away (a knock-on of another node's failure): the round's blame never
  // goes to this node's host.
  bool lostAPeer = false;
  bool operator==(const NodeReport&) const = default;
};
struct Leave {
  static constexpr Op kOp = Op::kLeave;
  using Reply = EmptyReply;
  NodeReport node;
  bool operator==(const Leave&) const = default;
};
struct ReportFailure {
  static constexpr Op kOp = Op::kReportFailure;
  using Reply = RestartDecision;
  NodeReport node;
  bool operator==(const ReportFailure&) const = default;
};
struct RendezvousStatusQuery {
  static constexpr Op kOp = Op::kRendezvousStatus;
  using Reply = RendezvousStatus;
  std::string rdzvId;
  std::uint32_t details = 0;  // 1: fill the details (members: one line per node)
  bool operator==(const RendezvousStatusQuery&) const = default;
};

// Any request: alternative i is the message of op i + 1.
using Request =
    std::variant<Hello, Set, Get, Add, CompareSet, Check, Wait, DeleteKey, NumKeys, MultiGet,
                 MultiSet, Append, Ping, JoinRequest, Leave, ReportFailure, RendezvousStatusQuery,
                 QueuePush, QueuePop, QueueLen, ListKeys, Barrier, SharedWait, Cancel>;

inline Op opOf(const Request& request) { return static_cast<Op>(request.index() + 1); }

// The CLOSED reply's typed part: how the job failed.
struct JobFailure {
  std::int64_t exitCode = 1;
  std::string report;  // the failing node's root-cause report
  bool operator==(const JobFailure&) const = default;
};

// An error reply: any status but kOk, with its message (CLOSED adds the
// job's failure).
struct ErrorReply {
  Status status = Status::kBadRequest;
  std::string message;
  JobFailure failure;  // kClosed only
};

// A kEvent push.
struct Event {
  EventType type = EventType::kRoundEnded;
  std::string rdzvId;
  std::int64_t round = 0;
  std::int64_t exitCode = 0;
  std::string message;  // why the round ended, or the job's failure report
};

// Control keys: the server's own, which only agents (the full token) may
// touch (docs/security.md).
inline constexpr std::string_view kControlKeyPrefix = "__ddprun/";
inline bool isControlKey(std::string_view key) {
  return key.substr(0, kControlKeyPrefix.size()) == kControlKeyPrefix;
}

// Who a HELLO makes its client, on a store (or a node relay) whose agents'
// token is `storeToken` (empty: an open store, where everyone is an agent):
// an agent, a worker of `workerJob` (a worker credential), or refused
// (`status` not kOk, with the words the client is told).
struct HelloVerdict {
  Status status = Status::kOk;
  std::string message;
  bool agent = false;
  std::string workerJob;
};
HelloVerdict judgeHello(const Hello& hello, std::string_view storeToken);

// Why a client may not use `key`, or "" when it may: control keys are for
// agents only; a worker credential (`workerJob` not empty) reaches only
// keys under "<workerJob>/". The store's and the node relay's one rule
// (docs/security.md), refused with AUTH_FAILED.
std::string keyRefusal(std::string_view key, bool agent, std::string_view workerJob);

// The control key the server sets once every node of rendezvous `rdzvId`
// has left, so the agent hosting the store can WAIT for it before shutting
// down.
inline std::string rendezvousFinishedKey(std::string_view rdzvId) {
  return std::string(kControlKeyPrefix) + "rendezvous/" + std::string(rdzvId) + "/finished";
}

// "WAIT timed out waiting for key 'a', 'b'": a wait's timeout, the same
// words from the store and from a node's relay.
std::string timeoutText(Op op, const std::vector<std::string>& missing);

// The control keys where an agent keeps counters about its node, for
// `ddprun status` and the store's metrics: its relay's ("connections=3
// requests=48 ...") at __ddprun/relay/<rdzv id>/<node id>, its downtime's
// ("incidents=2 lost_ms=4100 ...", docs/operations.md) at
// __ddprun/downtime/<rdzv id>/<node id>.
enum class NodeCounters { kRelay, kDowntime };
constexpr std::string_view nodeCountersPrefix(NodeCounters kind) {
  return kind == NodeCounters::kRelay ? "__ddprun/relay/" : "__ddprun/downtime/";
}
inline std::string nodeCountersKey(NodeCounters kind, std::string_view rdzvId,
                                   std::string_view nodeId) {
  return std::string(nodeCountersPrefix(kind)) + std::string(rdzvId) + "/" + std::string(nodeId);
}
// The texts' encoding and its readers: ddprun/common/node_telemetry.h.

// Converts a duration to the wire's timeout field (clamped; negative -> 0).
std::uint32_t toTimeoutMs(std::chrono::milliseconds timeout);

}  // namespace ddprun::rendezvous::protocol
