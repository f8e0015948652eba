"""Mirroring topics between raylog clusters (``raylog mirror``): see docs/mirror.md.

The source cluster serves its topics over Arrow Flight (:mod:`raylog.mirror.flight_server`,
``raylog flight-serve``); the mirror runs as a driver of the target cluster, reads the source
through :mod:`raylog.mirror.flight_client` and appends the stored batches as they are to
``<alias>.<topic>`` on the target, exactly once per partition
(:mod:`raylog.mirror.position`). Group offsets are translated with
:mod:`raylog.mirror.translation`. Importing this package imports nothing heavy; its modules
import what they need.
"""
