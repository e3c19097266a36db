// ddprun: the command-line entry point (launcher_main.h).
#include "ddprun/launcher/launcher_main.h"

int main(int argc, char** argv) {
  return ddprun::launcher::launcherMain(argc, argv, ddprun::launcher::LauncherKind::kDdprun);
}
