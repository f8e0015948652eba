"""What a produce call carries (raylog/client/remote.py, zero_copy): a large batch as a
pa.Buffer, which Ray passes out of band (the broker reads it in place), a small one as it
is; the bytes are the same."""

from __future__ import annotations

import pyarrow as pa
import pytest

from raylog.client.remote import ReplicaClient, zero_copy
from raylog.util.ray_inline import INLINE_SETTING, OBJECT_STORE_ARGUMENT_BYTES, inline_limit


@pytest.fixture(autouse=True)
def ray_default_inline_limit(monkeypatch):
    monkeypatch.delenv(INLINE_SETTING, raising=False)


def test_a_large_batch_goes_as_a_buffer_of_the_same_bytes_without_a_copy():
    batch = bytes(range(256)) * (OBJECT_STORE_ARGUMENT_BYTES // 256 + 1)
    sent = zero_copy(batch)
    assert isinstance(sent, pa.Buffer) and sent.to_pybytes() == batch
    assert sent.address == pa.py_buffer(batch).address  # wraps the bytes, no copy


def test_a_small_batch_and_a_buffer_go_as_they_are():
    small = b"x" * OBJECT_STORE_ARGUMENT_BYTES
    assert zero_copy(small) is small
    buffer = pa.py_buffer(b"y" * (2 * OBJECT_STORE_ARGUMENT_BYTES))
    assert zero_copy(buffer) is buffer


def test_append_hands_the_broker_the_zero_copy_argument():
    calls = []

    class Method:
        def remote(self, *args, **kwargs):
            calls.append(args)

    class Handle:
        produce = Method()

    large = b"z" * (OBJECT_STORE_ARGUMENT_BYTES + 1)
    ReplicaClient(Handle(), "t", 0, 3).append(large, "all", 1_000)
    ReplicaClient(Handle(), "t", 0, 3).append(b"small", 1, 1_000, client_id="c")
    (topic, partition, epoch, batch, acks, timeout), (*_, small, _, _) = calls
    assert (topic, partition, epoch, acks, timeout) == ("t", 0, 3, "all", 1_000)
    assert isinstance(batch, pa.Buffer) and batch.to_pybytes() == large
    assert small == b"small"


def test_a_process_that_inlines_larger_arguments_sends_them_as_bytes(monkeypatch):
    """The Kafka listener raises Ray's inline limit to 4 MiB for its process: its batches up
    to that size stay bytes, inline in the call, as its measurements chose."""
    monkeypatch.setenv(INLINE_SETTING, str(4 << 20))
    batch = b"k" * (1 << 20)
    assert inline_limit() == 4 << 20 and zero_copy(batch) is batch
    assert isinstance(zero_copy(b"k" * ((4 << 20) + 1)), pa.Buffer)
    assert inline_limit({INLINE_SETTING: "lots"}) == OBJECT_STORE_ARGUMENT_BYTES
