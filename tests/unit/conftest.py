"""The unit tests' setup: each test's ``tmp_path`` in memory where the machine has a tmpfs.

The storage tests create, rename, sync and delete thousands of small files (test_recovery
opens a copy of a log for every byte it cuts; the power-loss tests copy every replica's
directory after every step), and on the shared machine's disk half of their time went to
unlink and rename. Their crashes and power losses are simulated in the process (copies,
recorded syncs), never by the file system, so a directory in /dev/shm checks the same. Each
directory is removed after its test (pytest keeps the last runs' on disk: in memory they
would hold the machine's RAM). Without a writable /dev/shm of 4 GiB free, the system's
temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

MEMORY = Path("/dev/shm")
# A container's /dev/shm is often 64 MB: too little for the power-loss copies (and Ray's
# object store may be using it), so it is taken only when it has room.
MIN_FREE = 4 << 30


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    in_memory = MEMORY.is_dir() and os.access(MEMORY, os.W_OK) and \
        shutil.disk_usage(MEMORY).free >= MIN_FREE
    path = Path(tempfile.mkdtemp(prefix="raylog-unit-", dir=MEMORY if in_memory else None))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
