"""The sandbox's seccomp filter: the generated BPF is well formed and decides as intended for both
machines (checked by a small interpreter), and a Python program under bubblewrap with the filter
runs a normal workload while the denied calls fail with the intended errno."""

from __future__ import annotations

import errno
import json
import os
import platform
import struct
import subprocess
import sys
import textwrap

import pytest

from bench.errors import CreditBenchError
from tasks.sandbox import bwrap as sandbox_bwrap
from tasks.sandbox import seccomp as sc

BWRAP = "/usr/bin/bwrap"
needs_bwrap = pytest.mark.skipif(not os.path.exists(BWRAP), reason=f"{BWRAP} is not installed")
MACHINE = platform.machine()
CLONE_NEWUSER, SIGCHLD, TIOCSTI = 0x10000000, 17, 0x5412


def decode(prog: bytes) -> list[tuple[int, int, int, int]]:
    return list(struct.iter_unpack("<HBBI", prog))


def run_bpf(prog: bytes, nr: int, arch: int | None = None, args: tuple[int, ...] = ()) -> int:
    """Interpret the program over one seccomp_data; the opcodes are the four the generator emits."""
    args = (*args, *[0] * (6 - len(args)))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    insns, pc, acc = decode(prog), 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == sc.LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == sc.JEQ_K:
            pc += jt if acc == k else jf
        elif code == sc.JSET_K:
            pc += jt if acc & k else jf
        elif code == sc.RET_K:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_program_is_well_formed(machine):
    prog = sc.program(machine)
    assert prog and len(prog) % 8 == 0
    insns = decode(prog)
    assert len(insns) < 4096
    assert insns[-1][0] == sc.RET_K
    for i, (code, jt, jf, _) in enumerate(insns):
        assert jt <= 255 and jf <= 255
        if code & 0x07 == 0x05:  # BPF_JMP: both targets inside the program
            assert i + 1 + max(jt, jf) < len(insns)
    numbers = [*sc.DENIED[machine].values(), *sc.SPECIAL[machine].values()]
    assert len(numbers) == len(set(numbers)), "a syscall number appears twice"


def test_default_machine_and_unsupported_machine():
    if MACHINE in sc.AUDIT_ARCH:
        assert sc.program() == sc.program(MACHINE)
    with pytest.raises(CreditBenchError, match="x86_64") as e:
        sc.program("sparc")
    assert "aarch64" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_program_decides_as_intended(machine):
    prog, arch, nr = sc.program(machine), sc.AUDIT_ARCH[machine], sc.SPECIAL[machine]
    eperm, allow = sc.RET_ERRNO | errno.EPERM, sc.RET_ALLOW

    def verdict(nr_, *args, arch_=arch):
        return run_bpf(prog, nr_, arch_, args)

    for name, number in sc.DENIED[machine].items():
        assert verdict(number) == eperm, name
    read_write_openat = {"x86_64": (0, 1, 257), "aarch64": (63, 64, 56)}[machine]
    assert all(verdict(n) == allow for n in read_write_openat)
    assert verdict(0, arch_=0x40000028) == sc.RET_KILL_PROCESS  # arm32 / foreign
    assert verdict(0, arch_=0x40000003) == sc.RET_KILL_PROCESS  # i386
    x32 = sc.RET_KILL_PROCESS if machine == "x86_64" else allow
    assert verdict(0x40000000 | 39) == x32
    assert verdict(nr["clone"], CLONE_NEWUSER | SIGCHLD) == eperm
    assert verdict(nr["clone"], 0x80) == eperm  # CLONE_NEWTIME
    assert verdict(nr["clone"], 0x003D0F00 | SIGCHLD) == allow  # what pthread_create passes
    assert verdict(nr["clone3"]) == sc.RET_ERRNO | errno.ENOSYS
    for name in ("socket", "socketpair"):
        assert verdict(nr[name], 1) == allow
        assert verdict(nr[name], 2) == verdict(nr[name], 16) == sc.RET_ERRNO | errno.EAFNOSUPPORT
    assert verdict(nr["ioctl"], 0, TIOCSTI) == verdict(nr["ioctl"], 0, (1 << 32) | TIOCSTI) == eperm
    assert verdict(nr["ioctl"], 0, 0x541C) == eperm
    assert verdict(nr["ioctl"], 0, 0x541B) == allow  # FIONREAD
    assert verdict(nr["personality"], 0) == verdict(nr["personality"], 0xFFFFFFFF) == allow
    assert verdict(nr["personality"], 0x0008) == eperm  # PER_LINUX32


def sandboxed(code: str, seccomp: bool = True) -> subprocess.CompletedProcess:
    argv = [BWRAP, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    # the base interpreter and its standard library (-I -S: nothing else), bound again where the
    # private /tmp hides them: a checkout or a Python under /tmp
    exe = sandbox_bwrap.python_executable()
    for tree in sorted({os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(exe))}):
        if tree == "/tmp" or tree.startswith("/tmp/"):
            argv += ["--ro-bind", tree, tree]
    r, w = os.pipe()
    try:
        if seccomp:
            os.write(w, sc.program())
            argv += ["--seccomp", str(r)]
        os.close(w)
        argv += ["--", exe, "-I", "-S", "-c", textwrap.dedent(code)]
        return subprocess.run(argv, pass_fds=(r,), capture_output=True, text=True, timeout=30)
    finally:
        os.close(r)


PROBES = """
    import ctypes, errno, json, os, socket
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    NR = json.loads({nr!r})

    def call(name, *args):
        ctypes.set_errno(0)
        r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_ulong(a) for a in args])
        if r == 0 and name == "clone":  # only when the filter failed: leave the child at once
            os._exit(0)
        if r > 0 and name == "clone":
            os.waitpid(r, 0)
        return errno.errorcode[ctypes.get_errno()] if r == -1 else "ok"

    def sock(*args):
        try:
            socket.socket(*args).close()
            return "ok"
        except OSError as e:
            return errno.errorcode[e.errno]

    null, (rd, wr) = os.open("/dev/null", os.O_RDWR), os.pipe()
    n = ctypes.c_int(-1)
    out = dict(
        seccomp=open("/proc/self/status").read().split("Seccomp:")[1].split()[0],
        clone3=call("clone3", 0, 0),
        mount=call("mount", 0, 0, 0, 0, 0),
        bpf=call("bpf", 0, 0, 0),
        keyctl=call("keyctl", 9999, 0, 0, 0, 0),
        io_uring_setup=call("io_uring_setup", 0, 0),
        io_setup=call("io_setup", 1, 0),
        sync=call("sync"),
        syncfs=call("syncfs", null),
        tiocsti=call("ioctl", null, {tiocsti}, 0),
        tiocsti_high_bits=call("ioctl", null, (1 << 32) | {tiocsti}, 0),
        fionread=call("ioctl", rd, 0x541B, ctypes.addressof(n)) + str(n.value),
        personality_query=call("personality", 0xFFFFFFFF),
        personality_linux32=call("personality", 8),
        inet=sock(socket.AF_INET, socket.SOCK_STREAM),
        netlink=sock(socket.AF_NETLINK, socket.SOCK_RAW, 0),
    )
    if {filtered}:  # these would succeed without the filter, and a traced process can stop
        out.update(
            unshare=call("unshare", {newuser}),
            clone=call("clone", {newuser} | {sigchld}, 0, 0, 0, 0),
            ptrace=call("ptrace", 0, 0, 0, 0),
        )
    print(json.dumps(out))
"""


def probe(seccomp: bool) -> dict[str, str]:
    nr = {**sc.DENIED[MACHINE], **sc.SPECIAL[MACHINE]}
    code = PROBES.format(nr=json.dumps(nr), filtered=seccomp, newuser=CLONE_NEWUSER, sigchld=SIGCHLD, tiocsti=TIOCSTI)
    res = sandboxed(code, seccomp)
    assert res.returncode == 0, res
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def filtered() -> dict[str, str]:
    return probe(seccomp=True)


EXPECTED = {
    "seccomp": "2",
    "unshare": "EPERM",
    "clone": "EPERM",
    "clone3": "ENOSYS",
    "ptrace": "EPERM",
    "mount": "EPERM",
    "bpf": "EPERM",
    "keyctl": "EPERM",
    "io_uring_setup": "EPERM",
    "io_setup": "EPERM",
    "sync": "EPERM",
    "syncfs": "EPERM",
    "tiocsti": "EPERM",
    "tiocsti_high_bits": "EPERM",
    "fionread": "ok0",
    "personality_query": "ok",
    "personality_linux32": "EPERM",
    "inet": "EAFNOSUPPORT",
    "netlink": "EAFNOSUPPORT",
}


@needs_bwrap
@pytest.mark.skipif(MACHINE not in sc.AUDIT_ARCH, reason=f"no filter for {MACHINE}")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_denied_calls_fail_in_the_sandbox(filtered, name):
    assert filtered[name] == EXPECTED[name], filtered


@needs_bwrap
def test_probes_see_the_difference_without_the_filter():
    """The probes are not answered the same way by the kernel alone."""
    plain = probe(seccomp=False)
    assert plain["seccomp"] == "0" and plain["inet"] == "ok"
    assert plain["tiocsti"] == "ENOTTY" and plain["keyctl"] != "EPERM", plain
    assert plain["io_setup"] == "EFAULT" and plain["syncfs"] == "ok", plain


@needs_bwrap
@pytest.mark.skipif(MACHINE not in sc.AUDIT_ARCH, reason=f"no filter for {MACHINE}")
def test_normal_workload_runs_under_the_filter():
    res = sandboxed("""
        import concurrent.futures, decimal, json, os, socket, subprocess, threading
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            assert sum(ex.map(lambda x: x * x, range(100))) == 328350
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
        assert subprocess.run(["/bin/true"]).returncode == 0
        assert subprocess.run(["/bin/sh", "-c", "echo hi"], capture_output=True).stdout == b"hi\\n"
        a, b = socket.socketpair()
        a.sendall(b"ping")
        assert b.recv(4) == b"ping"
        print(json.dumps(str(decimal.Decimal(1) / 7)))
    """)
    assert res.returncode == 0 and res.stdout.startswith('"0.142857'), res


@needs_bwrap
@pytest.mark.skipif(MACHINE != "x86_64", reason="x32 exists only on x86_64")
def test_x32_call_kills_the_process():
    res = sandboxed("""
        import ctypes
        ctypes.CDLL(None).syscall(ctypes.c_long(0x40000000 | 39))
        print("survived")
    """)
    assert "survived" not in res.stdout and res.returncode == 128 + 31, res  # SIGSYS
