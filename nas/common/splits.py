"""Where a data directory keeps its train / valid / test files, for every command that reads one."""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .files import require_file
from .paths import absolute

SPLITS = ("train", "valid", "test")


def find_splits(
    data: str | Path | None,
    train: str | None = None,
    valid: str | None = None,
    test: str | None = None,
    needed: tuple[str, ...] = SPLITS,
) -> dict[str, Path]:
    """Locate the `needed` splits in DIR (`ptb.train.txt`, `wiki.valid.tokens`, `test.txt`, ...), as
    absolute paths: a run's config.json names them, and a resume may start in another folder."""
    given = {"train": train, "valid": valid, "test": test}
    found: dict[str, Path] = {}
    if data is not None:
        root = Path(data)
        if not root.is_dir():
            raise InputError(f"{root}: no such directory")
        for split in needed:
            if given[split]:
                continue
            matches = sorted(
                p
                for p in root.iterdir()
                if p.is_file() and split in p.name.split(".") or p.is_file() and p.stem == split
            )
            if not matches:
                raise InputError(
                    f"{root}: no {split} split (expected a file like ptb.{split}.txt, "
                    f"wiki.{split}.tokens or {split}.txt, or pass --{split})"
                )
            if len(matches) > 1:  # e.g. ptb.* and wiki.* in one folder: which one is meant is not ours to guess
                raise InputError(
                    f"{root}: {len(matches)} {split} splits ({', '.join(p.name for p in matches)}): "
                    f"keep one in the folder, or pass --{split} FILE"
                )
            found[split] = absolute(matches[0])
    for split, name in given.items():
        if name:
            require_file(name, f"--{split}")
            found[split] = absolute(name)
    missing = [s for s in needed if s not in found]
    if missing:
        raise InputError(f"no {missing[0]} split: give --data DIR or --{missing[0]} FILE")
    return found
