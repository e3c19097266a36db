# ddprun's progress hook: how a Python worker tells its agent, with no change
# to the training script, when its process group formed and that it trains
# (docs/operations.md, "Downtime, phase by phase").
#
# ddprun puts this file first on the workers' PYTHONPATH as sitecustomize.py
# (DDPRUN_PROGRESS_HOOK=0 turns it off). It runs the sitecustomize it hides,
# then waits for `import torch` and, after it:
#   - wraps torch.distributed.init_process_group: "process_group" once it
#     returned;
#   - counts optimizer steps (PyTorch 2.x: a global step hook; 1.x: each
#     optimizer class's step, wrapped once): "step" on the first step, then
#     at most once a second with the count.
# With --preload auto (DDPRUN_PRELOAD_LEARN in the zygote), local rank 0 of
# a forked worker group writes at its first step, once a launch, the modules the program imported from outside
# its own directory into that file, and reports "imports": the agent's
# zygote preloads them for the restarts.
# Each report is one JSON line (its keys and events: the node telemetry's
# progress line, common/include/ddprun/common/node_telemetry.h) written to the agent's named pipe
# (DDPRUN_PROGRESS_PIPE) with one non-blocking write; a report that cannot
# be written is dropped, never raised.
import os
import sys


def _chain_hidden_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


class _Reporter:
    def __init__(self, pipe):
        self.pipe = pipe
        # --preload auto: set in the zygote's environment only, read here
        # (in the zygote) and inherited by the workers it forks.
        self.learn = os.environ.get("DDPRUN_PRELOAD_LEARN")
        self.fd = None
        self.steps = 0
        self.last = 0.0

    def send(self, event, step=0):
        import time

        try:
            if self.fd is None:
                self.fd = os.open(self.pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            line = '{"pid": %d, "event": "%s", "step": %d, "time": %.6f}\n' % (
                os.getpid(), event, step, time.time())
            os.write(self.fd, line.encode())
        except OSError:
            pass

    def step(self, *_):
        import time

        self.steps += 1
        now = time.monotonic()
        if self.steps == 1 or now - self.last >= 1.0:
            self.last = now
            self.send("step", self.steps)
        if self.steps == 1:
            self.report_imports()

    def report_imports(self):
        """--preload auto: the program's imports, at its first step (not
        before: the zygote's imports would compete with the job's start)."""
        try:
            if self.learn and _write_program_imports(self.learn):
                self.send("imports")
        except Exception:  # never break the worker
            pass


_NOT_PRELOADED = {"__main__", "__mp_main__", "sitecustomize", "usercustomize"}


def _program_imports():
    """Names of the loaded modules that came from files outside the
    program's own directory (the script's, or the working directory of
    `-m`), in the order they were imported. A directory on sys.path inside
    the program's (a virtual environment there) is not the program's."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    by_module = getattr(main, "__spec__", None) is not None
    own = os.path.realpath(os.getcwd() if by_module or not script else os.path.dirname(script))
    own_prefix = own.rstrip(os.sep) + os.sep
    inside = []
    for entry in sys.path[1:]:
        real = os.path.realpath(entry or os.getcwd()).rstrip(os.sep) + os.sep
        if real.startswith(own_prefix) and real != own_prefix:
            inside.append(real)
    directories = {}  # a directory's real path, resolved once (thousands of modules)
    names = []
    for name, module in list(sys.modules.items()):
        if name in _NOT_PRELOADED or "ddprun" in name:
            continue
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or getattr(module, "__spec__", None) is None:
            continue
        directory, base = os.path.split(path)
        if directory not in directories:
            directories[directory] = os.path.realpath(directory or os.getcwd())
        real = os.path.join(directories[directory], base)
        if real.startswith(own_prefix) and not any(real.startswith(i) for i in inside):
            continue  # the program's own
        names.append(name)
    return names


def _write_program_imports(path):
    """Writes them to `path` for --preload auto, on local rank 0, once a
    launch; True when it did."""
    if os.environ.get("LOCAL_RANK", "0") != "0" or os.path.exists(path):
        return False
    names = _program_imports()
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w") as out:
        out.write("".join(name + "\n" for name in names))
    os.replace(partial, path)
    return True


def _install(reporter):
    dist = sys.modules.get("torch.distributed")
    if dist is not None and hasattr(dist, "init_process_group"):
        original = dist.init_process_group
        if not getattr(original, "_ddprun_progress", False):
            import functools

            @functools.wraps(original)
            def init_process_group(*args, **kwargs):
                result = original(*args, **kwargs)
                reporter.send("process_group")
                return result

            init_process_group._ddprun_progress = True
            dist.init_process_group = init_process_group
            c10d = sys.modules.get("torch.distributed.distributed_c10d")
            if c10d is not None and getattr(c10d, "init_process_group", None) is original:
                c10d.init_process_group = init_process_group
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        _wrap_steps_of_subclasses(reporter)
        return
    register_optimizer_step_post_hook(reporter.step)


def _wrap_steps_of_subclasses(reporter):
    # PyTorch 1.x has no global step hook; each optimizer class's step is
    # wrapped once by Optimizer._hook_for_profile (called by __init__):
    # wrap it once more, after.
    import functools

    optimizer = sys.modules.get("torch.optim.optimizer")
    base = getattr(optimizer, "Optimizer", None)
    original = getattr(base, "_hook_for_profile", None)
    if original is None or getattr(original, "_ddprun_progress", False):
        return

    @functools.wraps(original)
    def _hook_for_profile(self):
        original(self)
        cls = self.__class__
        step = cls.step
        if getattr(step, "_ddprun_progress", False):
            return

        @functools.wraps(step)
        def counted(*args, **kwargs):
            result = step(*args, **kwargs)
            reporter.step()
            return result

        counted._ddprun_progress = True
        counted.hooked = getattr(step, "hooked", None)
        cls.step = counted

    _hook_for_profile._ddprun_progress = True
    base._hook_for_profile = _hook_for_profile


class _AfterTorch:
    """Runs _install once `import torch` has finished."""

    def __init__(self, reporter):
        self.reporter = reporter

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        reporter = self.reporter

        def exec_module(module):
            original(module)
            try:
                _install(reporter)
            except Exception:  # never break the worker's import
                pass

        loader.exec_module = exec_module
        return spec


def _start():
    pipe = os.environ.get("DDPRUN_PROGRESS_PIPE")
    if not pipe:
        return
    reporter = _Reporter(pipe)
    if "torch" in sys.modules:
        _install(reporter)
    else:
        sys.meta_path.insert(0, _AfterTorch(reporter))


try:
    _start()
finally:
    _chain_hidden_sitecustomize()
