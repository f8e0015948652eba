"""raylog's Ray actors: thin shells over the plain objects in ``raylog``."""

from __future__ import annotations

import logging
import sys

_FORMAT = "%(asctime)s %(levelname)s %(name)s%(fields)s: %(message)s"


def at(topic: str, partition: int) -> dict[str, dict[str, object]]:
    """``extra=`` for a log line about one partition: it then carries ``topic=...
    partition=...`` fields that a log search can match."""
    return {"extra": {"topic": topic, "partition": partition}}


class _Fields(logging.Filter):
    """Renders a record's ``topic`` and ``partition`` (from ``at``) as key=value fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        topic = getattr(record, "topic", None)
        record.fields = "" if topic is None else \
            f" topic={topic} partition={getattr(record, 'partition', '-')}"
        return True


def log_what_matters() -> None:
    """Send raylog's INFO messages to this actor's stderr (Ray keeps it in the worker's log
    file, and shows it on the driver when asked): what a controller or broker decides is
    worth an operator's eye. Without a handler Python would print warnings only."""
    for name in ("actors", "raylog"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(_FORMAT))
            handler.addFilter(_Fields())
            logger.addHandler(handler)
            logger.propagate = False
