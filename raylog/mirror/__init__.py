"""Mirroring topics between raylog clusters (``raylog mirror``): see docs/mirror.md.

The source cluster serves its topics over Arrow Flight (:mod:`raylog.mirror.flight_server`,
``raylog flight-serve``); the mirror runs as a driver of the target cluster, reads the source
through :mod:`raylog.mirror.flight_client` and appends the stored batches as they are to
``<alias>.<topic>`` on the target, exactly once per partition
(:mod:`raylog.mirror.position`). Group offsets are translated with
:mod:`raylog.mirror.translation`; :func:`translate_group` commits a group's translated offsets
on the target (``raylog groups translate``). Importing this package imports nothing heavy;
its modules import what they need.
"""

from __future__ import annotations

from typing import Any

__all__ = ["translate_group"]


def __getattr__(name: str) -> Any:
    if name == "translate_group":
        from raylog.mirror.checkpoints import translate_group

        return translate_group
    raise AttributeError(f"module 'raylog.mirror' has no attribute {name!r}")
