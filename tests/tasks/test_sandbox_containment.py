"""The code-execution sandbox contains hostile programs: time, processes, memory, files, network,
the environment, output, other processes and ctypes; the test process and the machine are left as
they were."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid

import psutil
import pytest
from sandbox_support import LIMITS, refused, run_program

from tasks.sandbox import Sandbox, SandboxLimits

pytestmark = pytest.mark.usefixtures("machine_left_as_it_was")


# 2. time


def test_cpu_limit():
    res = Sandbox(SandboxLimits(timeout_s=10, cpu_s=1)).run("while True:\n    pass", "")
    refused(res, "killed")
    assert "SIGXCPU" in res.detail or "SIGKILL" in res.detail, res
    assert res.wall_s < 5, res


def test_infinite_loop(sb):
    res = run_program(sb, "while True:\n    pass")
    refused(res, "timeout", "killed")
    assert res.wall_s < LIMITS.timeout_s + 2


# 3. processes


@pytest.mark.parametrize(
    "program",
    [
        "import os\nwhile True:\n    os.fork()",
        """
        import multiprocessing
        def spin():
            while True:
                pass
        procs = [multiprocessing.Process(target=spin) for _ in range(64)]
        for p in procs:
            p.start()
        """,
        """
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        ctx.Process(target=print).start()
        """,
        'import subprocess\nsubprocess.Popen(["sh", "-c", ":(){ :|:& };:"]).wait()',
        'import os\nos.system("sleep 100 &")',
        'import os\nos.posix_spawn("/bin/sleep", ["sleep", "100"], {})',
        'import pty\npty.spawn("/bin/sh")',
        'import os\nos.execv("/bin/sh", ["sh", "-c", "exit 0"])',
    ],
    ids=["fork", "multiprocessing", "spawn", "popen", "system", "posix_spawn", "pty", "exec"],
)
def test_process_creation(sb, program):
    # allowed inside the sandbox (its PID namespace and RLIMIT_NPROC contain them); nothing outlives it
    refused(run_program(sb, program))


# 4. memory


@pytest.mark.parametrize(
    "program",
    ["x = bytearray(10**10)", "x = []\nwhile True:\n    x.append(bytearray(10**7))"],
    ids=["huge", "growing"],
)
def test_memory_bomb(sb, program):
    res = run_program(sb, program)
    refused(res, "failed", "killed")
    assert res.wall_s < 4, res


# 5-6. files


@pytest.fixture
def open_dir(tmp_path):
    tmp_path.chmod(0o777)  # world-writable: only the sandbox itself may stop the program
    return tmp_path


@pytest.mark.parametrize(
    "how",
    [
        "open(TARGET, 'w').write('x')",
        "import os\nos.close(os.open(TARGET, os.O_CREAT | os.O_WRONLY))",
        "import pathlib\npathlib.Path(TARGET).write_text('x')",
        "import os\nos.symlink(TARGET, 'link')\nopen('link', 'w').write('x')",
        "import os\nos.chdir(os.path.dirname(TARGET))\nopen(os.path.basename(TARGET), 'w').write('x')",
        "import os\nd = os.open(os.path.dirname(TARGET), os.O_RDONLY)\n"
        "os.close(os.open(os.path.basename(TARGET), os.O_CREAT | os.O_WRONLY, dir_fd=d))",
        "import os\nos.mkdir(TARGET)",
        "import shutil\nshutil.copyfile('/etc/hostname', TARGET)",
        "import os, posixpath\nos.path.realpath = posixpath.realpath = lambda p, **k: os.getcwd()\n"
        "posixpath._joinrealpath = lambda *a: (os.getcwd(), True)\nopen(TARGET, 'w').write('x')",
    ],
    ids=["open", "os.open", "pathlib", "symlink", "chdir", "dir_fd", "mkdir", "copyfile", "realpath"],
)
def test_writes_outside_the_temp_dir(sb, open_dir, how):
    probe = f"{tempfile.gettempdir()}/creditbench-probe-{uuid.uuid4().hex}"
    targets = [open_dir / "outside.txt", probe]
    for target in targets:
        program = f"TARGET = {str(target)!r}\n{how}\ndef ok():\n    return True"
        run_program(sb, program)  # the program's /tmp is its own tmpfs: a write there may succeed
        assert not os.path.lexists(target), target


def test_filling_the_disk(sb):
    program = "for i in range(1000):\n    open(f'f{i}', 'wb').write(b'x' * 15 * 2**20)"
    res = run_program(sb, program)
    refused(res)
    if Sandbox.isolation()["private_tmpfs"]:
        assert "No space left" in res.detail, res


def test_writes_inside_the_temp_dir_work(sb):
    program = """
        import os, tempfile, pathlib, shutil
        open("a.txt", "w").write("hi")
        pathlib.Path("d/e").mkdir(parents=True)
        os.rename("a.txt", "d/b.txt")
        with tempfile.NamedTemporaryFile("w") as f:
            f.write("x")
        shutil.rmtree("d")
        def ok():
            return not os.path.exists("d") and os.path.exists(os.environ["HOME"])
    """
    assert run_program(sb, program).passed


@pytest.mark.parametrize(
    "how",
    [
        "import os\nos.remove(TARGET)",
        "import shutil\nshutil.rmtree(os.path.dirname(TARGET))",
        "import os\nos.rename(TARGET, TARGET + '.moved')",
        "import os\nos.truncate(TARGET, 0)",
        "open(TARGET, 'w')",
        "import os\nos.chmod(TARGET, 0)",
    ],
    ids=["remove", "rmtree", "rename", "truncate", "open-w", "chmod"],
)
def test_deleting_outside_the_temp_dir(sb, open_dir, how):
    victim = open_dir / "keep" / "victim.txt"
    victim.parent.mkdir()
    victim.parent.chmod(0o777)
    victim.write_text("precious")
    victim.chmod(0o666)
    program = f"import os\nTARGET = {str(victim)!r}\n{how}\ndef ok():\n    return True"
    refused(run_program(sb, program))
    assert victim.read_text() == "precious" and victim.stat().st_mode & 0o777 == 0o666


# 7. network


@pytest.mark.parametrize(
    "program",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', PORT), timeout=1)",
        "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()",
        "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', PORT))",
        "import urllib.request\nurllib.request.urlopen(f'http://127.0.0.1:{PORT}/', timeout=1)",
    ],
    ids=["connect", "bind", "udp", "urllib"],
)
def test_network(sb, program):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        refused(run_program(sb, f"PORT = {port}\n{program}\ndef ok():\n    return True"))
        with pytest.raises(socket.timeout):
            server.accept()


# 8. secrets in the environment


def test_parent_environment_is_unreachable(sb, monkeypatch):
    monkeypatch.setenv("CREDITBENCH_SECRET_TEST", "s3cret")
    program = f"""
        import os
        def ok():
            found = "s3cret" in str(os.environ)
            for path in [f"/proc/{{os.getppid()}}/environ", "/proc/{os.getpid()}/environ", "/proc/1/environ"]:
                try:
                    found = found or "s3cret" in open(path, errors="ignore").read()
                except Exception:
                    pass
            return found
    """
    refused(run_program(sb, program))
    env = run_program(
        sb, "import os\ndef ok():\n    return sorted(os.environ) == ['HOME', 'LANG', 'PATH', 'PWD', 'TMPDIR']"
    )
    assert env.passed, env


# 9. output


@pytest.mark.parametrize(
    "program",
    [
        "while True:\n    print('x' * 10**6)",
        "import sys\nwhile True:\n    sys.stderr.write('x' * 10**6)",
        "import os\nwhile True:\n    os.write(3, b'x' * 10**5)",  # the channel to the grader
    ],
    ids=["stdout", "stderr", "channel"],
)
def test_output_flood(sb, program):
    rss = psutil.Process().memory_info().rss
    res = run_program(sb, program)
    refused(res, "output_limit", "failed")
    assert res.wall_s < 3, res
    assert psutil.Process().memory_info().rss - rss < 100 * 2**20


# 10. other processes


@pytest.mark.parametrize(
    "program",
    [
        "import os\nos.kill(os.getppid(), 9)",
        "import os\nos.killpg(os.getpgid(os.getppid()), 9)",
        "import os\nos.kill(PYTEST_PID, 9)",
        "import os\nos.kill(-1, 9)",
        "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(PYTEST_PID), 9)",
        "import resource\nresource.prlimit(PYTEST_PID, resource.RLIMIT_NOFILE, (0, 0))",
    ],
    ids=["ppid", "killpg", "pytest", "all", "pidfd", "prlimit"],
)
def test_signalling_other_processes(sb, program):
    before = psutil.Process().rlimit(psutil.RLIMIT_NOFILE)
    program = f"PYTEST_PID = {os.getpid()}\n{program}\ndef ok():\n    return True"
    refused(run_program(sb, program))
    assert psutil.pid_exists(os.getpid())
    assert psutil.Process().rlimit(psutil.RLIMIT_NOFILE) == before


# 12. ctypes


@pytest.mark.parametrize(
    "call",
    [
        "libc.unshare(0x10000000)",  # CLONE_NEWUSER
        "libc.ptrace(0, 0, 0, 0)",  # PTRACE_TRACEME
        "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
        "libc.setuid(0)",
    ],
    ids=["unshare", "ptrace", "mount", "setuid"],
)
def test_ctypes_reaches_only_the_kernel_filter(sb, call):
    # ctypes loads (the kernel, not Python, is the boundary); the system calls it makes are refused
    program = f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nRESULT = {call}\ndef ok():\n    return RESULT"
    res = run_program(sb, program, "assert ok() == -1")
    assert res.passed, res
