"""How often a broker process with nothing to do looks at its replicas anyway: its node's
``$RAYLOG_IDLE_MAINTENANCE_S`` (a test cluster sets it short), checked when it starts."""

from __future__ import annotations

import pytest

from actors.serving import DEFAULT_IDLE_MAINTENANCE_S, IDLE_MAINTENANCE_ENV, idle_maintenance_s
from raylog.errors import InvalidConfigError


def test_the_period_is_the_nodes_setting_or_30_s():
    assert idle_maintenance_s({}) == DEFAULT_IDLE_MAINTENANCE_S == 30.0
    assert idle_maintenance_s({IDLE_MAINTENANCE_ENV: " "}) == 30.0
    assert idle_maintenance_s({IDLE_MAINTENANCE_ENV: " 2.5 "}) == 2.5


@pytest.mark.parametrize("text", ["0", "-1", "soon", "nan", "inf"])
def test_a_period_that_is_no_positive_number_is_refused_naming_the_variable(text):
    with pytest.raises(InvalidConfigError, match=f"{IDLE_MAINTENANCE_ENV} must be a number"):
        idle_maintenance_s({IDLE_MAINTENANCE_ENV: text})
