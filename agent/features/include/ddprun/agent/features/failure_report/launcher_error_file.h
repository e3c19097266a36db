// The launcher's own error file: when ddprun's environment has
// TORCHELASTIC_ERROR_FILE (schedulers set it for the launcher, as for
// torchrun), the root cause is written there in torchelastic's JSON format,
// as torchrun's @record-wrapped main does:
//   - the root-cause worker wrote an error file: that JSON, with
//     message.errorCode set to its exit code;
//   - it did not: {"message": {"message": "<what happened>", "errorCode": N,
//     "extraInfo": {"py_callstack": "<its last stderr lines or the report>",
//     "timestamp": "<seconds>"}}} (torchrun writes nothing in this case).
// The file is replaced atomically (temporary file + rename).
//
// Thread-safety: a free function.
#pragma once

#include <filesystem>
#include <string>

#include "ddprun/agent/features/failure_report/failure_report.h"

namespace ddprun::agent {

// Without a root-cause worker, `summary` is the message (what ended ddprun:
// a signal, a rendezvous that failed, a lost store). Returns false (after
// logging a warning) when the file cannot be written.
bool writeLauncherErrorFile(const std::filesystem::path& path, const WorkerFailure* rootCause,
                            int exitCode, const std::string& report,
                            const std::string& summary = "ddprun failed");

}  // namespace ddprun::agent
