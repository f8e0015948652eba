"""Pausing the cyclic garbage collector while building many small objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for a bulk allocation of acyclic objects.

    Decoding a batch makes one tuple per record. Those tuples cannot form cycles, but each
    thousand of them triggers a collection that rescans all younger survivors, which made
    decoding four times slower. Reference counting still frees them; the GC resumes after.
    Leaves the GC off if the caller had turned it off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
