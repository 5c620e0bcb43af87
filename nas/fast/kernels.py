"""The C++ elementwise kernels (`nas/fast/csrc/fused_kernels.cpp`), and the highway edge's two
elementwise passes that both fused loops run on them, with PyTorch ops where they are missing.

The kernels come built by the install (the README's `pip install --no-build-isolation`). An install
without them (a wheel from pip's default isolated build, which cannot import torch) carries the C++
source instead: the first layer that needs them compiles it once, with torch's own extension
builder (a C++ compiler and ninja), into a per-user cache (`$NAS_KERNELS_CACHE`, else
`$XDG_CACHE_HOME/nas-tagger/kernels`, one folder per torch, Python, source and processor), saying so
in one log line; later processes load the cached build. Without a compiler or ninja, or when the
build fails, the layer runs its PyTorch ops and one warning line says why.

For an edge s = p + σ(c)(f(h) − p) with the activations saved, a = f(h):
σ' = σ(1 − σ), tanh' = 1 − a², relu' = [a > 0], sigmoid' = a(1 − a); ∂p = ∂s(1 − σ), ∂c = ∂s(a − p)σ',
∂a = ∂s·σ. The kernels know the ops of `OP_CODES`: a fast path supports that op set only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Sequence

import torch

try:
    from nas.fast import _fused_kernels as _kernels

    _kernels_error: ImportError | None = None  # why a built module does not load (None: not built)
except ImportError as error:  # not built when the package was installed, or built against another torch
    _kernels = None
    _kernels_error = error if importlib.util.find_spec("nas.fast._fused_kernels") else None

SOURCE = Path(__file__).resolve().parent / "csrc" / "fused_kernels.cpp"  # package data in a wheel
CFLAGS = ["-O3", "-march=native"]  # as setup.py's
STALE_LOCK_S = 900  # a build lock older than this was left by a killed process (a build takes about a minute)
_compile_pending = _kernels is None and SOURCE.is_file()  # compile on first use (once per process)
_compile_error: str | None = None  # why compiling on first use failed
_compile_lock = threading.Lock()

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
            except Exception as error:  # noqa: BLE001 - e.g. no home folder for the cache: the PyTorch path
                _compile_error = _first_error(error)
            finally:
                _compile_pending = False


def _compile_or_load() -> None:
    global _kernels, _compile_error
    folder = build_directory()
    name = "nas_fused_kernels"
    library, lock, failed = folder / f"{name}.so", folder / "lock", folder / "failed"
    if library.is_file() and not lock.exists():  # built by an earlier process: no compiler needed
        try:
            spec = importlib.util.spec_from_file_location(name, library)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _kernels = module
            return
        except ImportError:  # a broken build: compile again
            pass
    compiler = os.environ.get("CXX", "c++")
    if not shutil.which(compiler):
        _compile_error = f"no C++ compiler ({compiler}) on PATH"
        return
    if not _ninja():
        _compile_error = "ninja is not on PATH (pip install ninja)"
        return
    if failed.is_file():  # a compiler that ran and failed fails again: once per cache folder, not per process
        _compile_error = f"{failed.read_text(encoding='utf-8', errors='replace').strip()} (remove {folder} to retry)"
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # torch's own file baton: one process builds, the others wait for it; a lock left by a killed
        # process would make them wait for ever
        if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink(missing_ok=True)
        started = time.time()
        if lock.exists():
            log.warning(f"nas.fast: waiting for another process compiling the C++ kernels into {folder}")
        else:
            log.warning(
                f"nas.fast: compiling the C++ kernels once into {folder} (about a minute; later runs "
                "load them from there)"
            )
        from torch.utils.cpp_extension import load

        _kernels = load(
            name=name, sources=[str(SOURCE)], extra_cflags=CFLAGS, build_directory=str(folder), verbose=False
        )
        log.info(f"nas.fast: C++ kernels compiled in {time.time() - started:.0f} s")
    except Exception as error:  # noqa: BLE001 - any build failure leaves the PyTorch path
        _compile_error = _first_error(error)
        if isinstance(error, RuntimeError) and "Error building extension" in str(error):
            try:
                failed.write_text(_compile_error + "\n", encoding="utf-8")
            except OSError:
                pass


def _first_error(error: Exception) -> str:
    """One line of a build failure: the compiler's first `error:` line, else the exception's first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    errors = [
        line for line in lines if "error:" in line.lower() and not line.lower().startswith("ninja: build stopped")
    ]
    return ((errors or lines or [type(error).__name__])[0])[:300]


def warn_once_without_kernels() -> None:
    """One log line per process when the C++ kernels are missing (both fused cells call it)."""
    global _warned
    _compile_once()
    if _kernels is None and not _warned:
        _warned = True
        if _compile_error is not None:
            log.warning(
                f"nas.fast: the C++ kernels could not be compiled on first use ({_compile_error}); the "
                "frozen cell runs PyTorch ops, the search cell its autograd path (docs/install.md)"
            )
            return
        if _kernels_error is None:
            why = (
                "were not built when nas-tagger was installed (torch could not be imported by the build, as in "
                "pip's default isolated build, or the compiler failed)"
            )
        else:
            why = f"do not load ({_kernels_error}; built against another torch?)"
        log.warning(
            f"nas.fast: the C++ kernels {why}; the frozen cell runs PyTorch ops, the search cell its autograd path. "
            "To build them, reinstall from the source with torch already installed: "
            "pip install --no-build-isolation SOURCE (README, Setup)"
        )


def _activate_(op: str, h: torch.Tensor) -> None:
    if op == "tanh":
        h.tanh_()
    elif op == "relu":
        h.relu_()
    elif op == "sigmoid":
        h.sigmoid_()


def _activation_grad(op: str, a: torch.Tensor, grad: torch.Tensor, out: torch.Tensor) -> None:
    """out = grad · f'(h), with f' written through the activation's output a = f(h)."""
    if op == "tanh":
        torch.mul(grad, 1 - a * a, out=out)
    elif op == "relu":
        torch.mul(grad, a > 0, out=out)
    elif op == "sigmoid":
        torch.mul(grad, a - a * a, out=out)
    else:
        out.copy_(grad)


def with_kernels(t: torch.Tensor) -> bool:
    if _compile_pending:
        _compile_once()
    return _kernels is not None and t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64)


def highway_forward(
    act: torch.Tensor, prev: torch.Tensor, ops: Sequence[str], codes: list[int], out: torch.Tensor
) -> None:
    """act = [c | h] → [σ(c) | f(h)] in place; out = prev + σ(c)(f(h) − prev). Edges at dim 1."""
    if with_kernels(act):
        return _kernels.highway_forward(act, prev, codes, out)
    H = prev.size(-1)
    sig, a = act[..., :H], act[..., H:]
    sig.sigmoid_()
    for e, op in enumerate(ops):
        _activate_(op, a[:, e])
    torch.addcmul(prev, sig, a - prev, out=out)


def highway_backward(
    grad: torch.Tensor,
    prev: torch.Tensor,
    act: torch.Tensor,
    ops: Sequence[str],
    codes: list[int],
    g: torch.Tensor,
    direct: torch.Tensor,
) -> None:
    """g = [∂c | ∂h] of out = prev + σ(c)(f(h) − prev) from act = [σ(c) | f(h)] and grad = ∂out;
    direct = ∂prev through the highway alone, grad·(1 − σ(c))."""
    if with_kernels(act):
        return _kernels.highway_backward(grad, prev, act, codes, g, direct)
    H = prev.size(-1)
    sig, a = act[..., :H], act[..., H:]
    torch.mul(grad * (a - prev), sig - sig * sig, out=g[..., :H])
    grad_a = grad * sig
    for e, op in enumerate(ops):
        _activation_grad(op, a[:, e], grad_a[:, e], g[:, e, ..., H:])
    torch.sub(grad, grad_a, out=direct)
