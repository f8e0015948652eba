"""What the broker actor answers for the requests it passes on to a replica host of its node
(actors/broker.py) when that host's call fails: no Ray cluster needed."""

from __future__ import annotations

import pytest
from ray.exceptions import ActorDiedError, ActorUnavailableError, RaySystemError

from actors.broker import _host_failure
from raylog import errors
from raylog.client.remote import unwrap


@pytest.mark.parametrize("died", [ActorDiedError(), ActorUnavailableError("restarting", None)])
def test_a_host_gone_mid_call_leaves_its_outcome_unknown(died):
    """Its batches may have been appended: answered as a client calling the host itself
    would see it (remote.unwrap), the error the producer never renumbers a batch after."""
    answer = _host_failure(died)
    assert isinstance(answer, errors.ActorUnavailableError) and answer.retriable
    assert type(answer) is type(unwrap(died))


def test_a_raylog_error_is_answered_as_is_and_other_ray_errors_as_internal():
    refused = errors.NotLeaderError("not here")
    assert _host_failure(refused) is refused
    assert isinstance(_host_failure(RaySystemError("lost")), errors.InternalError)
    with pytest.raises(ValueError):
        _host_failure(ValueError("a bug here"))
