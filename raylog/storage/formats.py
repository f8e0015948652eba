"""Format versions of what raylog stores, and the one rule for reading them.

Every stored format has a version number, kept as a constant beside its reader and writer
(docs/storage.md, "Format versions", lists them). A reader takes every version up to its
own and refuses a newer one with :class:`UnsupportedFormatVersionError`, naming the file,
the version found and the newest it reads, before it changes anything: a raylog never
"repairs", rebuilds or deletes a file a newer raylog wrote (docs/formats.md).

Formats that had no version when versions were introduced read a missing one as version 0:

- a file that can take no header without breaking its readers (the segment, index and
  transaction-index files of a log directory, which hold raw batches or fixed-size
  entries; the events of the metadata log) gets a **format file** in its directory
  (``log-format``, ``metadata-format``): one line ``version=<n>``, written atomically.
  A directory without one is version 0; a raylog whose format there is newer than 0 writes
  it before the first byte of that format goes in;
- a JSON object (a partition directory's marker, the values of ``__consumer_offsets`` and
  ``_schemas``) gets a :data:`JSON_VERSION_FIELD` member, absent in version 0.

Plain Python; the files are written through :mod:`raylog.storage.files`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raylog.errors import StorageError, UnsupportedFormatVersionError
from raylog.storage import files

JSON_VERSION_FIELD = "format_version"  # in JSON values that had no version of their own


def check_version(where: str | Path, found: int, supported: int) -> int:
    """``found`` if this raylog reads it (at most ``supported``); else raise
    UnsupportedFormatVersionError naming ``where``."""
    if found > supported:
        raise UnsupportedFormatVersionError(str(where), found, supported)
    return found


def json_version(where: str | Path, value: Any, supported: int) -> int:
    """The format version of a decoded JSON value (0 without :data:`JSON_VERSION_FIELD`,
    or if it is no object); raise UnsupportedFormatVersionError if newer than
    ``supported``."""
    found = value.get(JSON_VERSION_FIELD, 0) if isinstance(value, dict) else 0
    if type(found) is not int:
        raise StorageError(f"{where}: {JSON_VERSION_FIELD} is {found!r}, not an integer")
    return check_version(where, found, supported)


def read_format_file(path: Path, supported: int) -> int:
    """The version a directory's format file ``path`` holds, 0 if there is none. Raises
    UnsupportedFormatVersionError if it is newer than ``supported``, StorageError if it
    cannot be read (never guess the format of what a directory holds)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError) as e:
        raise StorageError(f"cannot read the format file {path}: {e}") from e
    key, sep, value = text.strip().partition("=")
    if key != "version" or not sep or not value.isdigit():
        raise StorageError(f"{path} is not a format file (expected 'version=<n>', found "
                           f"{text[:40]!r})")
    return check_version(path, int(value), supported)


def write_format_file(path: Path, version: int) -> None:
    """Write a directory's format file durably (before anything of that format is written)."""
    files.write_atomic(Path(path), f"version={version}\n".encode())
