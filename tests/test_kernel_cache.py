"""The kernels' cache (`nas.fast.kernels`) as a user meets it: a compile killed half-way is taken over by the
next process at once, saying so in one line; a process compiling is waited for; a lock of the wrong kind is
replaced, and a link is never written through; the builds an install carries are chosen by the CPU's ISA
level; `bin/build-kernels` builds ahead of first use, or says in one line why it cannot.

Torch's builder is replaced by a stand-in that takes torch's own file baton (`FileBaton`, which waits for
ever while a killed build's baton stays) and returns a module, so nothing here compiles."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest
import torch.utils.cpp_extension
from click.testing import CliRunner
from torch.utils.file_baton import FileBaton

from nas.cli import build_kernels
from nas.fast import isa_builds, kernels

# A process that takes the build lock as a compiling one does, then builds for a long time (killed by the test).
COMPILING = textwrap.dedent(
    """
    import os, time, torch.utils.cpp_extension
    from nas.fast import kernels

    def load(name, sources, extra_cflags, build_directory, verbose):
        open(os.path.join(build_directory, "lock"), "x").close()  # torch's baton, as its builder takes it
        open(os.path.join(build_directory, "started"), "w").close()
        time.sleep(600)

    torch.utils.cpp_extension.load = load
    kernels._kernels, kernels._level, kernels._compile_pending = None, None, True  # as an install without them
    kernels.compiled()
    """
)


def fake_load(calls: list):
    """torch's `load` as far as the cache goes: its baton taken (waiting while one exists), a module returned."""

    def load(name, sources, extra_cflags, build_directory, verbose):
        baton = FileBaton(os.path.join(build_directory, "lock"), wait_seconds=0.05)
        if not baton.try_acquire():
            baton.wait()  # torch waits while the file exists: for ever, if its holder was killed
            raise AssertionError("waited on a baton")
        try:
            calls.append(build_directory)
            return types.SimpleNamespace(__file__=os.path.join(build_directory, f"{name}.so"))
        finally:
            baton.release()

    return load


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty kernel cache, and this process's kernels not yet looked for there; torch's builder a stand-in."""
    monkeypatch.setenv("NAS_KERNELS_CACHE", str(tmp_path / "cache"))
    for name, value in (("_kernels", None), ("_level", None), ("_compile_pending", True), ("_compile_error", None)):
        monkeypatch.setattr(kernels, name, value)
    monkeypatch.setattr(kernels, "_warned", False)
    monkeypatch.setattr(kernels, "WAIT_NOTE_S", 0.2)
    calls: list = []
    monkeypatch.setattr(torch.utils.cpp_extension, "load", fake_load(calls))
    return calls


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nas.fast.kernels" and r.levelno >= logging.WARNING]


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_compile_killed_half_way_is_taken_over_at_once_in_one_line(cache, tmp_path, caplog):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    compiling = subprocess.Popen([sys.executable, "-c", COMPILING], env=env)
    folder = kernels.build_directory()
    try:
        _wait_for(folder / "started")
    finally:
        compiling.send_signal(signal.SIGKILL)
        compiling.wait()
    assert (folder / "lock").exists() and (folder / kernels.BUILD_LOCK).read_text().strip() == str(compiling.pid)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="nas.fast.kernels"):
        module = kernels.compiled()
    assert time.monotonic() - started < 10 and module is not None and cache == [str(folder)]
    assert _lines(caplog) == [
        f"nas.fast: took over the C++ kernels' build in {folder}, left by pid {compiling.pid}, which ended before "
        "it finished (killed?)",
        f"nas.fast: compiling the C++ kernels once into {folder} (about a minute; later runs load them from there)",
    ]
    assert not (folder / "lock").exists() and (folder / kernels.BUILD_LOCK).read_text() == ""  # ended: no pid left


def test_a_live_compiler_is_waited_for_and_named(cache, tmp_path, caplog):
    folder = kernels.build_directory()
    folder.mkdir(parents=True)
    holding = textwrap.dedent(
        f"""
        import fcntl, os, time
        fd = os.open({str(folder / kernels.BUILD_LOCK)!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, f"{{os.getpid()}}\\n".encode(), 0)
        open({str(folder / "held")!r}, "w").close()
        time.sleep(1.5)
        os.ftruncate(fd, 0)  # a build that ended
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", holding])
    try:
        _wait_for(folder / "held")
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="nas.fast.kernels"):
            assert kernels.compiled() is not None
        assert time.monotonic() - started > 0.5  # it waited for the holder
    finally:
        holder.wait()
    assert _lines(caplog) == [
        f"nas.fast: waiting for pid {holder.pid}, which is compiling the C++ kernels into {folder}",
        f"nas.fast: compiling the C++ kernels once into {folder} (about a minute; later runs load them from there)",
    ]


def test_a_lock_of_the_wrong_kind_is_replaced_and_a_link_never_written_through(cache, tmp_path, caplog):
    folder = kernels.build_directory()
    (folder / kernels.BUILD_LOCK).mkdir(parents=True)
    (folder / kernels.BUILD_LOCK / "inside").write_text("x")
    (folder / "lock").mkdir()  # torch's baton, a folder: torch would wait for ever
    with caplog.at_level(logging.WARNING, logger="nas.fast.kernels"):
        assert kernels.compiled() is not None
    assert _lines(caplog)[0] == (
        f"nas.fast: took over the C++ kernels' build in {folder}, left by a folder in place of the lock file "
        f"{folder / kernels.BUILD_LOCK}"
    )
    assert (folder / kernels.BUILD_LOCK).is_file() and not (folder / "lock").exists()

    users = tmp_path / "notes.txt"
    users.write_text("the user's own\n")
    (folder / kernels.BUILD_LOCK).unlink()
    (folder / kernels.BUILD_LOCK).symlink_to(users)
    kernels._compile_pending, kernels._kernels = True, None
    assert kernels.compiled() is not None
    assert users.read_text() == "the user's own\n" and not (folder / kernels.BUILD_LOCK).is_symlink()


def test_the_widest_build_the_cpu_runs_is_loaded(monkeypatch):
    assert isa_builds.runnable("AVX512") == ["AVX512", "AVX2", "DEFAULT"]
    assert isa_builds.runnable("AVX2") == ["AVX2", "DEFAULT"] and isa_builds.runnable("SVE256") == ["DEFAULT"]
    assert isa_builds.levels_for("x86_64") == ["AVX512", "AVX2", "DEFAULT"] and isa_builds.levels_for("aarch64") == [
        "DEFAULT"
    ]
    built = {f"nas.fast.{isa_builds.MODULES[level]}": types.ModuleType(level) for level in ("AVX2", "DEFAULT")}
    monkeypatch.setattr(kernels.importlib.util, "find_spec", lambda name: name in built or None)
    monkeypatch.setattr(kernels.importlib, "import_module", built.__getitem__)
    for capability, level in (("AVX512", "AVX2"), ("AVX2", "AVX2"), ("DEFAULT", "DEFAULT")):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
        module, got, error = kernels._installed()
        assert (module.__name__, got, error) == (level, level, None)


def test_build_kernels_builds_ahead_of_first_use_or_says_why_not_in_one_line(cache, monkeypatch):
    done = CliRunner().invoke(build_kernels.main, [])
    assert done.exit_code == 0 and done.output == (
        f"C++ kernels ready: compiled for this processor ({kernels.build_directory() / 'nas_fused_kernels.so'})\n"
    )
    monkeypatch.setenv("NAS_KERNELS_CACHE", str(kernels.cache_root().parent / "other"))
    monkeypatch.setenv("CXX", "no-such-compiler")
    kernels._kernels = None
    failed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[1] / "bin" / "build-kernels")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    if kernels._installed()[0] is not None:  # an install that carries them: nothing to build
        assert failed.returncode == 0 and failed.stdout.startswith("C++ kernels ready: the install's ")
        return
    assert failed.returncode == 2 and failed.stdout == ""
    assert failed.stderr == (
        "error: the C++ kernels cannot be built here: no C++ compiler (no-such-compiler) on PATH; the cells "
        "run their definition through autograd instead (the same results, slower)\n"
    )


def test_a_cache_built_ahead_that_this_user_cannot_write_still_loads(cache, monkeypatch, caplog):
    folder = kernels.build_directory()
    folder.mkdir(parents=True)
    (folder / "nas_fused_kernels.so").write_bytes(b"built by nas-build-kernels")

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(kernels, "_open_lock", refused)  # root ignores modes: refuse as a read-only cache would
    monkeypatch.setattr(kernels, "_load_library", lambda library, name: types.SimpleNamespace(__file__=str(library)))
    with caplog.at_level(logging.WARNING, logger="nas.fast.kernels"):
        assert kernels.compiled().__file__ == str(folder / "nas_fused_kernels.so")
    assert _lines(caplog) == [] and cache == []  # loaded, nothing compiled, nothing said
