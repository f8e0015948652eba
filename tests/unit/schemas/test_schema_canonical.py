"""The forms a schema is stored and compared in (raylog/schemas/canonical.py): what each one
ignores and what stays significant, as Confluent Schema Registry compares Avro schemas."""

from __future__ import annotations

import json

import pytest
from fastavro.schema import parse_schema, to_parsing_canonical_form

from raylog.schemas.avro import parse

BASE = {"type": "record", "name": "Order", "namespace": "shop", "doc": "an order",
        "fields": [{"name": "id", "type": "long"},
                   {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                              "precision": 9, "scale": 2}},
                   {"name": "total", "type": "double", "default": 0.0},
                   {"name": "state", "type": {"type": "enum", "name": "State",
                                              "symbols": ["NEW", "PAID"], "default": "NEW"}},
                   {"name": "previous", "type": ["null", "State"], "default": None}],
        "x-owner": "team-a", "x-tags": {"pii": False, "tier": 1},
        "aliases": ["Purchase", "Sale"]}


def variant(**changes) -> dict:
    out = json.loads(json.dumps(BASE))
    out.update(changes)
    return out


def fields(*replaced: tuple[int, dict]) -> list[dict]:
    out = json.loads(json.dumps(BASE["fields"]))
    for i, field in replaced:
        out[i] = field
    return out


RESERVED = {"type", "name", "namespace", "doc", "fields", "symbols", "items", "values", "size",
            "aliases", "default", "order"}


def reordered(node):
    """The same schema with Avro's own keys in reverse order, before the custom properties
    (whose order the stored text keeps)."""
    if isinstance(node, dict):
        keys = [k for k in reversed(list(node)) if k in RESERVED] + \
            [k for k in node if k not in RESERVED]
        return {k: reordered(node[k]) for k in keys}
    if isinstance(node, list):
        return [reordered(item) for item in node]
    return node


# Texts of BASE that every form takes as BASE: what Avro's own rendering ignores.
SAME_TEXT = {
    "indented": json.dumps(BASE, indent=4),
    "keys in another order": json.dumps(reordered(BASE)),
    "full names": json.dumps({k: v for k, v in variant(name="shop.Order", fields=fields(
        (3, {"name": "state", "type": {"type": "enum", "name": "shop.State",
                                       "symbols": ["NEW", "PAID"], "default": "NEW"}}),
        (4, {"name": "previous", "type": ["null", "shop.State"], "default": None}))
    ).items() if k != "namespace"}),
    "long spelled as an object, order ascending": json.dumps(variant(fields=fields(
        (0, {"name": "id", "type": {"type": "long"}, "order": "ascending"})))),
    "aliases fully qualified": json.dumps(variant(aliases=["shop.Purchase", "shop.Sale"])),
}
# Differences the stored text keeps but the comparison (Avro's equality) does not.
SAME_KEY = {
    "custom properties in another order": json.dumps(
        {k: BASE[k] for k in ["type", "name", "namespace", "doc", "fields", "x-tags",
                              "x-owner", "aliases"]}),
    "aliases in another order": json.dumps(variant(aliases=["Sale", "Purchase"])),
    "keys inside a property's value in another order": json.dumps(
        variant(**{"x-tags": {"tier": 1, "pii": False}})),
}
# Differences only normalize=true removes (Confluent's normalizer).
SAME_NORMALIZED = {
    "an integer default of a double": json.dumps(variant(fields=fields(
        (2, {"name": "total", "type": "double", "default": 0})))),
    "an empty doc on an enum": json.dumps(variant(fields=fields(
        (3, {"name": "state", "type": {"type": "enum", "name": "State", "doc": "",
                                       "symbols": ["NEW", "PAID"], "default": "NEW"}})))),
}
# Differences that make another schema, normalized or not.
DIFFERENT = {
    "a doc": variant(doc="an order, paid or not"),
    "no aliases": {k: v for k, v in BASE.items() if k != "aliases"},
    "a custom property's value": variant(**{"x-owner": "team-b"}),
    "a default": variant(fields=fields((2, {"name": "total", "type": "double",
                                            "default": 1.5}))),
    "a field doc": variant(fields=fields((0, {"name": "id", "type": "long", "doc": "key"}))),
    "a field alias": variant(fields=fields((0, {"name": "id", "type": "long",
                                                "aliases": ["key"]}))),
    "a logical type": variant(fields=fields((1, {"name": "price", "type": "bytes"}))),
    "a decimal's scale": variant(fields=fields(
        (1, {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                       "precision": 9, "scale": 3}}))),
    "an enum default": variant(fields=fields(
        (3, {"name": "state", "type": {"type": "enum", "name": "State",
                                       "symbols": ["NEW", "PAID"]}}))),
    "field order": variant(fields=list(reversed(BASE["fields"][:3])) + BASE["fields"][3:]),
    "symbol order": variant(fields=fields(
        (3, {"name": "state", "type": {"type": "enum", "name": "State",
                                       "symbols": ["PAID", "NEW"], "default": "NEW"}}))),
    "a sort order": variant(fields=fields((0, {"name": "id", "type": "long",
                                               "order": "descending"}))),
    "a namespace": variant(namespace="store"),
}

base = parse(json.dumps(BASE))


@pytest.mark.parametrize("text", SAME_TEXT.values(), ids=SAME_TEXT.keys())
def test_what_avros_rendering_ignores(text):
    other = parse(text)
    assert (other.text, other.key, other.normalized) == (base.text, base.key, base.normalized)


@pytest.mark.parametrize("text", SAME_KEY.values(), ids=SAME_KEY.keys())
def test_what_the_comparison_ignores_but_the_stored_text_keeps(text):
    other = parse(text)
    assert other.text != base.text
    assert (other.key, other.normalized) == (base.key, base.normalized)


@pytest.mark.parametrize("text", SAME_NORMALIZED.values(), ids=SAME_NORMALIZED.keys())
def test_what_only_normalize_removes(text):
    other = parse(text)
    assert other.key != base.key
    assert other.normalized == base.normalized


@pytest.mark.parametrize("schema", DIFFERENT.values(), ids=DIFFERENT.keys())
def test_what_stays_significant_even_normalized(schema):
    assert parse(json.dumps(schema)).normalized != base.normalized


def test_the_stored_text_is_avros_rendering():
    text = ('{"type":"record","name":"R","namespace":"a","doc":"d","fields":['
            '{"name":"f","type":{"type":"fixed","name":"F","namespace":"b","size":4},'
            '"doc":"x","default":"abcd","order":"ignore","aliases":["g"],"x-p":1},'
            '{"name":"g","type":"b.F"},'
            '{"name":"e","type":{"type":"enum","name":"E","namespace":"","symbols":["A"]}},'
            '{"name":"m","type":{"type":"map","values":"int","x-q":true}}],'
            '"x-z":1,"aliases":["S"]}')
    scrambled = json.dumps(reordered(json.loads(text)), indent=1)
    assert parse(scrambled).text == text
    # Keys Avro reserves and does not keep on a type are dropped, as Avro drops them.
    assert parse('{"type": "string", "doc": "gone", "x-kept": 1}').text == \
        '{"type":"string","x-kept":1}'
    assert parse('{"type": "int", "name": "gone"}').text == '"int"'


@pytest.mark.parametrize("text", [json.dumps(BASE), *SAME_KEY.values(),
                                  *SAME_NORMALIZED.values()])
def test_every_form_is_its_own_form(text):
    """What is stored compares as what was sent: a replay of the stored text finds it."""
    parsed = parse(text)
    assert parse(parsed.text).text == parsed.text
    assert parse(parsed.text).key == parsed.key
    assert parse(parsed.normalized).normalized == parsed.normalized
    assert parse(parsed.normalized).key == parsed.normalized


@pytest.mark.parametrize("text", [*SAME_TEXT.values(), *SAME_KEY.values(),
                                  *SAME_NORMALIZED.values()])
def test_schemas_taken_as_the_same_are_the_same_to_avro(text):
    """Avro's Parsing Canonical Form (fastavro's) ignores more still (docs, defaults,
    aliases, properties): whatever the registry takes as one schema, it does too."""
    assert to_parsing_canonical_form(parse_schema(json.loads(parse(text).normalized))) == \
        to_parsing_canonical_form(parse_schema(json.loads(base.normalized)))
