"""Builds the optional C++ kernels of the fused frozen cell (nas/fast/csrc/) when torch can be imported
at build time, as with the README's `pip install --no-build-isolation`. Without torch (pip's default
isolated build), or if the compiler fails, the package installs without them and carries their source
(package data), which nas/fast/kernels.py compiles on first use into a per-user cache, else runs the
PyTorch ops (docs/install.md). Everything else about the package is in setup.cfg."""

from setuptools import setup

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    setup()
else:

    class OptionalBuild(BuildExtension):
        """build_ext that warns instead of failing the install when the kernels do not compile."""

        def run(self) -> None:
            try:
                super().run()
            except Exception as error:  # noqa: BLE001 - any compiler failure leaves the PyTorch path
                print(f"warning: nas.fast._fused_kernels not built ({error}); the fused cell runs on PyTorch ops")

    setup(
        ext_modules=[
            CppExtension(
                "nas.fast._fused_kernels",
                ["nas/fast/csrc/fused_kernels.cpp"],
                extra_compile_args=["-O3", "-march=native"],
            )
        ],
        cmdclass={"build_ext": OptionalBuild.with_options(use_ninja=False)},
    )
