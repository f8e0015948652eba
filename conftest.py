"""The repository's pytest setup: the chaos suite's options (tests/chaos/plugin.py)."""

pytest_plugins = ["tests.chaos.plugin"]
