"""The command-line flag of a settings field: the field's name with hyphens, but for the dropouts.

The fields keep the DARTS/AWD names that stored config.json files hold; the flags spell every dropout
as the tagger does. Light (no torch, no click): configs and the methods' settings name their flags
in errors with it.
"""

from __future__ import annotations

FLAGS = {"dropouth": "--dropout-h", "dropoutx": "--dropout-x", "dropouti": "--dropout-i", "dropoute": "--dropout-e"}


def flag_name(name: str) -> str:
    """The command-line flag of a config field (--dropout-h for dropouth)."""
    return FLAGS.get(name) or "--" + name.replace("_", "-")
