"""How large a value Ray keeps inline: a call's argument sent in the call itself, an answer
returned in the reply and kept by its owner, rather than put into the object store. Plain
Python, no Ray: brokers and gateways ask it without loading the client."""

from __future__ import annotations

import os
from collections.abc import Mapping

# Above this, Ray puts a call's argument (or an answer) into the object store (its
# max_direct_call_object_size, 100 KiB by default) instead of inlining it. A process may
# raise it (the Kafka listener does, raylog/kafka/gateway/settings.py), read from the
# environment as Ray reads it.
OBJECT_STORE_ARGUMENT_BYTES = 100 * 1024
INLINE_SETTING = "RAY_max_direct_call_object_size"


def inline_limit(environ: Mapping[str, str] = os.environ) -> int:
    """The largest argument (or answer) Ray keeps inline in a call from (or to) this
    process."""
    try:
        return int(environ.get(INLINE_SETTING, OBJECT_STORE_ARGUMENT_BYTES))
    except ValueError:  # Ray would refuse it; not this module's to judge
        return OBJECT_STORE_ARGUMENT_BYTES
