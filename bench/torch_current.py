"""The current PyTorch of the benchmarks: the project's virtual environment
(scripts/setup-python; scripts/python is its interpreter). Its interpreter is
resolved once, and the benchmarks run it directly: scripts/python is a bash
wrapper that asks scripts/setup-python for the environment's path first
(about 15 ms here), a cost no launcher or worker should pay in a measurement."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRAPPER = os.path.join(ROOT, "scripts", "python")


def current_torch(program="bench"):
    """(the environment's interpreter, its torch version without the local
    part: "2.13.0" for "2.13.0+cpu"); exits with the reason when it has none."""
    out = subprocess.run([WRAPPER, "-c", "import sys, torch; print(sys.executable); "
                          "print(torch.__version__)"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{program}: the current PyTorch (scripts/python) does not run; run "
                 f"scripts/setup\n{out.stderr[-2000:]}")
    executable, version = out.stdout.split()
    return executable, version.split("+")[0]
