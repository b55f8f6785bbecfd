"""The watchdog of one command run: when the process running the run dies before the run is over (SIGKILL, the OOM
killer, a scheduler ending the job), it ends the command's process group and removes the run's temporary directory.

The watchdog is a small process of its own: this file, run by the same interpreter with ``-I -S`` (the standard
library alone), in a session of its own so that no signal meant for the sweep reaches it. It reads a pipe whose
write end only the run's process holds: the command's process group id once the command started, then ``done``
when the run is over (its group already ended, its directory removed). The pipe closing without ``done`` means the
run's process is gone: SIGTERM to the group, SIGKILL to what is left after a grace period, the directory removed.
A parent-death signal would reach only the command itself, not the processes it started; the pipe closes however
the run's process ends, whichever of its threads started the command.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the watchdog itself imports as little as it can: it starts with every run
    import subprocess
    from pathlib import Path

GRACE_S = 3.0


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def end_group(pgid: int, grace: float = GRACE_S) -> None:
    """SIGTERM to process group ``pgid``, SIGKILL to what is left of it after ``grace`` seconds."""
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while group_exists(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    signal_group(pgid, signal.SIGKILL)


class Watchdog:
    """The run's end of the pipe: :meth:`watch` names the command's group, :meth:`release` says the run is over."""

    def __init__(self, proc: subprocess.Popen[bytes], fd: int) -> None:
        self.proc, self.fd = proc, fd

    def watch(self, pgid: int) -> None:
        try:
            os.write(self.fd, f"{pgid}\n".encode())
        except OSError:
            pass  # the watchdog is gone (killed by hand): the run goes on, ended by this process as before

    def release(self) -> None:
        """The run is over: the watchdog exits leaving everything as it is; reaped here."""
        try:
            os.write(self.fd, b"done\n")
        except OSError:
            pass  # it is gone already
        finally:
            os.close(self.fd)
        self.proc.wait()


def start_watchdog(directory: Path) -> Watchdog:
    """A watchdog for the run whose temporary directory is ``directory`` (the command not started yet)."""
    import subprocess

    read, write = os.pipe()  # neither end is inherited by the command: os.pipe's descriptors are not inheritable
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", __file__, str(read), str(directory)], pass_fds=(read,),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return Watchdog(proc, write)


def _main(fd: int, directory: str) -> None:
    said = b""
    while chunk := os.read(fd, 4096):
        said += chunk
    words = said.split()
    if b"done" in words:
        return
    groups = [int(w) for w in words if w.isdigit()]
    if groups:
        end_group(groups[-1])
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep's Ctrl-C is the sweep's to handle
    _main(int(sys.argv[1]), sys.argv[2])
