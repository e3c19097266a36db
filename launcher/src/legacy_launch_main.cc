// ddprun-launch: a drop-in for `python -m torch.distributed.launch`
// (launcher_main.h): ddprun's options plus --use_env; the script gets
// --local-rank=N unless --use_env is given.
#include "ddprun/launcher/launcher_main.h"

int main(int argc, char** argv) {
  return ddprun::launcher::launcherMain(argc, argv, ddprun::launcher::LauncherKind::kLegacyLaunch);
}
