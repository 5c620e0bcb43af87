"""The C++ kernels (`nas/fast/csrc/fused_kernels.cpp`) that the CPU's fused paths run on: how they are
found, compiled and loaded.

The kernels come built by the install (the README's `pip install --no-build-isolation`), on x86-64 once per
ISA level (`nas.fast.isa_builds`): the widest build this CPU runs is loaded. An install without them (a
wheel from pip's default isolated build, which cannot import torch) carries the C++ source instead: the
first layer that needs them, or `nas-build-kernels` ahead of it, compiles it once for this processor
(`-march=native`) with torch's own extension builder (a C++ compiler and ninja), into a per-user cache
(`$NAS_KERNELS_CACHE`, else `$XDG_CACHE_HOME/nas-tagger/kernels`, one folder per torch, Python, source and
processor), saying so in one log line; later processes load the cached build. Processes starting together
take turns on a lock (an flock, which a killed process drops): one compiles, the others wait for it and
load its build, and a build left half-done by a killed process is taken over. Without a compiler or ninja,
or when the build fails, the cells run their definition (autograd) and one warning line says why and what
to do.

For an edge s = p + σ(c)(f(h) − p) with the activations saved, a = f(h), the kernels' highway passes use:
σ' = σ(1 − σ), tanh' = 1 − a², relu' = [a > 0], sigmoid' = a(1 − a); ∂p = ∂s(1 − σ), ∂c = ∂s(a − p)σ',
∂a = ∂s·σ. The kernels know the ops of `OP_CODES`: a fast path supports that op set only.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib
import importlib.util
import logging
import os
import platform
import shutil
import stat
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
import torch

from . import isa_builds


def _installed() -> tuple[ModuleType | None, str | None, ImportError | None]:
    """The widest build of the kernels the install carries that this CPU runs: (module, its ISA level, None),
    or (None, None, why the first one there did not load; None where the install has none)."""
    failure = None
    for level in isa_builds.runnable(torch.backends.cpu.get_cpu_capability()):
        name = f"nas.fast.{isa_builds.MODULES[level]}"
        if importlib.util.find_spec(name) is None:
            continue
        try:
            return importlib.import_module(name), level, None
        except ImportError as error:  # built against another torch
            failure = failure or error
    return None, None, failure


# _kernels_error: why a built module does not load (None: none built)
_kernels, _level, _kernels_error = _installed()
SOURCE = Path(__file__).resolve().parent / "csrc" / "fused_kernels.cpp"  # package data in a wheel
CFLAGS = ["-O3", "-march=native"]  # compiled on the machine that runs them
_compile_pending = _kernels is None and SOURCE.is_file()  # compile on first use (once per process)
_compile_error: str | None = None  # why compiling on first use failed
_compile_lock = threading.Lock()
BUILD_LOCK = "build.lock"  # in the cache folder: flocked by the process that compiles or loads the build there
TORCH_BATON = "lock"  # torch's own, inside its builder: a killed build leaves it, and torch then waits for ever
WAIT_NOTE_S = 2.0  # say that this process waits for another's compile once it has waited this long

OP_CODES = {"identity": 0, "tanh": 1, "relu": 2, "sigmoid": 3}  # as in nas/fast/csrc/fused_kernels.cpp
_warned = False
log = logging.getLogger(__name__)


def compiled() -> ModuleType | None:
    """The C++ kernels, or None when the install did not build them and they cannot be compiled here
    (read at each call, so tests can take them away)."""
    _compile_once()
    return _kernels


def built() -> bool:
    """Whether the C++ kernels are built (else one warning line, once)."""
    warn_once_without_kernels()
    return _kernels is not None


def which() -> str:
    """Which kernels run, in words: the install's build of an ISA level, a build in the cache, or none."""
    _compile_once()
    if _kernels is None:
        return "none (the cells run their definition)"
    if _level is not None:
        return f"the install's {_level} build ({_kernels.__file__})"
    return f"compiled for this processor ({_kernels.__file__})"


def cache_root() -> Path:
    """Where kernels compiled on first use are kept: `$NAS_KERNELS_CACHE`, else the user's cache folder."""
    if os.environ.get("NAS_KERNELS_CACHE"):
        return Path(os.environ["NAS_KERNELS_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nas-tagger" / "kernels"


def build_directory() -> Path:
    """This install's folder in the cache: one per torch, Python, source, flags and processor (the
    build is `-march=native`, so a cache shared between machines keeps one build per kind)."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(" ".join([*CFLAGS, platform.machine(), _cpu_flags()]).encode())
    return (
        cache_root()
        / f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-{digest.hexdigest()[:16]}"
    )


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            return next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()


def _ninja() -> str | None:
    """ninja on PATH, else the one the `ninja` package put beside this Python (a venv whose bin/ is
    not on PATH, as when a console script runs without activating it); that folder then joins PATH."""
    if shutil.which("ninja"):
        return shutil.which("ninja")
    beside = Path(sys.executable).parent / "ninja"
    if beside.is_file() and os.access(beside, os.X_OK):
        os.environ["PATH"] = os.pathsep.join(filter(None, [str(beside.parent), os.environ.get("PATH")]))
        return str(beside)
    return None


def _compile_once() -> None:
    """Compile the shipped C++ source into the cache, or load it from there (first call only; other
    threads wait for it)."""
    global _compile_pending, _compile_error
    if not _compile_pending:
        return
    with _compile_lock:
        if _compile_pending:
            try:
                _compile_or_load()
            except Exception as error:  # noqa: BLE001 - e.g. no home folder for the cache: the definition
                _compile_error = _first_error(error)
            finally:
                _compile_pending = False


def compile_now(rebuild: bool = False) -> str:
    """Compile the kernels into the cache now, or load them from there (`nas-build-kernels`), whatever this
    process did before; `rebuild` first removes this install's cache folder (a failed build, say). Returns
    `which()`; raises RuntimeError with the reason where no kernels can run."""
    global _compile_pending, _compile_error, _kernels, _level
    if _kernels is not None and _level is not None:
        return which()
    if not SOURCE.is_file():
        raise RuntimeError(f"the kernels' source is not installed ({SOURCE})")
    if rebuild and build_directory().exists():
        shutil.rmtree(build_directory())
    _kernels, _compile_error, _compile_pending = None, None, True
    _compile_once()
    if _kernels is None:
        raise RuntimeError(_compile_error or "the kernels did not load")
    return which()


def _remove(path: Path) -> str | None:
    """Remove whatever is at `path` (a file, a link, a folder), without following a link; what it was, or None
    where nothing was there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
        return "a folder"
    path.unlink()
    return "a regular file" if stat.S_ISREG(mode) else "a link" if stat.S_ISLNK(mode) else "a special file"


def _open_lock(path: Path) -> tuple[int, str | None]:
    """`path` opened for an flock, without following a link: (descriptor, what was removed to make it a
    regular file, or None). A folder, link or special file in its place was left by something else (not
    this toolkit's build), and no process can be building behind it: it is removed."""
    replaced = None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as error:
            if error.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EEXIST):
                raise
            replaced = _remove(path)
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd, replaced
        os.close(fd)
        replaced = _remove(path)


def _lock_build(folder: Path) -> tuple[int, bool]:
    """Hold the cache folder's build lock (an flock, which the system drops when its holder ends, however it
    ends), waiting for a live holder; take over from a dead one, saying so in one line. The file then holds
    this pid until `_unlock_build`. Returns the descriptor, and whether a build was left unfinished there."""
    path = folder / BUILD_LOCK
    fd, replaced = _open_lock(path)
    waited, started = False, time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not waited and time.monotonic() - started >= WAIT_NOTE_S:
                waited = True
                holder = _pid(fd)
                log.warning(
                    f"nas.fast: waiting for pid {holder or '(unknown)'}, which is compiling the C++ kernels into "
                    f"{folder}"
                )
            time.sleep(0.1)
    left = _pid(fd)
    baton = _remove(folder / TORCH_BATON)
    took_over = bool(replaced or (left and left != os.getpid()) or baton)
    if took_over:
        was = f"pid {left}, which ended before it finished (killed?)" if left else "a process that ended (killed?)"
        if replaced:
            was = f"{replaced} in place of the lock file {path}"
        log.warning(f"nas.fast: took over the C++ kernels' build in {folder}, left by {was}")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd, took_over


def _unlock_build(fd: int) -> None:
    """Empty the lock file (a build that ended, not one that died) and drop the lock."""
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _load_library(library: Path, name: str) -> ModuleType | None:
    try:
        spec = importlib.util.spec_from_file_location(name, library)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except ImportError:  # a broken build: compile again
        return None


def _compile_or_load() -> None:
    global _kernels, _compile_error, _level
    folder = build_directory()
    name = "nas_fused_kernels"
    library, failed = folder / f"{name}.so", folder / "failed"
    if folder.exists() and not folder.is_dir():
        _compile_error = f"{folder} is not a folder (remove it)"
        return
    fd = None
    try:
        if folder.is_dir():
            try:
                fd, took_over = _lock_build(folder)  # a process compiling there: wait for it
            except OSError:  # a cache this user cannot write (built ahead for every user): load what is there
                fd, took_over = None, False
            if took_over:  # its build may be half-written
                library.unlink(missing_ok=True)
            elif library.is_file():  # built by an earlier process: no compiler needed
                _kernels = _load_library(library, name)
                if _kernels is not None:
                    _level = None
                    return
        compiler = os.environ.get("CXX", "c++")
        if not shutil.which(compiler):
            _compile_error = f"no C++ compiler ({compiler}) on PATH"
            return
        if not _ninja():
            _compile_error = "ninja is not on PATH (pip install ninja)"
            return
        if failed.is_file():  # a compiler that ran and failed fails again: once per cache folder, not per process
            reason = failed.read_text(encoding="utf-8", errors="replace").strip()
            _compile_error = f"{reason} (remove {folder} to retry)"
            return
        if fd is None:
            folder.mkdir(parents=True, exist_ok=True)
            fd, _ = _lock_build(folder)
        started = time.time()
        log.warning(
            f"nas.fast: compiling the C++ kernels once into {folder} (about a minute; later runs load them from there)"
        )
        from torch.utils.cpp_extension import load

        _kernels = load(
            name=name, sources=[str(SOURCE)], extra_cflags=CFLAGS, build_directory=str(folder), verbose=False
        )
        _level = None
        log.info(f"nas.fast: C++ kernels compiled in {time.time() - started:.0f} s")
    except Exception as error:  # noqa: BLE001 - any build failure leaves the definition
        _compile_error = _first_error(error)
        if isinstance(error, RuntimeError) and "Error building extension" in str(error):
            try:
                failed.write_text(_compile_error + "\n", encoding="utf-8")
            except OSError:
                pass
    finally:
        if fd is not None:
            _unlock_build(fd)


def _first_error(error: Exception) -> str:
    """One line of a build failure: the compiler's first `error:` line, else the exception's first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    errors = [
        line for line in lines if "error:" in line.lower() and not line.lower().startswith("ninja: build stopped")
    ]
    return ((errors or lines or [type(error).__name__])[0])[:300]


# What a user without the kernels needs, in the warning itself: what runs instead, and how to get them.
_INSTEAD = "the cells run their definition through autograd (the same results, slower)"
_TO_BUILD = (
    "to build them, install a C++ compiler ($CXX, else c++) and ninja (pip install ninja), then run "
    "nas-build-kernels (bin/build-kernels in a checkout)"
)


def warn_once_without_kernels() -> None:
    """One log line per process when the C++ kernels are missing (both fused cells call it): why, what runs
    instead, and how to build them, with nothing to look up elsewhere."""
    global _warned
    _compile_once()
    if _kernels is None and not _warned:
        _warned = True
        if _compile_error is not None:
            log.warning(
                f"nas.fast: the C++ kernels could not be compiled on first use ({_compile_error}); {_INSTEAD}; "
                f"{_TO_BUILD}"
            )
            return
        if _kernels_error is None:
            why = "were not built when nas-tagger was installed, and their source is not installed"
        else:
            why = f"do not load ({_kernels_error}; built against another torch?)"
        log.warning(
            f"nas.fast: the C++ kernels {why}; {_INSTEAD}; to build them, reinstall nas-tagger with torch already "
            "installed: pip install --no-build-isolation nas-tagger (or from its source folder)"
        )


def with_kernels(t: torch.Tensor) -> bool:
    """Whether the C++ kernels are built (else one warning line) and take `t` (a CPU tensor in float32/64)."""
    warn_once_without_kernels()
    return _kernels is not None and t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64)
