#include "ddprun/rendezvous/round_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ddprun/common/logging.h"

namespace ddprun::rendezvous::policy {

std::string settingsMismatch(const std::string& rdzvId, const Settings& settings,
                             const protocol::JoinRequest& request) {
  const Settings asked = settingsOf(request);
  if (asked.minNodes != settings.minNodes || asked.maxNodes != settings.maxNodes) {
    return fmt::format(
        "rendezvous '{}' is for {}:{} nodes but this node asked for {}:{}; give every node the "
        "same --nnodes",
        printable(rdzvId), settings.minNodes, settings.maxNodes, request.minNodes,
        request.maxNodes);
  }
  if (asked.maxRestarts != settings.maxRestarts) {
    return fmt::format(
        "rendezvous '{}' has a budget of {} restarts but this node asked for {}; give every node "
        "the same --max_restarts",
        printable(rdzvId), settings.maxRestarts, request.maxRestarts);
  }
  return "";
}

std::string rankTaken(std::int64_t nodeRank, const std::string& holder) {
  return fmt::format(
      "node rank {} is already taken by node {}; give every node its own --node_rank", nodeRank,
      printable(holder));
}

std::string failedText(const std::string& nodeId, std::int64_t restarts, std::int64_t maxRestarts) {
  return fmt::format("a worker on node {} failed (restart {} of {})", printable(nodeId), restarts,
                     maxRestarts);
}

std::string lostText(const std::string& nodeId, const std::string& reason) {
  return fmt::format("node {} was lost ({})", printable(nodeId), printable(reason, 200));
}

std::string finishedNodeText(const std::string& nodeId) {
  return fmt::format(
      "ddprun: not restarting: the workers of node {} had already finished (exit code 0), so it "
      "will not join again and no restart can re-form the job.\n",
      printable(nodeId));
}

std::string askedToJoinText(const std::string& nodeId) {
  return fmt::format("node {} asked to join", printable(nodeId));
}

std::string joinedAgainText(const std::string& nodeId) {
  return fmt::format("node {} joined again", printable(nodeId));
}

std::string exclusionText(const std::string& rdzvId, const Settings& settings,
                          const Exclusion& exclusion) {
  return fmt::format(
      "node {} at {} is excluded from rendezvous '{}' for {:g} s: its workers failed first in {} "
      "rounds in a row (rdzv_conf max_node_failures={})",
      printable(exclusion.node), printable(exclusion.address), printable(rdzvId),
      settings.nodeCooldownMs / 1000.0, exclusion.streak, settings.maxNodeFailures);
}

std::string refusalText(const std::string& rdzvId, const Settings& settings,
                        const std::string& nodeId, const std::string& address,
                        const HostRecord& host, std::int64_t nowMs) {
  const std::int64_t left = std::max<std::int64_t>(0, host.excludedUntilMs - nowMs);
  const std::int64_t streak = host.streak > 0 ? host.streak : settings.maxNodeFailures;
  return fmt::format(
      "node {} at {} is excluded from rendezvous '{}' for {} more s: its workers failed first in "
      "{} rounds in a row",
      printable(nodeId), printable(address), printable(rdzvId), (left + 999) / 1000, streak);
}

std::string readmittedText(const std::string& rdzvId, const std::string& address) {
  return fmt::format("the cooldown of {} in rendezvous '{}' ended: it may join again",
                     printable(address), printable(rdzvId));
}

std::string staysText(const std::string& rdzvId, const std::string& address, std::int64_t streak,
                      std::uint32_t minNodes) {
  return fmt::format(
      "Rendezvous '{}': {} failed first in {} rounds in a row but stays: without it fewer than {} "
      "nodes are waiting",
      printable(rdzvId), printable(address), streak, minNodes);
}

std::string lostNodesReport(const Settings& settings, const std::map<std::string, LostNode>& lost) {
  std::vector<std::string> names;
  for (const auto& [id, node] : lost) {
    names.push_back(protocol::lostNodeText(id, node.address, node.nodeRank, node.reason));
  }
  // Printed as it is by every other node, like a failing node's report.
  return fmt::format("ddprun: error: {}.\n",
                     protocol::lostNodesReport(names, settings.fixedNodes, settings.minNodes));
}

std::string joinTimeoutText(const std::string& rdzvId, const protocol::RendezvousStatus& st) {
  return fmt::format("rendezvous '{}' did not complete: {} of {}{} nodes joined{}",
                     printable(rdzvId), st.joined, st.minNodes == st.maxNodes ? "" : "at least ",
                     st.minNodes, protocol::missingNodesText(st));
}

}  // namespace ddprun::rendezvous::policy
