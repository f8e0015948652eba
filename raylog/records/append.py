"""The producer's per-record append: ``_append.c`` (a small C extension built by ``pip
install``, ``make install`` or ``python -m raylog.kafka.build``) or, where it was not built,
its pure-Python twin ``append_py``.

``Columns`` is the base of BatchBuilder (a batch's record columns), ``RecordSlot`` the base of
RecordFuture; ``arrays`` turns a batch's timestamps and values into Arrow arrays (in one C
pass over the lists with the extension). ``PlainSend`` is None without the extension; with
it, the producer's ``send`` appends a keyless bytes value to its topic's open sticky batch
in one C call, no Python frame, no lock: it relies on the GIL (see _append.c), and so does
not load on a free-threaded interpreter.
"""

from __future__ import annotations

import os

import pyarrow as pa

from raylog.records import append_py

# RAYLOG_PURE_PYTHON=1 keeps the compiled helper out (to compare, or to test the twin).
_native = None
if not os.environ.get("RAYLOG_PURE_PYTHON"):
    try:
        from raylog.records import _append as _native
    except ImportError:  # not built (a checkout used without `pip install -e .`)
        _native = None

Columns = _native.Columns if _native is not None else append_py.Columns
RecordSlot = _native.RecordSlot if _native is not None else append_py.RecordSlot
PlainSend = _native.PlainSend if _native is not None else None


def compiled() -> bool:
    """Whether the per-record append is the C extension's."""
    return _native is not None


def arrays(timestamps: list[int], values: list[bytes | None]) -> tuple[pa.Array, pa.Array]:
    """The timestamps as an int64 array and the values as a binary array. With the
    extension, values that are all bytes are copied into Arrow's buffers in one C pass (a
    third of what ``pa.array`` of the two lists costs); otherwise ``pa.array``."""
    if _native is not None:
        buffers = _native.plain_columns(timestamps, values)
        if buffers is not None:
            stamps, offsets, data = map(pa.py_buffer, buffers)
            n = len(values)
            return (pa.Array.from_buffers(pa.int64(), n, [None, stamps]),
                    pa.Array.from_buffers(pa.binary(), n, [None, offsets, data]))
    return pa.array(timestamps, pa.int64()), pa.array(values, pa.binary())
