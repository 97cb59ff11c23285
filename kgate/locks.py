"""Snakemake's lock files, made safe for lanes: several kgate runs in one workdir (docs/lanes.md, "Locks").

Snakemake 9.27.1 locks files, not workdirs (``snakemake/persistence``): a run
lists its DAG's inputs in ``.snakemake/locks/<i>.input.lock`` and the outputs
it will make in ``<i>.output.lock``, and a run whose outputs another run's
lists name is refused ("Directory cannot be locked"). Its ``FilePersistence``
has four faults when runs share a workdir, each seen or read in 9.27.1:

1. a run that ends removes the whole ``locks`` folder (``shutil.rmtree``), every
   other live run's locks included, so a duplicate start of a running lane is
   no longer refused;
2. two runs that end at once race in that ``rmtree``: the loser fails with
   ``FileNotFoundError`` after all its jobs finished (exit 1; seen in CI with two
   lanes of one campaign ending together);
3. the check (``locked``) and the writing of the lock files are separate steps,
   and a free index is picked by ``os.path.exists`` before ``open``: two runs that
   start together can both pass the check or share one index;
4. a run killed outright (SIGKILL) leaves its lock files, and every later run is
   refused until ``--unlock``.

``install`` replaces ``lock``, ``unlock``, ``cleanup_locks`` and ``_read_locks``
of ``FilePersistence`` in the main Snakemake process (workflow/rules/common.smk)
with this method: a run checks and writes its locks, and later removes them,
under an exclusive ``flock`` on ``.snakemake/kgate-locks.mutex``; each lock file
is created with ``O_EXCL`` and held under a shared ``flock`` by the run that
wrote it for the run's life, so a lock file whose ``flock`` can be taken has no
live owner (the kernel drops a dead process's locks, however it died) and is
removed before the check; a run that ends removes its own lock files only, and
the folder only when it is empty. ``snakemake --unlock`` (``cleanup_locks``)
still removes every lock file, as Snakemake documents.

Limits: a Snakemake process that is not a kgate run (another Snakefile in the
same workdir, or a Snakemake of another version) holds no ``flock`` on its lock
files, and they are taken for a dead run's; ``flock`` on a network file system
is as good as the file system's lock support (NFSv4 maps it to byte-range
locks, which work across clients). The patch is checked against the pinned
Snakemake (the attributes it uses must exist), else a ``KgateError`` names the
version before any job.
"""

from __future__ import annotations

import errno
import fcntl
import inspect
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import count
from typing import IO, Any

from kgate.errors import KgateError

MUTEX = "kgate-locks.mutex"
#: the attributes of Snakemake's FilePersistence the patch relies on (Snakemake 9.27.1)
_USES = ("_lockdir", "_lockfile", "all_inputfiles", "all_outputfiles", "locked")


@contextmanager
def _mutex(persistence: Any) -> Iterator[None]:
    """An exclusive flock on the workdir's lock mutex for the block (blocking: other runs hold it briefly)."""
    with open(os.path.join(persistence.path, MUTEX), "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _owned(path: str) -> bool:
    """Whether a live process holds ``path``'s flock (False for a dead run's file, or one that vanished)."""
    try:
        fh = open(path)
    except FileNotFoundError:
        return False
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False


def _lock_files(lockdir: str) -> list[str]:
    try:
        names = os.listdir(lockdir)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(lockdir, n) for n in names if n.endswith((".input.lock", ".output.lock")))


def remove_dead(lockdir: str) -> list[str]:
    """Remove the lock files no live run holds; returns their paths (call under the mutex)."""
    dead = [p for p in _lock_files(lockdir) if not _owned(p)]
    for p in dead:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    return dead


def _write(persistence: Any, lock_type: str, keys: Iterable[str]) -> None:
    """Write one lock file at the first free index (``O_EXCL``) and keep it flocked; nothing for no keys."""
    lines = [str(k) for k in keys]
    if not lines:
        return
    os.makedirs(persistence._lockdir, exist_ok=True)
    for i in count(0):
        path = os.path.join(persistence._lockdir, f"{i}.{lock_type}.lock")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        fh: IO[str] = os.fdopen(fd, "w")
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
        fh.write("\n".join(lines) + "\n")
        fh.flush()
        persistence._lockfile[lock_type] = path
        persistence._kgate_held = [*getattr(persistence, "_kgate_held", []), fh]
        return


@contextmanager
def _lock(self: Any) -> Iterator[None]:
    from snakemake.exceptions import LockException

    try:
        with _mutex(self):
            dead = remove_dead(self._lockdir)
            if dead:
                print(f"kgate: removed {len(dead)} Snakemake lock file(s) that no live run holds "
                      f"(a killed run's) in {os.path.abspath(self._lockdir)}", file=sys.stderr)
            if self.locked:
                raise LockException()
            self._write_locks("input", (str(f) for f in self.all_inputfiles()))
            self._write_locks("output", (str(f) for f in self.all_outputfiles()))
        yield
    finally:
        if self._lockfile:
            self.unlock()


def _unlock(self: Any) -> None:
    """Remove this run's own lock files; the folder only once it is empty."""
    with _mutex(self):
        for path in self._lockfile.values():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._lockfile.clear()
        for fh in getattr(self, "_kgate_held", []):
            fh.close()
        self._kgate_held = []
        try:
            os.rmdir(self._lockdir)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                raise


def _cleanup_locks(self: Any) -> None:
    """``snakemake --unlock``: every lock file goes, live runs' too (Snakemake's documented meaning)."""
    with _mutex(self):
        shutil.rmtree(self._lockdir, ignore_errors=False, onerror=_gone_is_fine)


def _gone_is_fine(func: Any, path: str, exc_info: Any) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def _read_locks(self: Any) -> Iterator[tuple[str, str]]:
    """The listed paths of every lock file, by kind; a file removed while it is read is skipped."""
    for path in _lock_files(self._lockdir):
        kind = "input" if path.endswith(".input.lock") else "output"
        try:
            with open(path) as fh:
                lines = fh.read().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            if line.strip():
                yield kind, line.strip()


def install() -> None:
    """Patch Snakemake's ``FilePersistence`` with the method above (idempotent); a Snakemake without the
    attributes it relies on is a ``KgateError`` naming its version."""
    import snakemake
    from snakemake.persistence.file import FilePersistence

    if getattr(FilePersistence, "_kgate_lanes", False):
        return
    source = inspect.getsource(FilePersistence.__init__)
    missing = [a for a in _USES if f"self.{a}" not in source and not hasattr(FilePersistence, a)]
    if missing:
        raise KgateError(f"Snakemake {getattr(snakemake, '__version__', '?')} has no {', '.join(missing)} in "
                         "its FilePersistence: kgate's lane-safe locks are written for Snakemake 9.27.1 "
                         "(pyproject.toml pins it)")
    FilePersistence.lock = _lock
    FilePersistence.unlock = _unlock
    FilePersistence.cleanup_locks = _cleanup_locks
    FilePersistence._read_locks = _read_locks
    FilePersistence._write_locks = _write
    FilePersistence._kgate_lanes = True
