"""The chaos suite's pytest options: ``--chaos-seed S`` (repeatable) replays seeds instead of
the quick one, ``--minutes N`` makes each run a soak whose faults go on N minutes.

A plugin that the repository's root conftest.py loads, so that the options are known however
pytest is started (``pytest -m chaos --minutes 30`` names no test directory, and pytest reads
options before it looks into one)."""

from __future__ import annotations

import pytest

from tests.integration.scenarios import chaos_scenario

# The seed `make test` runs: one round of every kind of fault (about 135 s of faults). It
# found, before issue 22's items 7 and 8 landed, every partition stalled while a broker was
# paused (hung brokers were not fenced) and futures resolved late while the controller hung
# (the producer's sender waited on a metadata refresh).
QUICK_SEED = 10


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "the chaos suite (tests/chaos)")
    group.addoption("--chaos-seed", action="append", type=int, default=None, metavar="S",
                    help=f"run the chaos suite with seed S (repeat for several; default "
                         f"{QUICK_SEED})")
    group.addoption("--minutes", type=float, default=0, metavar="N",
                    help="faults go on N minutes per run (a soak; default: one round of "
                         "every kind, a few minutes in all)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chaos_seed" in metafunc.fixturenames:
        seeds = metafunc.config.getoption("--chaos-seed") or [QUICK_SEED]
        # A run of the default length is a scenario (tests/chaos/scenario.py): `make test`
        # runs it on the scenario thread while the integration tests run. A soak runs in its
        # test, past the scenarios' time limit.
        soak = bool(metafunc.config.getoption("--minutes"))
        metafunc.parametrize("chaos_seed", [
            pytest.param(s, id=f"seed={s}",
                         marks=() if soak else pytest.mark.scenario(chaos_scenario(s)))
            for s in seeds])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A soak outlasts the suite's per-test timeout (pyproject.toml): give it its minutes.
    minutes = config.getoption("--minutes")
    for item in items:
        if item.get_closest_marker("chaos") is not None and minutes:
            item.add_marker(pytest.mark.timeout(900 + 120 * minutes))
