"""The leader-epoch cache beside each replica's log (Kafka's ``leader-epoch-checkpoint``).

Every batch carries the epoch of the leader that appended it. The cache records, for each
epoch that wrote to the log, the offset of its first batch: ``(epoch, start_offset)``
entries, epochs and start offsets both strictly increasing. Epoch ``e`` covers the offsets
from its start up to the next entry's start (the latest epoch: up to the log end). That is
enough to answer "where did epoch e end?" (:meth:`LeaderEpochCache.end_offset_for`), the
question a follower asks a new leader to find where their logs diverge (KIP-101, KIP-279;
see truncation.py).

File format (through :class:`~raylog.storage.checkpoint.Checkpoint`, so a crash leaves the
old or the new file, never a mix): one ``"<epoch> <start_offset>"`` line per entry, oldest
first. Every change is written before the call returns.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from raylog.errors import CorruptCheckpointError, InvalidArgumentError, LeaderEpochRegressionError
from raylog.records.header import NO_LEADER_EPOCH, BatchHeader
from raylog.storage.checkpoint import Checkpoint

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = NO_LEADER_EPOCH  # -1, as Kafka's UNDEFINED_EPOCH
UNDEFINED_OFFSET = -1  # Kafka's UNDEFINED_EPOCH_OFFSET


class EpochEntry(NamedTuple):
    """Epoch ``epoch`` wrote its first batch at ``start_offset``."""

    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """An answer to "where did this epoch end?": the epoch the answer is about and the
    offset right after its last record; ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)`` when the
    cache cannot tell."""

    epoch: int
    end_offset: int


UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET)


class LeaderEpochCache:
    """The ``(epoch, start_offset)`` entries of one replica's log, optionally on disk.

    Invariants: epochs and start offsets are non-negative and strictly increasing; when the
    cache has a path, the file holds exactly the entries in memory after every call that
    returns. The owner keeps it in step with the log: :meth:`assign` before appending a
    batch, :meth:`truncate_from_end` after truncating the log, :meth:`truncate_from_start`
    after the log start moved up. Not safe for concurrent use: the replica serializes calls.

    Example::

        cache = LeaderEpochCache()
        cache.assign(0, 0)
        cache.assign(2, 50)
        cache.end_offset_for(0, log_end_offset=80)  # EpochEndOffset(epoch=0, end_offset=50)
    """

    def __init__(self, path: str | os.PathLike | None = None,
                 entries: Iterable[tuple[int, int]] = ()) -> None:
        self._checkpoint = None if path is None else Checkpoint(Path(path))
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start_offset in entries:
            self._check_entry(epoch, start_offset)
            if self._epochs and (epoch <= self._epochs[-1]
                                 or start_offset <= self._starts[-1]):
                raise InvalidArgumentError(
                    f"leader epoch entries must increase: ({epoch}, {start_offset}) after "
                    f"{self.entries[-1]}")
            self._epochs.append(epoch)
            self._starts.append(start_offset)

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike) -> LeaderEpochCache:
        """The cache in the file at ``path``: empty if there is no file.

        Raises CorruptCheckpointError if the file is not a whole checkpoint, a line is not
        two non-negative integers, or epochs or start offsets do not strictly increase.
        """
        path = Path(path)
        if not path.exists():
            return cls(path)
        lines = Checkpoint(path).read()
        if lines is None:
            raise CorruptCheckpointError(f"{path}: not a whole checkpoint file")
        entries = []
        for n, line in enumerate(lines, 1):
            fields = line.split(" ")
            if len(fields) != 2 or not all(f.isdigit() for f in fields):
                raise CorruptCheckpointError(
                    f"{path}: line {n + 2} is {line!r}, expected '<epoch> <start_offset>'")
            entries.append((int(fields[0]), int(fields[1])))
        try:
            return cls(path, entries)
        except InvalidArgumentError as e:
            raise CorruptCheckpointError(f"{path}: {e}") from e

    @classmethod
    def open(cls, path: str | os.PathLike, log_start_offset: int, log_end_offset: int,
             headers: Callable[[], Iterable[BatchHeader]]) -> LeaderEpochCache:
        """The cache of a log being opened, made to agree with it.

        Loads ``path``; if the file is missing or damaged, rebuilds the cache from
        ``headers()`` (the headers of every batch in the log, oldest first; called only
        then) and writes it. Then drops what lies outside ``[log_start_offset,
        log_end_offset)``: the cache is written before the log, so after a crash it may name
        batches the log lost (Kafka truncates the cache to the recovered log the same way).
        An epoch that never wrote a batch (assigned when its leader was elected) is lost by a
        rebuild, and by this truncation when it starts at the log end; that is harmless: its
        end offset is the next epoch's start either way, and a leader assigns its epoch again
        when elected.
        """
        path = Path(path)
        try:
            cache = cls.load(path) if path.exists() else None
        except CorruptCheckpointError:
            cache = None
        if cache is None:
            cache = cls(path)
            cache.rebuild(headers())
        cache.truncate_from_end(log_end_offset)
        cache.truncate_from_start(log_start_offset)
        return cache

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Replace the entries with those of a log whose batch headers are ``headers``, oldest
        first, and write them.

        A batch without a leader epoch (``NO_LEADER_EPOCH``, written before replication)
        adds nothing. The log is the truth here, so unlike :meth:`assign` an epoch going
        backwards is not refused: as Kafka does when it assigns, the entries it conflicts
        with are dropped and the cache describes the log as it is.
        """
        self._epochs, self._starts = [], []
        for header in headers:
            if header.leader_epoch >= 0 and self._update_needed(header.leader_epoch,
                                                                header.base_offset):
                self._put(header.leader_epoch, header.base_offset)
        self._write()

    # -- queries -------------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(EpochEntry(e, s) for e, s in zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        """The newest epoch in the log, UNDEFINED_EPOCH if none."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def epoch_at(self, offset: int) -> int:
        """The epoch of the batch holding ``offset``: the entry with the largest start at or
        below it; UNDEFINED_EPOCH below the first entry. Offsets past the log end are not
        detected: they get the latest epoch."""
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Where ``requested_epoch`` ended in this log (Kafka's OffsetsForLeaderEpoch answer,
        KIP-279 semantics, as ``LeaderEpochFileCache.endOffsetFor``):

        - requested epoch undefined (negative), or above every epoch here (or no epochs):
          ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)``;
        - the latest epoch: ``(latest, log_end_offset)``, as it is still being written;
        - otherwise the largest epoch at or below the requested one, and the start offset of
          the first epoch above the requested one, where the requested epoch's data (if
          this log ever had any) ends;
        - below the first epoch: ``(requested_epoch, first start offset)``. The log has
          nothing of that epoch or earlier left (retention removed it, or it never had it),
          so the asker should keep nothing at or above this log's first epoch start.
        """
        if requested_epoch < 0 or not self._epochs:
            return UNDEFINED
        if requested_epoch == self._epochs[-1]:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED
        if higher == 0:
            return EpochEndOffset(requested_epoch, self._starts[0])
        return EpochEndOffset(self._epochs[higher - 1], self._starts[higher])

    # -- changes -------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that a batch of ``epoch`` is appended at ``start_offset``; return whether
        the cache changed (and was written).

        Call it before appending each batch (only the first batch of an epoch changes
        anything), and as a new leader with ``(new epoch, log end offset)`` when elected, as
        Kafka does, so the leader can answer about its own epoch before it writes.

        Rules, Kafka's (``LeaderEpochFileCache.assign``) except the refusal:

        - a negative epoch or offset is refused (InvalidArgumentError); a batch without an
          epoch is never assigned;
        - the latest epoch again at or above its start: nothing to do;
        - an epoch older than the latest is refused (LeaderEpochRegressionError). Kafka drops
          the newer entries instead, with a warning; here the caller learns before it
          appends that the replica missed a truncation or that the batch comes from a stale
          leader, and nothing changes;
        - otherwise the entries the new one conflicts with (the same epoch with a later
          start, or any start at or above the new one: the log was truncated there) are
          removed, and the new entry becomes the latest.
        """
        self._check_entry(epoch, start_offset)
        if self._epochs and epoch < self._epochs[-1]:
            raise LeaderEpochRegressionError(
                f"leader epoch {epoch} at offset {start_offset} is older than the latest "
                f"epoch {self._epochs[-1]} (from offset {self._starts[-1]}) in this log")
        if not self._update_needed(epoch, start_offset):
            return False
        self._put(epoch, start_offset)
        self._write()
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was truncated to ``end_offset`` (offsets at or above it removed): drop the
        entries starting at or above it. Return whether anything changed.

        Pass the log end offset after the truncation, which may be below the offset asked
        for when a batch straddled it.
        """
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep == len(self._starts):
            return False
        del self._epochs[keep:], self._starts[keep:]
        self._write()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved up to ``start_offset`` (retention, or a follower starting
        over there): drop the entries that lie wholly below it and move the start of the
        entry covering it up to it. Return whether anything changed."""
        covering = bisect.bisect_right(self._starts, start_offset) - 1
        if covering < 0 or (covering == 0 and self._starts[0] == start_offset):
            return False
        del self._epochs[:covering], self._starts[:covering]
        self._starts[0] = start_offset
        self._write()
        return True

    def clear(self) -> None:
        """Drop every entry: the log was emptied and starts over (Kafka's clearAndFlush)."""
        self._epochs, self._starts = [], []
        self._write()

    # -- internals -----------------------------------------------------------------------------

    @staticmethod
    def _check_entry(epoch: int, start_offset: int) -> None:
        if type(epoch) is not int or type(start_offset) is not int or epoch < 0 \
                or start_offset < 0:
            raise InvalidArgumentError(
                f"a leader epoch entry needs a non-negative epoch and start offset, got "
                f"({epoch!r}, {start_offset!r})")

    def _update_needed(self, epoch: int, start_offset: int) -> bool:
        return not self._epochs or epoch != self._epochs[-1] or start_offset < self._starts[-1]

    def _put(self, epoch: int, start_offset: int) -> None:
        # Entries are sorted on both fields, so the conflicting ones form a suffix: those
        # with an epoch >= the new one or a start >= the new one.
        keep = min(bisect.bisect_left(self._epochs, epoch),
                   bisect.bisect_left(self._starts, start_offset))
        del self._epochs[keep:], self._starts[keep:]
        self._epochs.append(epoch)
        self._starts.append(start_offset)

    def _write(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write([f"{e} {s}" for e, s in zip(self._epochs, self._starts,
                                                              strict=True)])

    def __repr__(self) -> str:
        return f"LeaderEpochCache({list(self.entries)})"
