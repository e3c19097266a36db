#include "ddprun/worker/join.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "ddprun/common/error.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/process_group.h"

namespace ddprun::worker {

Join::Join(DistributedDataParallel& ddp, JoinOptions options) : ddp_(ddp), options_(options) {
  ddp_.beginJoin(options_);
}

Join::~Join() { ddp_.endJoin(); }

// Python's Join.__exit__, in its steps:
//  1. all-reduce a zero: the sum is the number of ranks still training (each
//     adds a one when its next synchronised pass begins);
//  2. none: every rank has finished; leave the loop;
//  3. else (unless told to throw) answer that pass with zeros and repeat;
//  4. every rank takes the model of the last rank to finish.
void Join::finish() {
  if (finished_) throw ConfigError("Join::finish() was already called for this Join");
  finished_ = true;
  ProcessGroup& group = ddp_.group();
  const auto options = at::TensorOptions().device(group.device());
  bool lastJoiner = true;
  for (;;) {
    at::Tensor training = at::zeros({1}, options);
    group.allReduce(training);
    if (training.item<double>() == 0) break;
    if (options_.throwOnEarlyTermination) {
      at::Tensor finished = at::ones({1}, options);
      group.allReduce(finished);
      ddp_.endJoin();
      throw Error(
          fmt::format("rank {} of {} ran out of inputs while {} rank(s) still train, and "
                      "throwOnEarlyTermination is set: every rank stops here",
                      group.rank(), group.size(), training.item<double>()));
    }
    ddp_.shadowStep();
    ++shadowed_;
    lastJoiner = false;
  }
  ddp_.endJoin();
  ddp_.syncFinalModel(lastJoiner);
}

}  // namespace ddprun::worker
