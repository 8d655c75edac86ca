"""A seccomp-BPF deny-list for the code sandbox, in the raw form bubblewrap's ``--seccomp FD`` reads.

The filter removes the system calls an untrusted Python program has no use for and that widen the
kernel's attack surface: tracing and reading other processes, mounting and namespace changes,
kernel keyrings, eBPF, perf, userfaultfd, io_uring, module loading, reboot, swap, accounting,
quotas, file handles, fanotify, the kernel log, setting the clocks, the new mount API, the calls
that act on or reserve host-wide resources (``sync`` and ``syncfs``, which flush every filesystem;
Linux AIO, whose ``io_setup`` takes from the host's one ``fs.aio-max-nr`` pool), legacy
x86 I/O-port and LDT calls, terminal input injection (TIOCSTI, TIOCLINUX), every socket family but
AF_UNIX, and personality changes other than PER_LINUX or a query. ``clone`` is refused with any
namespace flag; ``clone3`` answers ENOSYS (its flags sit behind a pointer the filter cannot read),
so the C library falls back to ``clone``. A call from a foreign ABI (i386 or x32 on x86_64, arm32
on aarch64) kills the process, so the table cannot be bypassed by switching ABIs. Everything else
is allowed.

It is one layer of several, not a sandbox on its own: it does not limit files, memory, CPU time or
the number of processes, and it does not stop a program from using the calls it allows. The
namespaces, the read-only filesystem, the unprivileged uid and the rlimits the sandbox sets up do
that. Usage::

    r, w = os.pipe()
    os.write(w, program())
    os.close(w)
    subprocess.run(["bwrap", "--seccomp", str(r), ..., "--", *cmd], pass_fds=(r,))
"""

from __future__ import annotations

import errno
import platform
import struct

from bench.errors import CreditBenchError

# Classic BPF opcodes (linux/bpf_common.h).
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = u32 at seccomp_data[k]
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K: jump if A & k
RET_K = 0x06  # BPF_RET | BPF_K

# Return values (linux/seccomp.h).
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
OFF_NR, OFF_ARCH, OFF_ARGS = 0, 4, 16

X32_SYSCALL_BIT = 0x40000000
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
AF_UNIX = 1
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
PER_LINUX, PER_QUERY = 0, 0xFFFFFFFF

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# Calls refused with EPERM whatever their arguments. The calls added since Linux 5.1 (io_uring,
# the new mount API) have one number on every architecture; they are in _SHARED.
_COMMON_X86_64 = {
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "unshare": 272,
    "setns": 308,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "acct": 163,
    "quotactl": 179,
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "fanotify_init": 300,
    "syslog": 103,
    "settimeofday": 164,
    "clock_settime": 227,
    "adjtimex": 159,
    "clock_adjtime": 305,
    "vhangup": 153,
    "lookup_dcookie": 212,
    "iopl": 172,
    "ioperm": 173,
    "modify_ldt": 154,
    "uselib": 134,
    "sync": 162,
    "syncfs": 306,
    "io_setup": 206,
    "io_destroy": 207,
    "io_getevents": 208,
    "io_submit": 209,
    "io_cancel": 210,
    "io_pgetevents": 333,
}
_COMMON_AARCH64 = {
    "ptrace": 117,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "mount": 40,
    "umount2": 39,
    "pivot_root": 41,
    "chroot": 51,
    "unshare": 97,
    "setns": 268,
    "keyctl": 219,
    "add_key": 217,
    "request_key": 218,
    "bpf": 280,
    "perf_event_open": 241,
    "userfaultfd": 282,
    "kexec_load": 104,
    "kexec_file_load": 294,
    "init_module": 105,
    "finit_module": 273,
    "delete_module": 106,
    "reboot": 142,
    "swapon": 224,
    "swapoff": 225,
    "acct": 89,
    "quotactl": 60,
    "open_by_handle_at": 265,
    "name_to_handle_at": 264,
    "fanotify_init": 262,
    "syslog": 116,
    "settimeofday": 170,
    "clock_settime": 112,
    "adjtimex": 171,
    "clock_adjtime": 266,
    "vhangup": 58,
    "lookup_dcookie": 18,
    "sync": 81,
    "syncfs": 267,
    "io_setup": 0,
    "io_destroy": 1,
    "io_submit": 2,
    "io_cancel": 3,
    "io_getevents": 4,
    "io_pgetevents": 292,
}
_SHARED = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}
DENIED = {"x86_64": {**_COMMON_X86_64, **_SHARED}, "aarch64": {**_COMMON_AARCH64, **_SHARED}}

# Calls whose verdict depends on an argument (or, for clone3, a different errno).
SPECIAL = {
    "x86_64": {"personality": 135, "clone": 56, "clone3": 435, "socket": 41, "socketpair": 53, "ioctl": 16},
    "aarch64": {"personality": 92, "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199, "ioctl": 29},
}


def _insn(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def _ret(value: int) -> tuple[int, int, int, int]:
    return _insn(RET_K, value)


def _arg_low(i: int) -> tuple[int, int, int, int]:
    """Load the low 32 bits of argument ``i`` (both supported machines are little-endian)."""
    return _insn(LD_W_ABS, OFF_ARGS + 8 * i)


def _arg_in(i: int, values: list[int], then: int, otherwise: int) -> list[tuple[int, int, int, int]]:
    """Return ``then`` when the low 32 bits of argument ``i`` are one of ``values``, else ``otherwise``."""
    n = len(values)
    return [
        _arg_low(i),
        *(_insn(JEQ_K, v, jt=n - j) for j, v in enumerate(values)),
        _ret(otherwise),
        _ret(then),
    ]


def _special_rules(nr: dict[str, int]) -> list[tuple[int, list[tuple[int, int, int, int]]]]:
    eperm, eafnosupport = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.EAFNOSUPPORT
    return [
        (nr["personality"], _arg_in(0, [PER_LINUX, PER_QUERY], then=RET_ALLOW, otherwise=eperm)),
        (nr["clone"], [_arg_low(0), _insn(JSET_K, CLONE_NAMESPACES, jt=1), _ret(RET_ALLOW), _ret(eperm)]),
        (nr["clone3"], [_ret(RET_ERRNO | errno.ENOSYS)]),
        (nr["socket"], _arg_in(0, [AF_UNIX], then=RET_ALLOW, otherwise=eafnosupport)),
        (nr["socketpair"], _arg_in(0, [AF_UNIX], then=RET_ALLOW, otherwise=eafnosupport)),
        (nr["ioctl"], _arg_in(1, [TIOCSTI, TIOCLINUX], then=eperm, otherwise=RET_ALLOW)),
    ]


def instructions(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) tuples."""
    if machine not in AUDIT_ARCH:
        raise CreditBenchError(
            f"no seccomp filter for machine {machine!r}; supported machines: {', '.join(sorted(AUDIT_ARCH))}."
        )
    prog = [
        _insn(LD_W_ABS, OFF_ARCH),
        _insn(JEQ_K, AUDIT_ARCH[machine], jt=1),
        _ret(RET_KILL_PROCESS),
        _insn(LD_W_ABS, OFF_NR),
    ]
    if machine == "x86_64":  # x32 calls share the x86_64 arch value and set this bit in nr
        prog += [_insn(JSET_K, X32_SYSCALL_BIT, jf=1), _ret(RET_KILL_PROCESS)]
    # Each rule is "jeq nr, next rule otherwise; body", and every body ends in a return, so A still
    # holds nr at every comparison and no jump spans more than one short body.
    eperm = RET_ERRNO | errno.EPERM
    rules = [(n, [_ret(eperm)]) for n in sorted(DENIED[machine].values())]
    rules += _special_rules(SPECIAL[machine])
    for nr, body in rules:
        prog.append(_insn(JEQ_K, nr, jf=len(body)))
        prog += body
    prog.append(_ret(RET_ALLOW))
    return prog


def program(machine: str | None = None) -> bytes:
    """The raw BPF program (8-byte ``struct sock_filter`` entries) for ``machine``, by default this one."""
    insns = instructions(platform.machine() if machine is None else machine)
    return b"".join(struct.pack("<HBBI", code, jt, jf, k) for code, jt, jf, k in insns)
