"""Child side of :mod:`tasks.sandbox`: restrict this process, run an untrusted program, test it.

Started by ``tasks.sandbox`` as ``python -I -S sandbox_harness.py RESULT_FD CPU_S MEMORY_MB NPROC
FSIZE_MB DISK_MB`` in a fresh private temporary directory with the job on stdin. Never import it:
it changes the uid, namespaces, limits, builtins and audit hooks of the process that runs it.

Order matters: the OS layer first (nothing untrusted has been read yet), then the job is read, the
interpreter state the tests rely on is snapshotted, the audit hook installed, the program run, the
snapshot restored and the tests run against pristine builtins. Result-fd protocol, one line each:
``NONCE started <layer>=0|1 ...``, then ``NONCE passed`` or ``NONCE <status> <detail>`` with status
failed, exited or blocked.

The harness is one program in four files, a layer each: ``sandbox_harness_os.py`` (the OS layer),
``sandbox_harness_audit.py`` (the audit hook), ``sandbox_harness_grading.py`` (snapshot, restore
and the guard on return values) and this file (the run). The parts are not imported: ``-I`` puts
no directory on sys.path, and a module in sys.modules is one the program can reach and rebind
(emptying the hook's deny lists, say). This file runs each part's source in a module object of its
own that is in no registry, before anything untrusted is read, and every part looks builtins up in
the same private copy as this file.
"""

import _signal
import _thread
import builtins
import os
import sys
import types

# Functions defined below, and in the parts, look builtins up in this private copy, which the
# program cannot rebind.
__builtins__ = dict(builtins.__dict__)

# Captured now because the program may rebind module attributes.
getcwd, write, exit_now = os.getcwd, os.write, os._exit
thread_count, new_lock = _thread._count, _thread.allocate_lock
settrace, setprofile = sys.settrace, sys.setprofile
setitimer, alarm = _signal.setitimer, _signal.alarm
TIMERS = (_signal.ITIMER_REAL, _signal.ITIMER_VIRTUAL, _signal.ITIMER_PROF)

RECURSION_LIMIT = 3000  # above CPython's 1000 for deep-but-sane recursion, far from a C-stack crash
TEST_FILE = "<test>"
MAX_DETAIL = 300


def _load(name: str) -> types.ModuleType:
    """Run the harness part ``name`` (a file beside this one) in a fresh module object that is not
    in sys.modules, with this file's private builtins."""
    path = os.path.join(os.path.dirname(__file__), name + ".py")
    part = types.ModuleType(name)
    part.__dict__.update(__file__=path, __builtins__=__builtins__)
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    exec(code, part.__dict__)  # noqa: S102
    return part


os_layer = _load("sandbox_harness_os")
audit = _load("sandbox_harness_audit")
grading = _load("sandbox_harness_grading")
SandboxViolation = audit.SandboxViolation


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _describe(exc: BaseException) -> str:
    try:
        name = type.__getattribute__(type(exc), "__name__")
    except Exception:
        name = "exception"
    try:
        message = str(exc)
    except BaseException:
        message = ""
    return _one_line(f"{name}: {message}" if message else name)


def _read_job() -> tuple[str, str, str]:
    """stdin: ``NONCE PROGRAM_BYTES TEST_BYTES\\n`` then both UTF-8 texts; stdin is then /dev/null
    (so ``input()`` raises EOFError)."""
    chunks = []
    while chunk := os.read(0, 1 << 16):
        chunks.append(chunk)
    header, _, body = b"".join(chunks).partition(b"\n")
    nonce, n_program, n_test = header.decode("ascii").split()
    n_program, n_test = int(n_program), int(n_test)
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    program = body[:n_program].decode("utf-8", "surrogatepass")
    return nonce, program, body[n_program : n_program + n_test].decode("utf-8", "surrogatepass")


def _threads_done(timeout_s: float = 0.5) -> bool:
    """Background threads could keep changing state while the tests run; give them a moment."""
    waited = 0.0
    while thread_count() and waited < timeout_s:
        new_lock().acquire(timeout=0.01)
        waited += 0.01
    return not thread_count()


def main() -> None:
    result_fd = int(sys.argv[1])
    if result_fd != 3:  # a fixed low descriptor (below RLIMIT_NOFILE), whatever the parent had
        os.dup2(result_fd, 3)
        os.close(result_fd)
        result_fd = 3
    cpu_s, memory_mb, nproc, fsize_mb, disk_mb = map(int, sys.argv[2:7])
    layers = os_layer.restrict(cpu_s, memory_mb, nproc, fsize_mb, disk_mb)
    root = audit.realpath(getcwd())

    def report(line: str) -> None:
        try:
            write(result_fd, (line + "\n").encode("utf-8", "backslashreplace"))
        except OSError:
            pass

    try:
        nonce, program, test = _read_job()
    except Exception as exc:
        report(f"? error bad job: {_describe(exc)}")
        exit_now(2)
    sys.setrecursionlimit(RECURSION_LIMIT)
    builtins.exit = builtins.quit = sys.exit  # what the skipped `site` would have added
    prefixes = tuple(p.rstrip("/") + "/" for p in sys.path) + (os.path.dirname(os.__file__) + "/",)
    guard = grading.Guard(prefixes, SandboxViolation)
    audit.disable_unaudited()
    module = grading.PROGRAM  # `import __main__` reaches the program, not the harness
    namespace = module.__dict__
    namespace["__builtins__"] = builtins  # the real ones; exec would pass the harness's copy
    sys.modules["__main__"] = module
    pristine_builtins = dict(builtins.__dict__)
    snapshot = grading.snapshot(module)
    violations: list[str] = []
    phase = {"tests": False}
    sys.addaudithook(audit.make_hook(root, violations, guard.program_type, phase))  # cannot be removed
    report(f"{nonce} started " + " ".join(f"{k}={int(v)}" for k, v in layers.items()))

    status, detail = "failed", ""
    try:
        exec(compile(program, grading.PROGRAM_FILE, "exec", dont_inherit=True), namespace)  # noqa: S102
        if not _threads_done():
            raise SandboxViolation("sandbox: program left background threads running")
        for timer in TIMERS:  # a pending alarm would fire in the middle of the tests
            setitimer(timer, 0)
        alarm(0)
        settrace(None)
        setprofile(None)
        phase["tests"] = True
        restored = grading.restore(snapshot, prefixes)
        test_builtins = dict(pristine_builtins)
        test_builtins["__import__"] = grading.frozen_importer(pristine_builtins["__import__"], restored)
        test_ns = {k: guard.wrap(v, k) if guard.owned(v) else v for k, v in namespace.items()}
        test_ns["__builtins__"] = test_builtins
        exec(compile(test, TEST_FILE, "exec", dont_inherit=True), test_ns)  # noqa: S102
        if not _threads_done():
            raise SandboxViolation("sandbox: program left background threads running")
        status = "passed"
    except SystemExit as exc:
        status = "exited"
        detail = f"the program exited before its tests finished ({_describe(exc)})"
    except BaseException as exc:  # noqa: BLE001 - any failure of untrusted code fails the run
        namespace.clear()  # free what a memory bomb left behind before describing the error
        try:
            exc.__traceback__ = None  # ... including the locals of the frames that raised
        except BaseException:
            pass
        status = "blocked" if isinstance(exc, SandboxViolation) or violations else "failed"
        detail = _describe(exc)
        if violations and violations[0] not in detail:
            detail = _one_line(f"{detail} (after sandbox: {violations[0]} is not allowed)")
    report(f"{nonce} {status}" + (f" {detail}" if detail else ""))
    exit_now(0 if status == "passed" else 1)


if __name__ == "__main__":
    main()
