"""The repository's pytest setup: the chaos suite's options (tests/chaos/plugin.py), the
scenario processes started early (tests/integration/scenarios.py), and
Hypothesis without its per-example deadline: that is a wall-clock limit, and the machines
tests run on are shared and noisy (a slow example is not a wrong one)."""

from hypothesis import settings

# tests.chaos.plugin imports tests.integration.scenarios: the latter is registered first.
pytest_plugins = ["tests.integration.scenarios", "tests.chaos.plugin"]

settings.register_profile("raylog", deadline=None)
settings.load_profile("raylog")
