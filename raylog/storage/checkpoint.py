"""Small files written atomically: recovery point, high watermark, leader epochs.

Format: a version line, a count line, then one entry per line (text, so an operator can read
it). Written to a temporary file, fsynced, renamed over the old file, then the directory is
fsynced: a crash leaves either the old or the new content, never a mix.
"""

from __future__ import annotations

from pathlib import Path

from raylog.storage import files

VERSION = "0"


class Checkpoint:
    """One checkpoint file holding a list of text entries. Not safe for concurrent writers."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, entries: list[str]) -> None:
        files.write_atomic(self.path,
                           "\n".join([VERSION, str(len(entries)), *entries, ""]).encode())

    def read(self) -> list[str] | None:
        """The entries, or None if the file is missing or not a whole checkpoint."""
        try:
            lines = self.path.read_text().split("\n")
        except (FileNotFoundError, UnicodeDecodeError):
            return None
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
