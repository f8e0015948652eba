"""The Ray actors of raylog: thin shells around the plain objects in ``raylog``."""
