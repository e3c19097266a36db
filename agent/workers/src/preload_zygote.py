# ddprun's preload zygote (--preload, docs/cli.md). The agent embeds this
# file, writes it into the launch's run directory and starts it as
#
#   PYTHON -u preload_zygote.py CONTROL_FD AGENT_PID MODE TARGET MODULES POLICY EXCLUDED
#
# MODE is "script" (TARGET a path) or "module" (TARGET a module name, -m);
# MODULES and EXCLUDED are comma-separated (MODULES may be @FILE instead:
# one name a line). POLICY is "strict" (--preload
# MODULES: a module that cannot be imported, or whose import was unsafe,
# ends the launch) or "auto" (the default: torch, then what the installed
# PyTorch's first DDP step imports lazily, then MODULES, the program's own
# imports learned from an earlier attempt; a module that fails or is unsafe
# is left out, never EXCLUDED ones). An import is unsafe when it started a
# thread or a process, initialised CUDA or opened a GPU device. The zygote
# says "ready", then forks one worker per request, and between requests
# imports the modules a "learn" request adds. Each worker is a clone3 child with
# CLONE_PARENT (its parent is the agent, which waits for it, gets its exit
# status and its SIGCHLD) and CLONE_INTO_CGROUP, set up as an exec'd worker
# would be, that then runs TARGET exactly as `python -u TARGET ARGS` would.
#
# Messages are a 4-byte big-endian length and fields separated by NUL bytes
# (argv and environment are bytes, not text). On CONTROL_FD (a stream
# socket) the agent asks and the zygote answers: first "notices" with the
# descriptor of a second socket, then "spawn" (with the worker's stdout,
# stderr and report descriptors: "ok PID" or "error WHY") and "learn
# MODULE..." ("ok COUNT"). On the notices socket the zygote speaks when it
# has something to say: "ready SECONDS", "fatal WHY", "skipped MODULE WHY",
# "tainted MODULE WHAT" (then it exits: it cannot fork safely any more) and
# "learned COUNT SECONDS".
import ctypes
import os
import select
import socket
import struct
import sys
import time

_ZYGOTE_FILE = __file__
_CLONE_PARENT = 0x00008000
_CLONE_CHILD_SETTID = 0x01000000
_CLONE_CHILD_CLEARTID = 0x00200000
_CLONE_INTO_CGROUP = 0x200000000
_PR_SET_PDEATHSIG = 1
_SYSCALLS = {  # clone3, clone, set_mempolicy, set_robust_list, get_robust_list
    "x86_64": (435, 56, 238, 273, 274),
    "aarch64": (435, 220, 237, 99, 100),
    "ppc64le": (435, 120, 261, 300, 299),
}
_MPOL_PREFERRED = 1
_PR_SET_MM, _PR_SET_MM_MAP = 35, 14
_KEPT = []  # buffers the kernel shows as /proc/self/cmdline and environ
# The environment the agent started the zygote with: what an import changes
# in it (torch._inductor sets TORCHINDUCTOR_CACHE_DIR) is undone in a worker.
_START_ENV = dict(os.environ)


class _CloneArgs(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack",
                     "stack_size", "tls", "set_tid", "set_tid_size", "cgroup")
    ]


# PyDLL: the GIL stays held across the call, as os.fork() holds it.
_libc = ctypes.PyDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]
_libc.pthread_self.restype = ctypes.c_void_p


def _thread_state():
    """What glibc's fork() fixes up in the child and a raw clone does not:
    (address of this thread's tid in glibc's struct pthread, or None;
    (robust list head, its size), or None). The tid's offset is the one
    glibc publishes for debuggers (_thread_db_pthread_tid)."""
    tid_address = None
    try:
        offset = (ctypes.c_uint32 * 3).in_dll(_libc, "_thread_db_pthread_tid")[2]
        candidate = _libc.pthread_self() + offset
        if ctypes.c_int.from_address(candidate).value == os.getpid():  # the main thread
            tid_address = candidate
    except (ValueError, AttributeError):
        pass  # not glibc: the child keeps the zygote's cached tid
    robust = None
    numbers = _SYSCALLS.get(os.uname().machine)
    if numbers is not None:
        head, size = ctypes.c_void_p(), ctypes.c_size_t()
        if _libc.syscall(numbers[4], 0, ctypes.byref(head), ctypes.byref(size)) == 0:
            robust = (head.value, size.value)
    return tid_address, robust


_TID_ADDRESS, _ROBUST_LIST = _thread_state()


def _send(sock, *fields):
    body = b"\0".join(f if isinstance(f, bytes) else str(f).encode() for f in fields)
    sock.sendall(struct.pack(">I", len(body)) + body)


def _receive(sock):
    """One request: (fields, descriptors); (None, []) at end of stream."""
    header, fds, _, _ = socket.recv_fds(sock, 4, 8)
    if not header:
        return None, fds
    while len(header) < 4:
        more = sock.recv(4 - len(header))
        if not more:
            return None, fds
        header += more
    size = struct.unpack(">I", header)[0]
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return bytes(body).split(b"\0"), fds


def _threads():
    """Names of this process's threads other than the main one."""
    names = []
    for task in sorted(os.listdir("/proc/self/task")):
        if int(task) == os.getpid():
            continue
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:
            names.append(task)
    return names


def _cuda_initialised():
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False


# Device files a CUDA (or ROCm) driver opens when it initialises.
_GPU_DEVICES = ("/dev/nvidia", "/dev/kfd")


def _gpu_descriptors():
    """GPU device files this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(_GPU_DEVICES):
            found.append(target)
    return sorted(set(found))


def _children():
    """Processes this process started that still run."""
    pids = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as children:
                pids += children.read().split()
        except OSError:
            pass
    return pids


def _unsafe():
    """What the imports so far did that a forked worker could not inherit,
    as "started ...", or None."""
    threads = _threads()
    if threads:
        import threading

        named = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        what = ", ".join(f"Python thread '{n}'" for n in named)
        if len(threads) > len(named):
            native = len(threads) - len(named)
            what += (", " if what else "") + f"{native} native thread(s) " + ", ".join(
                repr(t) for t in threads[len(named):])
        return f"started {len(threads)} thread(s) ({what})"
    if _cuda_initialised():
        return "initialised CUDA"
    devices = _gpu_descriptors()
    if devices:
        return f"opened {', '.join(devices)} (CUDA initialised)"
    children = _children()
    if children:
        return f"started {len(children)} process(es) (pid {', '.join(children)})"
    return None


def _import(name):
    """None, or why importing `name` failed (one line)."""
    import importlib

    try:
        importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 (SystemExit at import is a failure too)
        return f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
    return None


def _strict_preload(modules):
    """--preload MODULES: None, or why the zygote cannot serve."""
    import importlib
    import traceback

    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            return (f"importing '{name}' failed: {e}; check the module name and that "
                    f"PYTHON_EXEC ({sys.executable}) can import it, or drop it from --preload")
        except BaseException:
            return (f"importing '{name}' failed:\n" + traceback.format_exc(limit=-3).rstrip() +
                    f"\ncheck the module name and that PYTHON_EXEC ({sys.executable}) can import "
                    f"it, or drop it from --preload")
        what = _unsafe()
        if what is None:
            continue
        if what.startswith("started") and "thread" in what:
            return (f"importing '{name}' {what}; a worker forked from the zygote "
                    f"would not have them, so '{name}' cannot be preloaded: drop it from "
                    f"--preload (the script still imports it itself)")
        if "CUDA" in what:
            return (f"importing '{name}' {what}, which a forked worker cannot use: "
                    f"drop '{name}' from --preload")
        return (f"importing '{name}' {what}, which a forked worker would not have: "
                f"drop '{name}' from --preload")
    return None


def _excluded(name, excluded):
    return any(name == e or name.startswith(e + ".") for e in excluded)


class _Auto:
    """--preload auto: torch, what its first DDP step imports lazily, then the
    program's own imports, each left out when it fails or is unsafe."""

    def __init__(self, sock, notices, modules, excluded):
        self.sock = sock
        self.notices = notices
        self.excluded = set(excluded)
        self.pending = [m for m in modules if not _excluded(m, self.excluded)]
        self.learning = None  # (count, start) of a learn request being imported

    def base(self):
        """torch and, on PyTorch 2.x, torch._dynamo (DDP's constructor imports
        it: docs/cli.md). None, or why torch itself cannot be preloaded."""
        import importlib.util

        if _excluded("torch", self.excluded):
            return "torch was left out"
        problem = _import("torch")
        if problem is not None:
            return f"importing torch failed ({problem})"
        if not self.check("torch"):
            return None  # not reached: check() exits
        try:
            lazy = importlib.util.find_spec("torch._dynamo") is not None
        except (ImportError, ValueError):
            lazy = False
        if lazy:
            self.pending.insert(0, "torch._dynamo")
        return None

    def check(self, name):
        """After importing `name`: True, or (unsafe) tells the agent and exits."""
        what = _unsafe()
        if what is None:
            return True
        # Unsafe to fork from now on: every request is refused until the
        # agent, having read the notice, closes the notices socket.
        _send(self.notices, b"tainted", name, what)
        while True:
            readable = select.select([self.sock, self.notices], [], [])[0]
            if self.notices in readable:
                os._exit(4)
            request, fds = _receive(self.sock)
            for fd in fds:
                os.close(fd)
            if request is None:
                os._exit(4)
            _send(self.sock, b"error", b"tainted", name, what)

    def learn(self, modules):
        new = [m for m in modules if m not in sys.modules and not _excluded(m, self.excluded)
               and m not in self.pending]
        if new and self.learning is None:
            self.learning = (0, time.monotonic())
        self.pending += new
        return len(new)

    def import_next(self):
        name = self.pending.pop(0)
        if name not in sys.modules:
            problem = _import(name)
            if problem is not None:
                self.excluded.add(name)
                _send(self.notices, b"skipped", name, problem)
            else:
                self.check(name)
                if self.learning is not None:
                    self.learning = (self.learning[0] + 1, self.learning[1])
        if not self.pending and self.learning is not None:
            count, started = self.learning
            self.learning = None
            _send(self.notices, b"learned", count, f"{time.monotonic() - started:.3f}")


def _clone(cgroup_fd):
    """fork(), with the agent as the child's parent, born in `cgroup_fd`."""
    numbers = _SYSCALLS.get(os.uname().machine)
    clone3, clone = 435, numbers[1] if numbers else None  # clone3 has one number everywhere
    args = _CloneArgs(flags=_CLONE_PARENT)
    if _TID_ADDRESS is not None:  # as glibc's fork(): the child's cached tid is its own
        args.flags |= _CLONE_CHILD_SETTID | _CLONE_CHILD_CLEARTID
        args.child_tid = _TID_ADDRESS
        args.flags |= _CLONE_INTO_CGROUP
        args.cgroup = cgroup_fd
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _libc.syscall(clone3, ctypes.byref(args), ctypes.sizeof(args))
    error = ctypes.get_errno()
    if pid < 0 and cgroup_fd >= 0 and error != 38:  # refused in the cgroup: outside it
        args.flags &= ~_CLONE_INTO_CGROUP
        args.cgroup = 0
        pid = _libc.syscall(clone3, ctypes.byref(args), ctypes.sizeof(args))
        error = ctypes.get_errno()
    if pid < 0 and error == 38 and clone is not None:  # ENOSYS: a kernel before 5.3
        pid = _libc.syscall(clone, ctypes.c_ulong(_CLONE_PARENT), 0, 0, 0, 0)
        error = ctypes.get_errno()
    if pid == 0:
        if _ROBUST_LIST is not None:  # the kernel dropped it; glibc's fork re-registers it
            _libc.syscall(_SYSCALLS[os.uname().machine][3], ctypes.c_void_p(_ROBUST_LIST[0]),
                          ctypes.c_size_t(_ROBUST_LIST[1]))
        ctypes.pythonapi.PyOS_AfterFork_Child()
    else:
        ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(error, os.strerror(error))
    return pid


class _MmMap(ctypes.Structure):  # struct prctl_mm_map
    _fields_ = [(name, ctypes.c_uint64)
                for name in ("start_code", "end_code", "start_data", "end_data", "start_brk",
                             "brk", "start_stack", "arg_start", "arg_end", "env_start",
                             "env_end", "auxv")] + [("auxv_size", ctypes.c_uint32),
                                                    ("exe_fd", ctypes.c_uint32)]


def _show_as(argv, env):
    """/proc/self/cmdline and environ become the worker's own (what ps, pgrep
    -f and other tools read), not the zygote's. PR_SET_MM_MAP needs a kernel
    with CONFIG_CHECKPOINT_RESTORE; without it they stay the zygote's."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    field = lambda n: int(fields[n - 3])  # noqa: E731 (man 5 proc numbering)
    cmdline = b"".join(os.fsencode(a) + b"\0" for a in argv)
    environ = b"".join(e + b"\0" for e in env)
    buffers = [ctypes.create_string_buffer(cmdline, len(cmdline)),
               ctypes.create_string_buffer(environ, max(len(environ), 1))]
    _libc.sbrk.restype = ctypes.c_void_p
    mm = _MmMap(start_code=field(26), end_code=field(27), start_data=field(45),
                end_data=field(46), start_brk=field(47), brk=_libc.sbrk(0),
                start_stack=field(28), arg_start=ctypes.addressof(buffers[0]),
                env_start=ctypes.addressof(buffers[1]), auxv=0, auxv_size=0,
                exe_fd=0xFFFFFFFF)
    mm.arg_end = mm.arg_start + len(cmdline)
    mm.env_end = mm.env_start + len(environ)
    if _libc.prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.addressof(mm), ctypes.sizeof(mm), 0) == 0:
        _KEPT.extend(buffers)  # else ps shows the zygote's (documented)


class _Job:
    """What a forked worker runs once the zygote's loop is left."""

    def __init__(self, mode, target, args):
        self.mode, self.target, self.args = mode, target, args


def _become_worker(sock, notices, agent, request, fds):
    """In the forked child: the worker's process state, as an exec'd one has."""
    out, err, report = fds[:3]
    cgroup_fd = fds[3] if len(fds) > 3 else -1
    try:
        (_, cwd, cpus, memory_node, argc, *rest) = request
        argc = int(argc)
        argv = [os.fsdecode(a) for a in rest[:argc]]
        env = rest[argc:]
        os.setsid()  # its own session and process group, as an exec'd worker
        _libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL when the agent dies
        if os.getppid() != agent:
            os._exit(137)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (out, err, cgroup_fd):
            if fd > 2:
                os.close(fd)
        sock.close()
        notices.close()
        if cpus:
            os.sched_setaffinity(0, [int(c) for c in cpus.split(b",")])
        call = _SYSCALLS.get(os.uname().machine)
        if int(memory_node) >= 0 and call is not None:  # best effort, as before exec
            mask = (ctypes.c_ulong * 16)()
            node = int(memory_node)
            mask[node // 64] |= 1 << (node % 64)
            _libc.syscall(call[2], _MPOL_PREFERRED, mask, 16 * 64)
        os.chdir(os.fsdecode(cwd))
        # The agent sends what differs from the environment it started the
        # zygote with: applied to the zygote's own (which a PYTHON_EXEC
        # wrapper may have changed), as the wrapper would have it, less what
        # the preloaded imports changed.
        for key in [k for k in os.environ if k not in _START_ENV]:
            del os.environ[key]
        for key, value in _START_ENV.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        count = int(env[0])
        for entry in env[1:1 + count]:
            key, _, value = entry.partition(b"=")
            os.environ[os.fsdecode(key)] = os.fsdecode(value)
        for key in env[1 + count:]:
            os.environ.pop(os.fsdecode(key), None)
        sys.orig_argv = argv
        try:
            _show_as(argv,
                     [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items()])
        except (OSError, ValueError, IndexError):
            pass  # cosmetic: ps shows the zygote's command line
        mode, target = ("module", argv[3]) if argv[2] == "-m" else ("script", argv[2])
        job = _Job(mode, target, argv[4:] if mode == "module" else argv[3:])
        _set_path0(mode, target)
        _reseed()
        _recompute_import_time_state()
    except BaseException as e:
        os.write(report, f"{type(e).__name__}: {e}".encode())
        os._exit(127)
    # Set up: the agent reads end of file, then answers one byte. Without it
    # (the zygote's reply was lost, so the agent exec'd this worker instead)
    # this child must not run.
    channel = socket.socket(fileno=report)
    channel.shutdown(socket.SHUT_WR)
    go = channel.recv(1)
    channel.close()
    if go != b"g":
        os._exit(0)
    return job


def _set_path0(mode, target):
    """sys.path[0] as `python -u TARGET` (or -m TARGET) has it."""
    if getattr(sys.flags, "safe_path", False):
        return  # -P / PYTHONSAFEPATH: nothing was prepended
    if mode == "script":
        sys.path[0] = os.path.dirname(os.path.realpath(target))
    else:
        sys.path[0] = os.getcwd()


def _reseed():
    """Modules that seeded a generator at import get fresh entropy, as a new
    interpreter would (the zygote's state is the same in every worker)."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _recompute_import_time_state():
    """What preloaded modules computed at import from the environment or the
    process is the zygote's, not this worker's: recomputed here, after the
    worker's environment, CPUs and directory are set, as the module's own
    import would have computed it in an exec'd worker. The rule for other
    modules is in docs/frameworks.md (preloading)."""
    modules = sys.modules
    # Lightning: rank_zero_only.rank (rank_zero_only is one object shared by
    # lightning.fabric, lightning.pytorch, lightning_fabric,
    # pytorch_lightning and NequIP's logger), set at import from RANK,
    # LOCAL_RANK, SLURM_PROCID or JSM_NAMESPACE_RANK; a DDP strategy corrects
    # it only inside Trainer(), so everything before it (and any
    # single-device strategy) would act as rank 0 on every rank.
    rank_zero = modules.get("lightning_utilities.core.rank_zero")
    if rank_zero is not None and hasattr(rank_zero.rank_zero_only, "rank"):
        fabric = (modules.get("lightning.fabric.utilities.rank_zero")
                  or modules.get("lightning_fabric.utilities.rank_zero"))
        get_rank = getattr(fabric, "_get_rank", None)
        if get_rank is None:
            names = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
            get_rank = lambda: next((int(os.environ[n]) for n in names if n in os.environ), None)
        rank_zero.rank_zero_only.rank = get_rank() or 0
    # torchmetrics keeps its own copy, from LOCAL_RANK.
    prints = modules.get("torchmetrics.utilities.prints")
    if prints is not None and hasattr(getattr(prints, "rank_zero_only", None), "rank"):
        prints.rank_zero_only.rank = int(os.environ.get("LOCAL_RANK", 0))
    # PyTorch: inductor's compile threads come from the CPUs the process may
    # use (the worker's --numa_binding set, not the zygote's); c10d's debug
    # level from TORCH_DISTRIBUTED_DEBUG.
    inductor = modules.get("torch._inductor.config")
    decide = getattr(inductor, "decide_compile_threads", None)
    if decide is not None:
        try:
            inductor.compile_threads = decide()
        except Exception:
            pass
    distributed = modules.get("torch.distributed")
    set_debug = getattr(distributed, "set_debug_level_from_env", None)
    if set_debug is not None:
        try:
            set_debug()
        except Exception:
            pass


def _fatal(notices, why):
    """Tells the agent why this zygote cannot serve and waits for it to close
    the socket, so that the reason arrives before the exit."""
    _send(notices, b"fatal", why)
    notices.recv(1)
    os._exit(1)


def _serve(sock, agent, mode, target, modules, policy, excluded):
    started = time.monotonic()
    request, fds = _receive(sock)
    if request is None or request[0] != b"notices" or len(fds) != 1:
        os._exit(2)
    notices = socket.socket(fileno=fds[0])
    if sys.version_info < (3, 9) or not hasattr(ctypes.pythonapi, "PyOS_AfterFork_Child"):
        _fatal(notices, f"{sys.executable} is not CPython 3.9 or newer, which the zygote needs "
                        f"(socket.recv_fds, PyOS_AfterFork_Child)")
    _set_path0(mode, target)  # preloaded modules are found where the program finds them
    auto = None
    if policy == "auto":
        auto = _Auto(sock, notices, modules, excluded)
        problem = auto.base()
        if problem is not None:
            _fatal(notices, problem)
        while auto.pending:
            auto.import_next()
    else:
        problem = _strict_preload(modules)
        if problem is not None:
            _fatal(notices, problem)
    _send(notices, b"ready", f"{time.monotonic() - started:.3f}")
    while True:
        if auto is not None and auto.pending:
            # Learning: one import at a time, a request first when one waits.
            if not select.select([sock], [], [], 0)[0]:
                auto.import_next()
                continue
        request, fds = _receive(sock)
        if request is not None and request[0] == b"learn" and not fds:
            count = auto.learn([os.fsdecode(m) for m in request[1:]]) if auto else 0
            _send(sock, b"ok", count)
            continue
        if request is None or request[0] != b"spawn" or len(fds) not in (3, 4):
            for fd in fds:
                os.close(fd)
            os._exit(0 if request is None else 2)
        what = _unsafe()
        if what is not None:
            why = f"since the preload, something {what}"
            for fd in fds:
                os.close(fd)
            _send(sock, b"error", why)
            os._exit(3)
        try:
            pid = _clone(fds[3] if len(fds) > 3 else -1)
        except OSError as e:
            for fd in fds:
                os.close(fd)
            _send(sock, b"error", f"clone3: {e}")
            continue
        if pid == 0:
            return _become_worker(sock, notices, agent, request, fds)
        for fd in fds:
            os.close(fd)
        _send(sock, b"ok", pid)


def _run(job):
    """Runs the worker's program as the interpreter runs its main file."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    if sys.version_info < (3, 14):  # as CPython's own __main__ until 3.13
        main.__annotations__ = {}
    sys.modules["__main__"] = main
    if job.mode == "module":
        import runpy

        sys.argv = ["-m"] + job.args
        runpy._run_module_as_main(job.target, alter_argv=True)
        return
    from importlib.machinery import SourceFileLoader

    path = os.path.abspath(job.target)
    sys.argv = [job.target] + job.args
    main.__file__ = path
    main.__cached__ = None
    main.__loader__ = SourceFileLoader("__main__", path)
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _without_zygote_frames(tb):
    while tb is not None and tb.tb_frame.f_code.co_filename == _ZYGOTE_FILE:
        tb = tb.tb_next
    return tb


if __name__ == "__main__":
    if sys.argv[5].startswith("@"):
        with open(sys.argv[5][1:]) as _file:
            _modules = _file.read().split()
    else:
        _modules = [m for m in sys.argv[5].split(",") if m]
    _job = _serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]), sys.argv[3],
                  sys.argv[4], _modules, sys.argv[6], [m for m in sys.argv[7].split(",") if m])
    try:
        _run(_job)
    except BaseException as _error:
        # A bare raise adds no frame: the traceback starts in the program.
        _error.__traceback__ = _without_zygote_frames(_error.__traceback__)
        raise
