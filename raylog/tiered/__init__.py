"""Tiered storage: closed segments copied to an object store, read back for old offsets.

layout.py says where a remote segment lives and the record that describes it (also the value
of the remote-log metadata topic); store.py opens the object store a URI names.
docs/tiered.md has the picture.
"""
