"""``python -m kgate.testrun.guard FD -- COMMAND...``: a process tree that cannot outlive its stage.

Why: the gate's pytest runs in a session of its own (so that a timeout or a
signal to the stage kills the whole test tree, pytest-xdist's workers
included, with one ``killpg``), which also puts it out of reach of a signal
to the workflow's process group: a SIGKILL of the Snakemake process group
used to leave the gate's pytest running, writing into results/.

Method: :func:`guarded` (used by ``kgate.testrun.runner`` for gate runs and by
the ncu stage for its profiler, the two trees kgate starts in sessions of
their own) starts this guard as the leader of the new session with the read
end of a pipe whose write end only the stage process holds (kgate's pipes
are never inherited by other children). The guard runs
COMMAND as its child, in its process group, and waits for the first of two
things: COMMAND ends (the guard ends the same way: its exit status, or the
signal that killed it, raised again on itself with core dumps off, so the
runner classifies the run exactly as before), or the pipe reads end of file:
the stage is gone, by whatever means, SIGKILL included. Then the guard kills
its whole process group with SIGKILL (COMMAND, its workers, anything the
tests started that stayed in the group), itself with it.

Limits: a process that leaves the group (``setsid``) is not followed; the
guard adds one Python start (tens of milliseconds) to a gate run.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def guarded(cmd: list[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """Start ``cmd`` under the guard, in a new session whose group id is the returned process's pid (kill the
    tree with ``os.killpg(proc.pid, ...)``). Leaving the block, or this process dying, ends the tree."""
    alive_r, alive_w = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "kgate.testrun.guard", str(alive_r), "--", *cmd],
                                start_new_session=True, pass_fds=(alive_r,), **popen)
    finally:
        os.close(alive_r)
    try:
        yield proc
    finally:
        os.close(alive_w)


def _watch(fd: int) -> None:
    """Block until the stage's end of the pipe is closed, then kill this process group."""
    while True:
        try:
            chunk = os.read(fd, 1)
        except InterruptedError:
            continue
        if not chunk:
            os.killpg(0, signal.SIGKILL)
            return


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m kgate.testrun.guard FD -- COMMAND...", file=sys.stderr)
        return 2
    fd = int(argv[0])
    proc = subprocess.Popen(argv[2:])
    threading.Thread(target=_watch, args=(fd,), daemon=True).start()
    code = proc.wait()
    if code < 0:
        # the same death as the command's, without a core file in the worktree (the guard's cwd)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default action is to continue
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
