"""`bin/build-kernels`: build the fused cells' C++ kernels now, ahead of their first use."""

from __future__ import annotations

import click

from nas.common.cli import command
from nas.common.errors import InputError


@command()
@click.option(
    "--rebuild",
    is_flag=True,
    help="Remove this install's build in the cache first, and compile anew (after a failed build, or a new compiler).",
)
def main(rebuild) -> None:
    """Make the C++ kernels of the fused cells ready before their first use, so that a service or a CI image
    does not spend a minute compiling them on its first request.

    An install built beside torch (pip install --no-build-isolation) carries them, one build per ISA level
    (AVX-512, AVX2, any x86-64), and picks the widest this CPU runs: nothing to do. A wheel from pip's default
    build carries their source, which this compiles for this processor into the kernel cache
    ($NAS_KERNELS_CACHE, else ~/.cache/nas-tagger/kernels), where every later process loads it; it needs a
    C++ compiler ($CXX, else c++) and ninja. Prints which kernels run; where none can, exits 2 with the
    reason (the cells then run their definition through autograd: the same results, slower).

    \b
    Examples:
        bin/build-kernels
        NAS_KERNELS_CACHE=/opt/nas-kernels bin/build-kernels
        bin/build-kernels --rebuild
    """
    from nas import speed

    try:
        ready = speed.compile_kernels(rebuild=rebuild)
    except (RuntimeError, OSError) as error:
        raise InputError(
            f"the C++ kernels cannot be built here: {error}; the cells run their definition through autograd "
            "instead (the same results, slower)"
        ) from None
    click.echo(f"C++ kernels ready: {ready}")


if __name__ == "__main__":
    main()
