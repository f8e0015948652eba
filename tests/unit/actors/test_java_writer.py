"""JavaApi.java_writer and java_cold_reader without Ray: one gateway per node and kind, kept
while it answers, replaced under a new name once it is dead (actors/java_api.py)."""

from __future__ import annotations

import asyncio

import pytest

import actors.cold_reader as cold_reader
import actors.java_api as java_api
import actors.spark_writer as spark_writer
from actors.java_api import JavaApi

N1, N2 = "ab" * 28, "cd" * 28  # Ray node ids (hex)


class FakeWriterClass:
    """Stands for the SparkWriter actor class: records the names it starts."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def options(self, *, name: str, **_: object) -> FakeWriterClass:
        self.started.append(name)
        return self

    def remote(self) -> str:
        return self.started[-1]  # the "handle": the name it was started under


@pytest.fixture
def gateways(monkeypatch) -> tuple[FakeWriterClass, set[str]]:
    """Both gateway classes replaced by one fake recording the names started, and the
    handles (names) that are dead."""
    started = FakeWriterClass()
    dead: set[str] = set()

    async def answers(handle: str) -> bool:
        return handle not in dead

    monkeypatch.setattr(spark_writer, "SparkWriter", started)
    monkeypatch.setattr(cold_reader, "ColdReader", started)
    monkeypatch.setattr(java_api, "_answers", answers)
    return started, dead


def test_a_node_keeps_its_writer_while_it_answers_and_gets_a_new_name_once_dead(gateways):
    writers, dead = gateways

    async def scenario() -> None:
        api = JavaApi(None, None)
        first = await api.java_writer(N1)
        assert first == f"spark-writer:{N1}" and await api.java_writer(N1) == first
        assert await api.java_writer(N2) == f"spark-writer:{N2}"
        dead.add(first)
        replacement = await api.java_writer(N1)
        assert replacement.startswith(f"spark-writer:{N1}:") and replacement != first
        assert await api.java_writer(N1) == replacement
        assert writers.started == [first, f"spark-writer:{N2}", replacement]

    asyncio.run(scenario())


def test_a_nodes_cold_reader_is_a_gateway_of_its_own_kind(gateways):
    """java_cold_reader keeps one cold-read gateway per node, beside the node's writer, and
    replaces it under a new name once dead, as it does writers."""
    started, dead = gateways

    async def scenario() -> None:
        api = JavaApi(None, None)
        reader = await api.java_cold_reader(N1)
        assert reader == f"cold-reader:{N1}" and await api.java_cold_reader(N1) == reader
        assert await api.java_writer(N1) == f"spark-writer:{N1}"
        dead.add(reader)
        replacement = await api.java_cold_reader(N1)
        assert replacement.startswith(f"cold-reader:{N1}:") and replacement != reader
        assert await api.java_writer(N1) == f"spark-writer:{N1}"  # the writer answers: kept
        assert started.started == [reader, f"spark-writer:{N1}", replacement]

    asyncio.run(scenario())
