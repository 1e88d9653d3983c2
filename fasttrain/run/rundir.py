"""The run directory: the one atomic file writer, stale temp files, a writability check before any
work, and the lock a run holds on its directory for its whole life.

Every file fasttrain writes (config.toml, checkpoint.pt, summary.json, bench JSON and plots) goes
through ``write_atomic``: a temp file ``.{name}.{pid}.tmp`` beside the target, fsynced, then
``os.replace``d onto it, so a reader or a crash sees the old file or the new one, never half of
one. A kill between the two leaves the temp file behind; ``clean_stale_temps`` removes those.

Portable: nothing here needs POSIX at import time. Where ``os.O_NOFOLLOW`` is missing (Windows)
an ``lstat`` after the open tells a planted link from the file; the lock is ``flock`` where
``fcntl`` exists and a byte-range lock of ``msvcrt`` on Windows; a folder is fsynced where the OS
can open one (not Windows, whose journal orders the rename). docs/platforms.md says what differs.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import shutil
import stat
import sys
import time
from pathlib import Path

from fasttrain.config.read import file_kind
from fasttrain.errors import RunError, reason

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
try:
    import msvcrt
except ImportError:  # POSIX
    msvcrt = None

__all__ = [
    "RunError",
    "RunLock",
    "check_output_file",
    "check_regular",
    "check_writable",
    "clean_stale_temps",
    "open_text",
    "write_atomic",
]
LOCK_NAME = ".lock"
# the temp names write_atomic makes: .{name}.{pid}.tmp
TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")
# O_NOFOLLOW: Linux and macOS refuse a symlink at open; where it is missing, ``open_regular``
# compares the open file with an lstat of the name. O_BINARY: Windows' os.open defaults to text
# mode, where os.write turns every \n byte of a checkpoint into \r\n.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
BINARY = getattr(os, "O_BINARY", 0)


def temp_path(path: Path) -> Path:
    """Where ``write_atomic`` stages ``path``: ``.{name}.{pid}.tmp`` in the same folder."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def check_regular(path, verb: str = "write") -> bool:
    """Whether ``path`` exists; RunError in one line when it is anything but a regular file
    (a symlink is refused, not followed: a run directory may come from someone else)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RunError(f"cannot {verb} {path}: {reason(exc)}") from None
    if not stat.S_ISREG(mode):
        raise RunError(f"cannot {verb} {path}: it is {file_kind(mode)}, not a regular file")
    return True


def check_output_file(path) -> Path:
    """``path`` if ``write_atomic`` can write it, tried for real (its folder exists and takes
    a new file, and it is not a symlink, device or FIFO), else RunError in one line: checked
    before the work whose result it will hold."""
    path = Path(path)
    if not path.parent.is_dir():
        raise RunError(f"cannot write {path}: folder {path.parent} does not exist")
    check_regular(path)
    tmp = temp_path(path)
    try:  # what a permission bit cannot tell (a read-only mount, /proc, a quota)
        os.close(_create_temp(tmp))
        os.unlink(tmp)
    except OSError as exc:
        raise RunError(f"cannot write {path}: {reason(exc)}") from None
    return path


def _create_temp(tmp: Path) -> int:
    """Open a new temp file at ``tmp``: never an existing file or a symlink planted there."""
    # O_CREAT | O_EXCL never opens an existing name, a symlink (dangling or not) included
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | BINARY
    try:
        return os.open(tmp, flags, 0o666)
    except FileExistsError:  # a killed writer's temp (same PID) or something planted there
        os.unlink(tmp)  # removes a link itself, never its target
        return os.open(tmp, flags, 0o666)


def write_atomic(path, data, what: str | None = None) -> None:
    """Replace ``path`` with ``data`` (bytes, str, or a list of byte buffers written one after
    another) all at once; on failure raise RunError, old file intact. A ``path`` that exists
    and is not a regular file (a symlink, a device, a FIFO) is refused before anything is
    written."""
    path = Path(path)
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview, str)) else list(data)
    chunks = [c.encode() if isinstance(c, str) else c for c in chunks]
    existed = check_regular(path)
    tmp = temp_path(path)
    try:
        fd = _create_temp(tmp)
        try:
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                while view:  # os.write may write less than asked (signals, pipes, full disks)
                    view = view[os.write(fd, view) :]
            os.fsync(fd)  # the bytes are on disk before the rename makes them the file
        finally:
            os.close(fd)
        _pause_for_tests(path)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if not isinstance(exc, OSError):
            raise  # Ctrl-C mid-save: the temp is gone, the old file stands
        kept = f"; the previous {what or path.name} is intact" if existed else ""
        raise RunError(f"{reason(exc)} writing {path}{kept}") from None
    fsync_folder(path.parent)


def keep_previous(path, kept) -> None:
    """Make ``kept`` the file ``path`` is now (a hard link, or a copy where links are not
    allowed), atomically: ``kept`` is its old self or ``path``'s, never half of either. A
    ``kept`` that is a link or a device is refused, not followed."""
    path, kept = Path(path), Path(kept)
    if not check_regular(path, "keep"):
        return
    check_regular(kept)
    tmp = temp_path(kept)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a killed writer's (same PID): never a planted link followed
        try:
            os.link(path, tmp, follow_symlinks=False)
        except OSError:  # a file system without hard links (FAT, some network mounts)
            shutil.copyfile(path, tmp, follow_symlinks=False)
        os.replace(tmp, kept)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if not isinstance(exc, OSError):
            raise
        raise RunError(f"{reason(exc)} keeping {path} as {kept.name}") from None
    fsync_folder(kept.parent)


def open_regular(path, flags: int, verb: str = "write") -> int:
    """``os.open(path, flags)`` (binary, created 0o666 if new) for a regular file, never
    through a symlink nor onto a device or FIFO, even one swapped in after ``check_regular``;
    RunError in one line otherwise. Truncate after it, never with O_TRUNC: without O_NOFOLLOW
    the file is known to be the named one only once it is open."""
    fd = os.open(path, flags | NOFOLLOW | BINARY, 0o666)
    opened = os.fstat(fd)
    same = stat.S_ISREG(opened.st_mode)
    if same and not NOFOLLOW:  # the open may have followed a link: is the name this file?
        try:
            named = os.lstat(path)
            same = stat.S_ISREG(named.st_mode) and os.path.samestat(opened, named)
        except OSError:
            same = False
    if not same:
        os.close(fd)
        raise RunError(f"cannot {verb} {path}: not a regular file")
    return fd


def open_text(path, append: bool):
    """``path`` opened for text writing (appending, or truncated), never through a symlink
    nor onto a device or FIFO; RunError in one line otherwise."""
    check_regular(path)
    try:
        fd = open_regular(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0))
    except OSError as exc:
        raise RunError(f"{reason(exc)} opening {path}") from None
    if not append:
        try:
            os.ftruncate(fd, 0)
        except OSError as exc:
            os.close(fd)
            raise RunError(f"{reason(exc)} opening {path}") from None
    # UTF-8 everywhere, as write_atomic encodes (Windows' default would be its code page)
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8", newline="")


# Tests only: FASTTRAIN_TEST_PAUSE_BEFORE_RENAME=NAME:K holds the K-th write of a file named
# NAME between its finished temp file and the rename, so a test can kill the writer there
PAUSE_BEFORE_RENAME = "FASTTRAIN_TEST_PAUSE_BEFORE_RENAME"
_writes: dict = {}


def _pause_for_tests(path: Path) -> None:
    value = os.environ.get(PAUSE_BEFORE_RENAME, "")
    if not value:
        return
    name, colon, count = value.partition(":")
    try:
        hold = int(count) if colon else 1
    except ValueError:
        hold = 0
    if not name or hold < 1:  # at the first write of any file: before the run's work
        raise RunError(
            f"{PAUSE_BEFORE_RENAME}={value}: not NAME or NAME:K; NAME is a file's name "
            "(checkpoint.pt), K which write of it to hold, 1 or more (a test hook: unset it)"
        )
    if name != path.name:
        return
    _writes[name] = _writes.get(name, 0) + 1
    if _writes[name] == hold:
        time.sleep(3600)  # the test kills the process here


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable; where folders cannot be fsynced, rely on the OS."""
    if sys.platform == "win32":  # a folder cannot be opened as a file there; NTFS journals renames
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists (in this PID namespace)."""
    if pid <= 0:  # 0 and negatives address process groups in os.kill, never one writer
        return False
    if sys.platform == "win32":  # there os.kill(pid, 0) would terminate the process
        return _windows_pid_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except (OverflowError, OSError):
        return False
    return True


def _windows_pid_alive(pid: int) -> bool:
    """``pid_alive`` on Windows: the process opens and has no exit code yet."""
    import ctypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.OpenProcess.restype = ctypes.c_void_p
    kernel32.GetExitCodeProcess.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulong))
    kernel32.CloseHandle.argtypes = (ctypes.c_void_p,)
    query, still_active, access_denied = 0x1000, 259, 5  # LIMITED_INFORMATION, STILL_ACTIVE
    if pid > 0xFFFFFFFF:
        return False
    handle = kernel32.OpenProcess(query, False, pid)
    if not handle:  # no such process, or one of another user's that we may not query
        return ctypes.get_last_error() == access_denied
    try:
        code = ctypes.c_ulong()
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return True
        return code.value == still_active
    finally:
        kernel32.CloseHandle(handle)


def clean_stale_temps(folder, held: bool = False) -> list[Path]:
    """Remove ``write_atomic`` temps in ``folder`` left by killed writers; return those removed."""
    # Without ``held`` a temp is stale when its PID is dead or our own: we are not mid-write
    # now, and a restarted container often gets its old PID back. With ``held`` the caller
    # holds the folder's RunLock, so no other run writes here and every temp is stale.
    folder = Path(folder)
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed  # nothing to clean where nothing can be listed
    for entry in entries:
        match = TEMP_PATTERN.match(entry.name)
        if match is None or not entry.is_file() or entry.is_symlink():
            continue
        pid = int(match["pid"])
        if held or pid == os.getpid() or not pid_alive(pid):
            with contextlib.suppress(FileNotFoundError):  # another cleaner got there first
                entry.unlink()
                removed.append(entry)
    return removed


def check_writable(folder) -> None:
    """Fail in one line unless ``folder`` is, or can be made, a writable directory; make nothing."""
    folder = Path(folder)
    existing = folder.absolute()
    while True:  # up to the first path that exists: the folder itself or the parent to make it in
        try:
            os.stat(existing)
            break
        except (FileNotFoundError, NotADirectoryError):  # ENOTDIR: a file is on the way up
            existing = existing.parent
        except OSError as exc:
            raise RunError(f"run directory {folder} cannot be checked: {reason(exc)}") from None
    if not existing.is_dir():
        if existing == folder.absolute():
            raise RunError(f"run directory {folder} is a file, not a directory")
        raise RunError(f"cannot create run directory {folder}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        problem = errno.EACCES
        with contextlib.suppress(OSError, AttributeError):  # no statvfs on Windows
            if os.statvfs(existing).f_flag & os.ST_RDONLY:
                problem = errno.EROFS
        text = reason(OSError(problem, ""))
        raise RunError(f"run directory {folder} is not writable ({existing}: {text})")


# msvcrt locks a byte range, and no other process may read a locked range: lock one byte past
# the PID the holder writes at the start, so a refused run can still name the holder
LOCK_BYTE = 64


def try_lock(fd: int) -> bool:
    """Take an exclusive lock on the open file ``fd`` without waiting: True if taken, False if
    another open file holds it. The OS drops it when the file is closed or its process dies."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        return True
    if msvcrt is not None:
        os.lseek(fd, LOCK_BYTE, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EDEADLK):  # what _locking sets when it is held
                return False
            raise
        return True
    raise OSError(errno.ENOSYS, "no file locks on this platform (neither fcntl nor msvcrt)")


def unlock(fd: int) -> None:
    """Drop ``try_lock``'s lock now (closing the file drops it too; Windows may take a while)."""
    if fcntl is None and msvcrt is not None:
        with contextlib.suppress(OSError):
            os.lseek(fd, LOCK_BYTE, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


class RunLock:
    """An exclusive lock on ``folder/.lock`` naming its holder's PID, held for a run's life.

    The lock (``try_lock``) belongs to the open file, so the OS drops it when the holder exits
    or is killed: a lock file left by a dead process is simply taken over. Taking the lock also
    removes every temp file a killed writer left in the folder. Use as a context manager.
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> None:
        """Create ``folder`` if needed and take the lock, or fail in one line naming its holder."""
        if self.fd is not None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            check_regular(self.path, "lock with")
            fd = open_regular(self.path, os.O_RDWR | os.O_CREAT, "lock with")
        except OSError as exc:
            raise RunError(f"{reason(exc)} locking run directory {self.folder}") from None
        try:
            taken = try_lock(fd)
        except OSError as exc:
            os.close(fd)
            raise RunError(f"{reason(exc)} locking run directory {self.folder}") from None
        if not taken:
            holder = self._holder(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise RunError(
                f"run directory {self.folder} is in use by {who}; "
                "wait for it or choose another --out"
            )
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)  # seek and write, not os.pwrite (POSIX only)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:
            os.close(fd)
            raise RunError(f"{reason(exc)} locking run directory {self.folder}") from None
        self.fd = fd
        clean_stale_temps(self.folder, held=True)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self.fd is not None

    @staticmethod
    def _holder(fd: int) -> int | None:
        """The PID written in the lock file, or None (unreadable, or not yet written)."""
        try:
            os.lseek(fd, 0, os.SEEK_SET)  # seek and read, not os.pread (POSIX only)
            text = os.read(fd, 32).decode("ascii", "replace").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        """Drop the lock if held; the file stays (unlinking it races a process about to lock)."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        unlock(self.fd)
        os.close(self.fd)  # closing the file releases the lock
        self.fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def json_safe(value):
    """NaN and inf as null (in nested dicts and lists too), so JSON files stay valid."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value if not isinstance(value, float) or math.isfinite(value) else None
