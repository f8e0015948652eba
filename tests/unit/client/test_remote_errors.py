"""How Ray's errors reach raylog's callers (raylog/client/remote.py): no Ray cluster needed,
the exceptions are built directly."""

from __future__ import annotations

import concurrent.futures
import json

import pytest
from ray.exceptions import ActorUnschedulableError

from raylog.client.remote import Answer, unwrap
from raylog.errors import ActorUnavailableError, InvalidRecordError, OffsetNotAvailableError
from raylog.util.interop import ERROR_MARK, error_json, java_error


def test_an_actor_pinned_to_a_node_that_is_gone_is_retriable():
    """A replica actor of a broker whose node was replaced: the client refreshes its
    metadata and finds the replica on the new node."""
    error = unwrap(ActorUnschedulableError("the node specified via "
                                           "NodeAffinitySchedulingStrategy doesn't exist"))
    assert isinstance(error, ActorUnavailableError) and error.retriable


def test_a_raylog_error_comes_back_as_itself():
    original = InvalidRecordError("no key")
    assert unwrap(original) is original


@pytest.mark.parametrize("error", [ValueError("x"), KeyError("k")])
def test_anything_else_outside_an_actor_is_left_as_it_is(error):
    assert unwrap(error) is error


def test_a_new_leader_not_sure_yet_of_its_committed_offsets_is_retriable_everywhere():
    """KIP-207's "offset not available yet": Python readers retry it (e.retriable), and Java
    readers read it from the text the call fails with (RaylogExceptionTest parses it)."""
    error = OffsetNotAvailableError("t-0: not yet")
    assert error.retriable
    assert error_json(error) == {"type": "OffsetNotAvailableError", "retriable": True,
                                 "message": "t-0: not yet"}
    assert ERROR_MARK + json.dumps(error_json(error)) + ERROR_MARK in str(java_error(error))


def test_an_answer_read_from_its_future_raises_as_resolve_would():
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(ActorUnschedulableError("the node is gone"))
    with pytest.raises(ActorUnavailableError):
        Answer(future).get()
    answered: concurrent.futures.Future = concurrent.futures.Future()
    answered.set_result(42)
    assert Answer(answered).get() == 42
