// Exit statuses: sqzrun's own (as its help text lists them), a rank's wait status in words and
// as the exit code sqzrun passes on.
#pragma once

#include <string>

namespace squeeze::launcher {

constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotExec = 127;

// "exited with status 3", "was killed by SIGKILL (status 137)"
std::string describeStatus(int status);

// The exit code a shell would show for this wait status (128+N for signal N).
int exitCodeOf(int status);

}  // namespace squeeze::launcher
