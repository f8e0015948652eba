"""tests/integration/scenarios.py: the scenario processes run one after another, in the order
their tests need them, and each test gets its scenario's result or its failure (fake
scenarios, tests/unit/fake_scenario.py: no cluster)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.integration import scenarios as scenarios_module
from tests.integration.scenarios import Scenario, Scenarios

FAKE = "tests.unit.fake_scenario"


@pytest.fixture
def directory(tmp_path):
    numbers = itertools.count()

    def make(name: str) -> Path:
        path = tmp_path / f"{name}{next(numbers)}"
        path.mkdir()
        return path

    return make


def test_scenarios_run_in_order_and_those_naming_one_directory_share_it(directory):
    first, second = Scenario(FAKE, "first", "shared"), Scenario(FAKE, "second", "shared")
    alone = Scenario(FAKE, "alone", "own")
    scenarios = Scenarios([first, alone, second, first], directory)
    scenarios.start()
    assert scenarios.result("second") == {"name": "second",
                                          "root": str(scenarios.root("first")), "mark": None}
    assert scenarios.result("alone")["root"] != str(scenarios.root("first"))
    assert (scenarios.root("first") / "ran").read_text() == "first\nsecond\n"
    assert (scenarios.root("alone") / "ran").read_text() == "alone\n"


def test_a_result_asked_for_first_starts_them(directory):
    scenarios = Scenarios([Scenario(FAKE, "asked", "own")], directory)
    assert scenarios.result("asked")["name"] == "asked"


def test_a_failed_scenario_fails_its_tests_and_the_one_continuing_it_never_starts(directory):
    failing = Scenario(FAKE, "failing", "shared")
    continuing = Scenario(FAKE, "continuing", "shared", after="failing")
    scenarios = Scenarios([failing, continuing], directory)
    with pytest.raises(AssertionError, match=r"(?s)failing failed:.*failing went wrong"):
        scenarios.result("failing")
    with pytest.raises(AssertionError, match=r"not started: failing, .* failed"):
        scenarios.result("continuing")
    assert (scenarios.root("failing") / "ran").read_text() == "failing\n"


def test_scenarios_get_the_environment_of_the_sessions_start(directory, monkeypatch):
    """Not what a test running meanwhile set for a while."""
    monkeypatch.setenv("FAKE_SCENARIO_MARK", "as the session began")
    scenarios = Scenarios([Scenario(FAKE, "marked", "own")], directory)
    monkeypatch.setenv("FAKE_SCENARIO_MARK", "a test's, for a while")
    assert scenarios.result("marked")["mark"] == "as the session began"


def test_a_scenario_no_fixture_planned_is_refused_saying_so(directory):
    scenarios = Scenarios([Scenario(FAKE, "planned", "own")], directory)
    with pytest.raises(LookupError, match="scenario unplanned was not planned"):
        scenarios.result("unplanned")


def test_a_scenario_that_cannot_start_fails_its_tests_at_once_and_the_next_one_runs(
        directory, monkeypatch):
    real_popen = scenarios_module.subprocess.Popen

    def popen(command, **kwargs):
        if command[-2] == "unstartable":
            raise OSError("no interpreter")
        return real_popen(command, **kwargs)

    monkeypatch.setattr(scenarios_module.subprocess, "Popen", popen)
    monkeypatch.setattr(scenarios_module, "TIMEOUT_S", 30)  # "did not end" after 60 s
    scenarios = Scenarios([Scenario(FAKE, "unstartable", "own"),
                           Scenario(FAKE, "next", "own")], directory)
    with pytest.raises(AssertionError, match=r"(?s)unstartable failed:.*no interpreter"):
        scenarios.result("unstartable")
    assert scenarios.result("next")["name"] == "next"
