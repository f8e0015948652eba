"""A deleted tiered topic's remote data: finding it and removing it.

Deleting a topic (the controller's ``delete_topic``) removes its replicas; what it left in the
object store (the folder ``<prefix>/<topic>-<topic id>/``, layout.topic_folder) and in
``__raylog_remote_log`` (every key of its topic id) is removed afterwards, in the background,
by a **sweep** (actors/tiered.py runs it in the process leading the metadata topic, again and
again, with backoff while the store is down). No record says a topic is to be cleaned: a
topic id the metadata state or the store's top level holds and the controller's topics do not
is a deleted topic's. So a sweep cut short (a process killed, a store down) is finished by the
next one, in any process, from what is left.

Why the order of the reads matters: the metadata state and the store's folders are read
**before** the controller is asked for its topic ids. A record or a folder exists only once
its topic was created (a leader writes COPY_STARTED, then puts objects), so a topic id seen
first and missing from the controller's answer after was deleted, never one not created yet.
Topic ids are never reused: a topic created again under its name has a new id, another
folder and other keys, and is not touched.

Removing: the topic's folder first, then a tombstone (a record with no value) for each of its
keys, so a sweep cut short between the two finds the keys again and deletes the (gone)
folder again. A deposed leader still copying when its topic was deleted may put objects or a
COPY_FINISHED after that: the next sweep finds them. Plain Python: the store, the state's
keys and the tombstones' writer are passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from raylog.tiered.layout import folder_topic_id, topic_folder
from raylog.tiered.store import ObjectStore
from raylog.util import faults


@dataclass(frozen=True)
class DeletedTopic:
    """What a deleted topic left: its store folders and its metadata keys."""

    topic_id: str
    folders: tuple[str, ...]
    keys: tuple[str, ...]


def find_deleted(store: ObjectStore, recorded: dict[str, tuple[str, list[str]]],
                 existing: Callable[[], set[str] | None]) -> list[DeletedTopic]:
    """The deleted topics that left something. ``recorded`` is the metadata state's
    ``topics()`` as read now; the store's top level is listed next; ``existing`` (the
    controller's topic ids, None when it cannot tell) is asked last, only if anything was
    seen. (It must not be cached: a topic id it named once may be deleted since.)"""
    folders: dict[str, list[str]] = {}
    for folder in store.list_folders(store.prefix):
        topic_id = folder_topic_id(folder)
        if topic_id is not None:
            folders.setdefault(topic_id, []).append(folder)
    for topic_id, (topic, _) in recorded.items():
        folders.setdefault(topic_id, []).append(topic_folder(store.prefix, topic, topic_id))
    if not folders:
        return []
    live = existing()
    if live is None:
        return []
    return [DeletedTopic(topic_id, tuple(sorted(set(paths))),
                         tuple(recorded.get(topic_id, ("", []))[1]))
            for topic_id, paths in sorted(folders.items()) if topic_id not in live]


def remove(store: ObjectStore, deleted: DeletedTopic, tombstone: Callable[[str], None]) -> None:
    """Delete the topic's folders, then write a tombstone for each of its keys. OSError
    when the store fails (nothing recorded then: the next sweep starts again)."""
    for folder in deleted.folders:
        store.delete_folder(folder)
    for key in deleted.keys:
        faults.point("tiered.sweep.tombstone")  # a process dying mid-sweep (tests)
        tombstone(key)
