"""The OS layer of the sandbox harness: namespaces, a private tmpfs, an unprivileged uid, rlimits.

Not a module to import: ``sandbox_harness.py`` runs this file in the sandboxed child (see there
for how and why), which calls :func:`restrict` first thing, before it has read anything untrusted.
"""

import _signal
import os
import resource
import sys

# Captured when the harness loads this file, before the program runs.
getcwd, exit_now = os.getcwd, os._exit

NOBODY = 65534
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38


def restrict(cpu_s: int, memory_mb: int, nproc: int, fsize_mb: int, disk_mb: int) -> dict:
    """Network and mount namespaces, a private size-capped tmpfs as the working directory, an
    unprivileged uid, no-new-privs and rlimits; each best effort, reported in the returned dict."""
    import ctypes  # noqa: PLC0415 - only here; removed from sys.modules before the program runs

    names = ("network_namespace", "private_tmpfs", "unprivileged_uid", "no_new_privs", "rlimits")
    layers = dict.fromkeys(names, False)
    libc = ctypes.CDLL(None, use_errno=True)
    ppid, uid, gid = os.getppid(), os.getuid(), os.getgid()
    root = os.geteuid() == 0
    user_ns = 0 if root else CLONE_NEWUSER  # unprivileged processes need a user namespace first
    mount_ns = libc.unshare(user_ns | CLONE_NEWNET | CLONE_NEWNS) == 0
    if mount_ns or libc.unshare(user_ns | CLONE_NEWNET) == 0:
        layers["network_namespace"] = True
        if not root:  # map our own ids, else files we create belong to the overflow id
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                try:
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
                except OSError:
                    pass
    if mount_ns:
        # RLIMIT_FSIZE caps each file, not how many: a tmpfs caps the total, is invisible to other
        # processes and vanishes with the namespace. Private propagation keeps the mount in here.
        cwd, owner, group = getcwd(), NOBODY if root else uid, NOBODY if root else gid
        options = f"size={disk_mb}m,nr_inodes=4096,mode=0700,uid={owner},gid={group}"
        flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
        if (
            libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0
            and libc.mount(b"tmpfs", cwd.encode(), b"tmpfs", flags, options.encode()) == 0
        ):
            os.chdir(cwd)
            layers["private_tmpfs"] = True
    if root:
        try:
            _anchor_stdlib()  # before setuid: the stdlib may sit under a dir nobody cannot search
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError:
            pass
    layers["unprivileged_uid"] = os.geteuid() != 0
    layers["separate_uid"] = os.geteuid() != uid  # then permissions and signals protect the parent
    layers["no_new_privs"] = libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0  # no setuid binaries
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # /proc/self/mem and friends become root's
    # Die with the parent thread (set after setuid, which clears it); the check closes the race.
    libc.prctl(PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
    if os.getppid() != ppid:
        exit_now(1)
    try:
        mb = 1 << 20
        for res, value in (
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_CPU, cpu_s),
            (resource.RLIMIT_AS, memory_mb * mb),
            (resource.RLIMIT_FSIZE, fsize_mb * mb),
            (resource.RLIMIT_NPROC, nproc),
            (resource.RLIMIT_NOFILE, 64),
        ):
            resource.setrlimit(res, (value, value))
        layers["rlimits"] = True
    except (OSError, ValueError):
        pass
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    return layers


def _anchor_stdlib() -> None:
    """Point sys.path (and loaded packages' __path__) at O_PATH descriptors of the stdlib dirs:
    /proc/self/fd/N reaches a directory without searching its ancestors, so imports keep working
    after setuid even when the interpreter lives under e.g. /root (mode 0700)."""
    anchors = {}
    for entry in sys.path:
        if os.path.isdir(entry):
            fd = os.open(entry, os.O_PATH | os.O_DIRECTORY)
            anchors[entry.rstrip("/")] = f"/proc/self/fd/{fd}"
    sys.path[:] = anchors.values()
    sys.path_importer_cache.clear()

    def anchored(path: str) -> str:
        for real, anchor in anchors.items():
            if path.startswith(real + "/"):
                return anchor + path[len(real) :]
        return path

    for mod in list(sys.modules.values()):  # e.g. encodings, which imports codecs lazily
        search = getattr(mod, "__path__", None)
        if isinstance(search, list):
            search[:] = [anchored(p) for p in search]
