// ddprun: the command-line entry point (launcher_main.h).
#include "launcher_main.h"

int main(int argc, char** argv) {
  return ddprun::launcher::launcherMain(argc, argv, ddprun::launcher::LauncherKind::kDdprun);
}
