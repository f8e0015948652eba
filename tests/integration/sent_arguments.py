"""What this process sends to Ray: every task and actor-call argument (and every
``ray.put``), as Ray serializes it, and every function and actor class it exports, for
tests that check what a task spec carries.

Ray turns each argument into bytes through its serialization context: ``serialize`` takes the
value (plain values, strings and bytes go as MessagePack, seen here as the value's repr),
and anything else is pickled (protocol 5, seen here as the pickle's bytes and its
out-of-band buffers). A remote function or actor class is pickled once, when first used,
by ``ray._common.serialization.pickle_dumps`` (its own import of cloudpickle, recorded
too: a closure over a secret would go that way). Recording them sees every byte a task
spec, the function table or the object store gets from this process; Ray's behaviour is
unchanged (the originals run and their results are returned).

Not here: what other processes serialize. An ObjectRef pickled by this process (in a
Dataset, say) carries the value of a small object its owner holds inline, as the process
that made it serialized it: a test checking a Dataset pickles it and searches that too
(tests/integration/tiered_s3_scenario.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ray._common import serialization as common_serialization
from ray._private import serialization


class SentArguments:
    """The arguments recorded while :meth:`recording` is active."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def blob(self) -> bytes:
        return b"\n".join(self.chunks)

    @contextlib.contextmanager
    def recording(self) -> Iterator[SentArguments]:
        context_class = serialization.SerializationContext
        serialize, pickler = context_class.serialize, serialization.pickle
        common_pickler = common_serialization.pickle
        chunks = self.chunks

        def recorded_serialize(context: Any, value: Any) -> Any:
            chunks.append(repr(value).encode())
            return serialize(context, value)

        class RecordedPickle:
            """ray.cloudpickle, with what ``dumps`` writes kept."""

            def __getattr__(self, name: str) -> Any:
                return getattr(pickler, name)

            def dumps(self, value: Any, *args: Any, buffer_callback: Any = None,
                      **kwargs: Any) -> bytes:
                def keep(buffer: Any) -> Any:  # an out-of-band buffer, if Ray takes it
                    chunks.append(bytes(buffer.raw()))
                    return buffer_callback(buffer)

                out = pickler.dumps(value, *args, buffer_callback=keep if buffer_callback
                                    else None, **kwargs)
                chunks.append(bytes(out))
                return out

        context_class.serialize = recorded_serialize
        serialization.pickle = common_serialization.pickle = RecordedPickle()
        try:
            yield self
        finally:
            context_class.serialize = serialize
            serialization.pickle = pickler
            common_serialization.pickle = common_pickler
