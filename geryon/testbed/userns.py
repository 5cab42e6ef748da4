"""A testbed without root: re-execute inside an unprivileged user namespace (`unshare -Urnm`).

There the process is root over a fresh network namespace and a private mount namespace, which is
all the testbed needs. A private tmpfs on /run holds the `ip netns` names and the state dir, so
nothing touches (or sees) the host's /run. Everything lives as long as the re-executed process:
when it exits the kernel frees the namespaces, so no state survives and none can go stale. It
depends on the host allowing unprivileged user namespaces (kernel.unprivileged_userns_clone,
user.max_user_namespaces, AppArmor's restrict_unprivileged_userns).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import NoReturn

from geryon.testbed.spec import TestbedError

ENV = "GERYON_TESTBED_USERNS"  # "exec": just re-executed, /run not yet private; "run": it is
_libc = ctypes.CDLL(None, use_errno=True)


def privilege_mode() -> str:
    """ "root" in the host's user namespace, "userns" as root of a user namespace (unshare -U)."""
    try:
        with open("/proc/self/uid_map", encoding="ascii") as fh:
            first = fh.read().split()
    except OSError:
        return "root"
    return "root" if first[:3] == ["0", "0", "4294967295"] else "userns"


def needed() -> bool:
    return os.geteuid() != 0


def inside() -> bool:
    return os.environ.get(ENV) in ("exec", "run") and os.geteuid() == 0


def check() -> None:
    """Raises TestbedError with the reason when unprivileged user namespaces are not allowed here."""
    if shutil.which("unshare") is None:
        raise TestbedError("without root the testbed needs `unshare` (util-linux) to make a user namespace")
    probe = subprocess.run(["unshare", "-Urnm", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        raise TestbedError(
            "without root the testbed runs in an unprivileged user namespace, which this host does not "
            f"allow ({probe.stderr.strip() or 'unshare -Urnm failed'}); run as root instead"
        )


def reexec(argv: Sequence[str]) -> NoReturn:
    """Replaces this process with `python -m geryon <argv>` inside a new user + network + mount
    namespace; the new process makes /run private (private_run) before anything else."""
    check()
    env = dict(os.environ, **{ENV: "exec"})
    cmd = ["unshare", "-Urnm", "--", sys.executable, "-m", "geryon", *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, env)


def private_run() -> None:
    """Mounts a private tmpfs on /run, once per user namespace (children inherit the mount and see
    ENV=run, so a nested `geryon testbed status` still sees this testbed)."""
    if os.environ.get(ENV) != "exec":
        return
    if _libc.mount(b"geryon-testbed", b"/run", b"tmpfs", 0, b"mode=0755") != 0:
        err = ctypes.get_errno()
        raise TestbedError(f"cannot mount a private tmpfs on /run in the user namespace: {os.strerror(err)}")
    os.environ[ENV] = "run"
