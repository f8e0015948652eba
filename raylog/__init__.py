"""raylog: a durable, partitioned, replicated commit log built as actors on Ray."""

__version__ = "0.1.0"
