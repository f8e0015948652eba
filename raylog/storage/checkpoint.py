"""Small files written atomically: recovery point, high watermark, leader epochs.

Format: a version line, a count line, then one entry per line (text, so an operator can read
it). Written to a temporary file, fsynced, renamed over the old file, then the directory is
fsynced: a crash leaves either the old or the new content, never a mix.

Every file of a log directory whose name ends in ``-checkpoint`` is one of these (the
recovery point, high watermark, log start, cleaner offset and leader-epoch checkpoints).
The version line is the format's version (:data:`VERSION`): a file of a newer version is
refused (UnsupportedFormatVersionError), never taken for a damaged one and rewritten.
"""

from __future__ import annotations

from pathlib import Path

from raylog.storage import files
from raylog.storage.formats import check_version

VERSION = "0"  # the newest this raylog writes and reads; every one before it is read too
SUFFIX = "-checkpoint"  # of every checkpoint file's name


class Checkpoint:
    """One checkpoint file holding a list of text entries. Not safe for concurrent writers."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, entries: list[str]) -> None:
        files.write_atomic(self.path,
                           "\n".join([VERSION, str(len(entries)), *entries, ""]).encode())

    def read(self) -> list[str] | None:
        """The entries, or None if the file is missing or not a whole checkpoint. Raises
        UnsupportedFormatVersionError for a checkpoint of a newer version."""
        try:
            lines = self.path.read_text().split("\n")
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        if lines[0].isdigit():
            check_version(self.path, int(lines[0]), int(VERSION))
        if len(lines) < 3 or lines[0] != VERSION or not lines[1].isdigit():
            return None
        count = int(lines[1])
        if len(lines) != count + 3 or lines[-1] != "":
            return None
        return lines[2:2 + count]

    def write_offset(self, offset: int) -> None:
        self.write([str(offset)])

    def read_offset(self) -> int | None:
        entries = self.read()
        if not entries or len(entries) != 1 or not entries[0].isdigit():
            return None
        return int(entries[0])


def check_checkpoints(directory: Path, names: set[str]) -> None:
    """Refuse (UnsupportedFormatVersionError) if any checkpoint file among ``names`` (a
    listing of ``directory``) is of a newer version: checked before a log opens, so that
    nothing in the directory changes before a refusal."""
    for name in sorted(names):
        if name.endswith(SUFFIX):
            Checkpoint(Path(directory) / name).read()
