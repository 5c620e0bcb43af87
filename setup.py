"""Builds the optional C++ kernels of the fused cells (nas/fast/csrc/) when torch can be imported at build
time, as with the README's `pip install --no-build-isolation`: on x86-64 once per ISA level
(nas/fast/isa_builds.py: AVX-512, AVX2 and the baseline every x86-64 host runs), never for the build
machine's own processor, so the wheel runs anywhere and picks the widest build its CPU runs. Without torch
(pip's default isolated build), or if the compiler fails, the package installs without them and carries
their source (package data), which nas/fast/kernels.py compiles on first use into a per-user cache (or
`nas-build-kernels` ahead of it), else runs the cells' definition (docs/install.md). Everything else about the
package is in setup.cfg."""

import importlib.util
import platform
from pathlib import Path

from setuptools import setup

_spec = importlib.util.spec_from_file_location("isa_builds", Path(__file__).parent / "nas" / "fast" / "isa_builds.py")
isa_builds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(isa_builds)

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    setup()
else:

    class OptionalBuild(BuildExtension):
        """build_ext that warns instead of failing the install when a build of the kernels does not compile
        (the others, and the cells' definition, remain)."""

        def run(self) -> None:
            try:
                super().run()
            except Exception as error:  # noqa: BLE001 - any other failure leaves the PyTorch path
                print(f"warning: nas.fast's kernels not built ({error}); the fused cells run on PyTorch ops")

        def finalize_options(self) -> None:
            super().finalize_options()
            if self.parallel is None:
                self.parallel = True  # the builds at once, one per core

        def build_extension(self, ext) -> None:
            try:
                super().build_extension(ext)
            except Exception as error:  # noqa: BLE001 - any compiler failure leaves the other builds
                print(f"warning: {ext.name} not built ({error}); the fused cells use another build or PyTorch ops")

    SOURCE = Path("nas", "fast", "csrc", "fused_kernels.cpp")

    def source_of(level: str) -> str:
        """The kernels' source for one build: distutils names an object file after its source, so builds of
        one file would share (and, built at once, overwrite) one object; each level but DEFAULT gets a file of
        its own in build/ that includes the source."""
        if level == "DEFAULT":
            return str(SOURCE)
        wrapper = Path("build", "kernel-sources", f"fused_kernels_{level.lower()}.cpp")
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(f'#include "{SOURCE.resolve()}"\n', encoding="utf-8")
        return str(wrapper)

    setup(
        ext_modules=[
            CppExtension(
                f"nas.fast.{isa_builds.MODULES[level]}",
                [source_of(level)],
                extra_compile_args=["-O3", *isa_builds.FLAGS[level]],
                optional=True,  # an --inplace build copies those that were built
            )
            for level in isa_builds.levels_for(platform.machine())
        ],
        cmdclass={"build_ext": OptionalBuild.with_options(use_ninja=False)},
    )
