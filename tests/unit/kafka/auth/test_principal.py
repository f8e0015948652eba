"""Principals, and a client certificate's subject as Kafka's default builder names it."""

from __future__ import annotations

from raylog.kafka.auth.principal import ANONYMOUS, Principal, from_certificate


def test_a_certificate_subject_is_an_rfc_2253_name_most_specific_first():
    peercert = {"subject": ((("countryName", "DE"),), (("organizationName", "Acme, Inc"),),
                            (("organizationalUnitName", "eng"),),
                            (("commonName", "alice"),))}
    assert str(from_certificate(peercert)) == "User:CN=alice,OU=eng,O=Acme\\, Inc,C=DE"


def test_no_certificate_is_anonymous():
    assert from_certificate(None) is ANONYMOUS
    assert from_certificate({}) is ANONYMOUS
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert str(Principal.user("bob")) == "User:bob"
