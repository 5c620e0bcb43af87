"""Where the shipped resources are: the published and found cells (`cells/`) and the character LMs
(`charlm/`) that `--cell NAME` and `--embeddings flair:NAME:NAME` resolve.

They live in the repository's top-level `resources/` folder, which an installed wheel holds as the
package `nas.resources` (setup.cfg maps one onto the other). Code run from a checkout reads the
checkout's folder, so a change there is seen at once; `$NAS_RESOURCES` overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError

PACKAGE = "nas.resources"


def resources_dir() -> Path:
    """$NAS_RESOURCES, else `resources/` of the checkout this code runs from, else the installed package."""
    if os.environ.get("NAS_RESOURCES"):
        given = Path(os.environ["NAS_RESOURCES"])
        if not (given / "cells").is_dir():  # else every shipped name is "not a shipped cell (shipped: )"
            what = (
                "no such folder" if not given.exists() else "not a folder" if not given.is_dir() else "no cells/ in it"
            )
            raise InputError(
                f"NAS_RESOURCES={given}: {what}; it names a resources/ folder (cells/, charlm/), or unset it "
                "for the toolkit's own"
            )
        return given
    root = Path(__file__).resolve().parents[2]  # nas/common/ -> the checkout
    if (root / "setup.cfg").is_file() and (root / "resources" / "cells").is_dir():
        return root / "resources"
    from importlib.resources import files

    try:
        return Path(str(files(PACKAGE)))
    except ModuleNotFoundError:
        raise InputError(
            f"the shipped resources are missing: no package {PACKAGE} is installed beside "
            f"{root / 'nas'} (reinstall the toolkit, or set NAS_RESOURCES to a resources/ folder)"
        ) from None
