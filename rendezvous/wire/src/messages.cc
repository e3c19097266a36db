#include "ddprun/rendezvous/messages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ddprun/common/logging.h"
#include "ddprun/common/secret.h"
#include "ddprun/common/signal_names.h"

namespace ddprun::rendezvous::protocol {

const char* opName(Op op) {
  switch (op) {
    case Op::kHello:
      return "HELLO";
    case Op::kSet:
      return "SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kCheck:
      return "CHECK";
    case Op::kWait:
      return "WAIT";
    case Op::kDeleteKey:
      return "DELETE_KEY";
    case Op::kNumKeys:
      return "NUM_KEYS";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kMultiSet:
      return "MULTI_SET";
    case Op::kAppend:
      return "APPEND";
    case Op::kPing:
      return "PING";
    case Op::kJoin:
      return "JOIN";
    case Op::kLeave:
      return "LEAVE";
    case Op::kReportFailure:
      return "REPORT_FAILURE";
    case Op::kRendezvousStatus:
      return "RENDEZVOUS_STATUS";
    case Op::kQueuePush:
      return "QUEUE_PUSH";
    case Op::kQueuePop:
      return "QUEUE_POP";
    case Op::kQueueLen:
      return "QUEUE_LEN";
    case Op::kListKeys:
      return "LIST_KEYS";
    case Op::kBarrier:
      return "BARRIER";
    case Op::kSharedWait:
      return "SHARED_WAIT";
    case Op::kCancel:
      return "CANCEL";
  }
  return "UNKNOWN";
}

const char* statusName(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kTimeout:
      return "timeout";
    case Status::kAuthFailed:
      return "authentication failed";
    case Status::kBadRequest:
      return "bad request";
    case Status::kTooLarge:
      return "too large";
    case Status::kUnsupportedVersion:
      return "unsupported protocol version";
    case Status::kNotInteger:
      return "not an integer";
    case Status::kStoreFull:
      return "store full";
    case Status::kGoodbye:
      return "goodbye";
    case Status::kEvent:
      return "event";
    case Status::kClosed:
      return "rendezvous closed";
    case Status::kExcluded:
      return "node excluded";
  }
  return "unknown status";
}

bool isKnownOp(std::uint8_t code) {
  return code >= static_cast<std::uint8_t>(Op::kHello) &&
         code <= static_cast<std::uint8_t>(Op::kCancel);
}

std::string missingNodesText(const RendezvousStatus& status) {
  if (status.missingCount == 0) return "";
  std::string text = "; missing: ";
  for (std::size_t i = 0; i < status.missing.size(); ++i) {
    if (i > 0) text += ", ";
    text += status.missing[i];
  }
  if (status.missingCount > status.missing.size()) {
    text += fmt::format(" and {} more", status.missingCount - status.missing.size());
  }
  return text;
}

std::string nodeText(std::string_view nodeId, std::string_view address, std::int64_t nodeRank) {
  return fmt::format("node {} at {}{}", printable(nodeId), printable(address),
                     nodeRank >= 0 ? fmt::format(", node rank {}", nodeRank) : "");
}

std::string lostNodeText(std::string_view nodeId, std::string_view address, std::int64_t nodeRank,
                         std::string_view reason) {
  return fmt::format("{}, lost ({})", nodeText(nodeId, address, nodeRank), printable(reason, 200));
}

std::string leftJobText(std::int64_t exitCode) {
  return fmt::format("it left the job (its ddprun exits with code {}{})", exitCode,
                     exitCode > 128 && exitCode < 128 + 65
                         ? ", " + signalName(static_cast<int>(exitCode - 128))
                         : std::string());
}

std::string lostNodesReport(const std::vector<std::string>& lost, std::uint32_t fixedNodes,
                            std::uint32_t minNodes) {
  const std::size_t left = fixedNodes - std::min<std::size_t>(fixedNodes, lost.size());
  return fmt::format(
      "the job lost {}: {}. Its nodes are a fixed set (a Slurm job step's {}), so a lost node "
      "never returns, and {} of them {} left, fewer than the minimum of {}; the job ends now "
      "instead of waiting for it",
      lost.size() == 1 ? "a node" : fmt::format("{} nodes", lost.size()), fmt::join(lost, "; "),
      fixedNodes, left, left == 1 ? "is" : "are", minNodes);
}

HelloVerdict judgeHello(const Hello& hello, std::string_view storeToken) {
  HelloVerdict verdict;
  if (hello.version < kMinVersion || hello.version > kVersion) {
    verdict.status = Status::kUnsupportedVersion;
    verdict.message = fmt::format(
        "it speaks protocol version {} and this server speaks {} to {}; use a ddprun client of "
        "the same release",
        hello.version, kMinVersion, kVersion);
  } else if (storeToken.empty() || constantTimeEquals(hello.token, storeToken)) {
    verdict.agent = true;
  } else if (auto job = workerCredentialJob(hello.token, storeToken)) {
    verdict.workerJob = std::move(*job);
  } else {
    verdict.status = Status::kAuthFailed;
    verdict.message =
        hello.token.empty()
            ? "it sent no token and this store requires one; export the same DDPRUN_TOKEN (or "
              "token file) on every node"
            : "its token is wrong; give every node the same DDPRUN_TOKEN (or token file)";
  }
  return verdict;
}

std::string keyRefusal(std::string_view key, bool agent, std::string_view workerJob) {
  if (isControlKey(key) && !agent) {
    return fmt::format(
        "key '{}' is one of ddprun's control keys, which only agents (the full token) may use",
        printable(key));
  }
  if (!workerJob.empty() &&
      (key.size() <= workerJob.size() || key.compare(0, workerJob.size(), workerJob) != 0 ||
       key[workerJob.size()] != '/')) {
    return fmt::format(
        "key '{}' is outside this worker's job: a worker credential reaches only keys under '{}/'",
        printable(key), printable(workerJob));
  }
  return "";
}

std::string timeoutText(Op op, const std::vector<std::string>& missing) {
  std::string keys;
  for (const auto& key : missing) {
    if (!keys.empty()) keys += "', '";
    keys += key;
  }
  return fmt::format("{} timed out waiting for key '{}'", opName(op), keys);
}

std::uint32_t toTimeoutMs(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return 0;
  if (timeout.count() >= static_cast<std::int64_t>(kNoTimeout)) return kNoTimeout;
  return static_cast<std::uint32_t>(timeout.count());
}

}  // namespace ddprun::rendezvous::protocol
