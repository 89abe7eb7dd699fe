"""Process plumbing shared by the Kafka and Postgres launchers.

The one promise this module exists to keep: **no service process outlives the program that
started it**, unless it was started on purpose to outlive it (``berth dev up``). Three layers
make that hold, each covering what the one before cannot:

1. ``stop()`` and context managers: the normal path, a clean shutdown.
2. ``atexit``: the interpreter exits without the caller stopping things (an exception escaping
   a script, ``sys.exit``, Ctrl-C in pytest).
3. Linux ``PR_SET_PDEATHSIG``: the interpreter is killed and runs no Python at all (``kill -9``,
   OOM killer). The kernel then sends SIGKILL to the child.

A temporary directory left behind by layer 3 is removed by :func:`sweep_stale_dirs` the next time
a service starts.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

#: From <linux/prctl.h>; not exposed by the standard library.
_PR_SET_PDEATHSIG = 1

#: Every temporary directory this package creates starts with this prefix, which is how
#: :func:`sweep_stale_dirs` recognises them and nothing else.
TEMP_PREFIX = "berth-devstack-"

#: File inside each temporary directory naming the processes whose lifetime it belongs to.
OWNER_FILE = "owner.json"


class DevStackError(RuntimeError):
    """A local service could not be provided. The message says why and what to do about it."""


# --------------------------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------------------------


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct TCP ports on ``host`` that were free a moment ago.

    All sockets are held open until every port is chosen, so the ports are distinct. Another
    process can still take one before our service binds it; the services then fail to start
    with a bind error in their log, which the launchers report.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# --------------------------------------------------------------------------------------------
# Users
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunAs:
    """A system account a child process switches to before ``exec``."""

    name: str
    uid: int
    gid: int

    @classmethod
    def lookup(cls, name: str) -> RunAs:
        entry = pwd.getpwnam(name)
        return cls(name=name, uid=entry.pw_uid, gid=entry.pw_gid)

    def chown(self, path: Path) -> None:
        os.chown(path, self.uid, self.gid)


# --------------------------------------------------------------------------------------------
# Spawning
# --------------------------------------------------------------------------------------------


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _make_preexec(*, die_with_parent: bool, run_as: RunAs | None) -> Callable[[], None] | None:
    """Build the function that runs in the child between ``fork`` and ``exec``.

    Order matters. The kernel clears the parent-death signal whenever the process's credentials
    change (``commit_creds``), so the user switch has to come first and ``prctl`` last.
    """
    if not die_with_parent and run_as is None:
        return None
    parent_pid = os.getpid()
    libc = _libc() if die_with_parent else None

    def preexec() -> None:
        if run_as is not None:
            os.setgroups([])
            os.setgid(run_as.gid)
            os.setuid(run_as.uid)
        if libc is not None:
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
                os._exit(125)
            # The parent may have died between fork and prctl; then nobody would signal us.
            if os.getppid() != parent_pid:
                os._exit(125)

    return preexec


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    detached: bool = False,
    run_as: RunAs | None = None,
) -> subprocess.Popen[bytes]:
    """Start a long-running service process with stdout and stderr appended to ``log_path``.

    ``detached=False`` (fixtures, context managers): the child gets its own process group (so a
    Ctrl-C in the terminal reaches only us, and we decide how it stops) and dies with SIGKILL if
    this process dies. The kernel ties the parent-death signal to the *thread* that forked, so
    this must be called from the main thread; elsewhere the signal is not set and only
    ``stop()``/``atexit`` protect against leftovers (a warning is logged).

    ``detached=True`` (``berth dev up``): the child starts a new session, has no parent-death
    signal and keeps running after this process exits. Whoever holds its pid must stop it.
    """
    die_with_parent = not detached
    if die_with_parent and threading.current_thread() is not threading.main_thread():
        log.warning(
            "spawning %s outside the main thread: it will not be killed automatically if this "
            "process is killed with SIGKILL",
            argv[0],
        )
        die_with_parent = False
    with open(log_path, "ab") as log_file:
        if run_as is not None:
            run_as.chown(log_path)
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=detached,
            process_group=None if detached else 0,
            preexec_fn=_make_preexec(die_with_parent=die_with_parent, run_as=run_as),
            close_fds=True,
        )


def run_checked(
    argv: Sequence[str],
    *,
    what: str,
    hint: str,
    run_as: RunAs | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run a short command to completion; on failure raise :class:`DevStackError` with its output.

    ``what`` names the step for the message ("format Kafka storage"), ``hint`` says what to try.
    """
    try:
        result = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=timeout,
            preexec_fn=_make_preexec(die_with_parent=False, run_as=run_as),
        )
    except FileNotFoundError as exc:
        raise DevStackError(f"cannot {what}: {exc.filename} not found. {hint}") from exc
    except subprocess.TimeoutExpired as exc:
        raise DevStackError(f"cannot {what}: `{' '.join(argv)}` took over {timeout:.0f} s. {hint}") from exc
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        raise DevStackError(
            f"cannot {what}: `{' '.join(argv)}` exited with {result.returncode}:\n{tail_text(output, 40)}\n{hint}"
        )
    return result


# --------------------------------------------------------------------------------------------
# Inspecting and stopping processes, including ones that are not our children
# --------------------------------------------------------------------------------------------


def read_cmdline(pid: int) -> str | None:
    """The command line of ``pid`` with arguments joined by spaces, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def is_running(pid: int, *, cmdline_contains: str | None = None) -> bool:
    """True if ``pid`` exists, is not a zombie, and (if given) its command line contains the marker.

    The marker guards against pid reuse: a recorded pid is only "ours" while the process behind
    it still mentions our data directory.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # Field 3, after the parenthesised command name (which may itself contain spaces).
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        return False
    if cmdline_contains is None:
        return True
    cmdline = read_cmdline(pid)
    return cmdline is not None and cmdline_contains in cmdline


def pids_mentioning(marker: str) -> list[int]:
    """Pids of live processes whose command line contains ``marker`` (e.g. a data directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if is_running(int(entry.name), cmdline_contains=marker):
                found.append(int(entry.name))
    return found


def wait_for_exit(
    pid: int,
    timeout: float,
    *,
    popen: subprocess.Popen[bytes] | None = None,
    cmdline_contains: str | None = None,
) -> bool:
    """Wait until ``pid`` is gone; True if it went within ``timeout`` seconds.

    Our own children must be reaped through their ``Popen`` (otherwise they stay zombies and the
    ``Popen`` object never learns the exit code); other processes are polled through /proc.
    """
    if popen is not None:
        try:
            popen.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_running(pid, cmdline_contains=cmdline_contains):
            return True
        time.sleep(0.1)
    return not is_running(pid, cmdline_contains=cmdline_contains)


def _signal(pid: int, sig: int, *, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError as exc:
        raise DevStackError(f"not allowed to signal pid {pid}: {exc}; run as the same user") from exc


def terminate(
    pid: int,
    *,
    popen: subprocess.Popen[bytes] | None = None,
    cmdline_contains: str | None = None,
    grace: float = 20.0,
    first_signal: int = signal.SIGTERM,
) -> bool:
    """Stop ``pid`` and its process group: ``first_signal``, up to ``grace`` seconds, then SIGKILL.

    Returns True if it stopped within the grace period. ``pid`` must lead its own process group
    (everything :func:`spawn` starts does), so helpers it forked go down with it.
    ``cmdline_contains`` (for pids read back from a state file) makes this a no-op when the pid
    now belongs to an unrelated process.
    """
    # Signal the group only while its leader is known to be alive (not yet reaped): a reaped
    # leader's pid, and so the group id, could already belong to someone else.
    if popen is not None and popen.poll() is not None:
        return True
    if not is_running(pid, cmdline_contains=cmdline_contains):
        return True
    _signal(pid, first_signal, group=True)
    if wait_for_exit(pid, grace, popen=popen, cmdline_contains=cmdline_contains):
        return True
    log.warning("pid %d ignored signal %d for %.0f s; sending SIGKILL", pid, first_signal, grace)
    _signal(pid, signal.SIGKILL, group=True)
    wait_for_exit(pid, 10.0, popen=popen, cmdline_contains=cmdline_contains)
    return False


def tail_text(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def tail_file(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, or a note that there is none (for error messages)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return tail_text(text, lines) or f"({path} is empty)"


# --------------------------------------------------------------------------------------------
# Temporary directories
# --------------------------------------------------------------------------------------------


def make_temp_dir(kind: str) -> Path:
    """Create ``/tmp/berth-devstack-<kind>-XXXX`` (or under $TMPDIR) owned by this process."""
    path = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{kind}-"))
    write_owner(path, owner_pid=os.getpid(), service_pid=None)
    return path


def write_owner(path: Path, *, owner_pid: int | None, service_pid: int | None) -> None:
    """Record which processes keep ``path`` in use. Detached stacks record no owner pid."""
    (path / OWNER_FILE).write_text(json.dumps({"owner_pid": owner_pid, "service_pid": service_pid}))


def remove_dir(path: Path) -> None:
    """Remove a temporary directory; a failure is logged, never raised (this runs in cleanups)."""

    def onerror(func: Callable[..., object], target: str, exc_info: object) -> None:
        log.warning("could not remove %s: %s", target, exc_info)

    if path.exists():
        shutil.rmtree(path, onerror=onerror)


def sweep_stale_dirs(temp_root: Path | None = None) -> list[Path]:
    """Remove temporary directories left by stacks whose processes are all gone.

    Only directories named ``berth-devstack-*`` with an owner file are considered, and only when
    neither the owning Python process nor the service process (checked against the directory
    name, to rule out pid reuse) is alive. Returns what was removed.
    """
    root = temp_root or Path(tempfile.gettempdir())
    removed = []
    for path in root.glob(f"{TEMP_PREFIX}*"):
        try:
            owner = json.loads((path / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        owner_pid, service_pid = owner.get("owner_pid"), owner.get("service_pid")
        if owner_pid and is_running(owner_pid):
            continue
        if service_pid and is_running(service_pid, cmdline_contains=str(path)):
            continue
        if pids_mentioning(str(path)):
            continue
        remove_dir(path)
        removed.append(path)
    return removed


# --------------------------------------------------------------------------------------------
# Last line of defence for in-process services
# --------------------------------------------------------------------------------------------


class _Stoppable(Protocol):
    def stop(self) -> None: ...


# Strong references on purpose: a service whose handle was dropped without stop() must still be
# stopped at exit, so the handle has to stay alive until then.
_live_services: dict[int, _Stoppable] = {}


def register_for_exit(service: _Stoppable) -> None:
    """Make sure ``service.stop()`` runs when the interpreter exits, if nobody called it first."""
    _live_services[id(service)] = service


def unregister_for_exit(service: _Stoppable) -> None:
    _live_services.pop(id(service), None)


@atexit.register
def _stop_all_at_exit() -> None:
    for service in list(_live_services.values()):
        try:
            service.stop()
        except Exception:
            log.exception("failed to stop %r at exit", service)


__all__ = [
    "DevStackError",
    "RunAs",
    "free_ports",
    "spawn",
    "run_checked",
    "terminate",
    "is_running",
    "pids_mentioning",
    "tail_file",
    "make_temp_dir",
    "write_owner",
    "remove_dir",
    "sweep_stale_dirs",
    "register_for_exit",
    "unregister_for_exit",
]
