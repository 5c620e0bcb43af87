"""Paths as a run's config.json stores them: absolute, so a resume or a rerun works from any folder."""

from __future__ import annotations

import os
from pathlib import Path


def absolute(path: str | os.PathLike) -> Path:
    """`path` from the root, `..` resolved, symbolic links kept as given."""
    return Path(os.path.abspath(path))


def absolute_if_exists(spec: str) -> str:
    """A file or folder that exists, as an absolute path; anything else (a shipped name, `lstm`) as given."""
    return str(absolute(spec)) if spec and Path(spec).exists() else spec
