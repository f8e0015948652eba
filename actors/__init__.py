"""raylog's Ray actors: thin shells over the plain objects in ``raylog``."""

from __future__ import annotations

import logging
import sys

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
            logger.addHandler(handler)
            logger.propagate = False
