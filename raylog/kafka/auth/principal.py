"""Who a connection is: its principal, as Kafka names them (``User:alice``).

Every connection of a listener has one, read by the checks that come later (ACLs): the SASL
user once authenticated; with TLS and a client certificate, the certificate's subject as an
RFC 2253 distinguished name (``User:CN=alice,OU=eng,O=acme``), which is Kafka's default
principal builder's; otherwise ``User:ANONYMOUS``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

USER = "User"


@dataclasses.dataclass(frozen=True)
class Principal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> Principal:
        return cls(USER, name)


ANONYMOUS = Principal(USER, "ANONYMOUS")

# OpenSSL's long attribute names (Python's getpeercert) -> RFC 2253's short ones
_SHORT = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
          "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
          "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}


def _escape(value: str) -> str:
    out = "".join(f"\\{c}" if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(subject: Any) -> str:
    """RFC 2253's string of a certificate subject as ``ssl.SSLSocket.getpeercert()`` gives
    it (a tuple of relative distinguished names, each a tuple of (attribute, value)), most
    specific first as Java's ``X500Principal.getName()`` writes it."""
    rdns = ["+".join(f"{_SHORT.get(name, name)}={_escape(value)}" for name, value in rdn)
            for rdn in subject]
    return ",".join(reversed(rdns))


def from_certificate(peercert: dict | None) -> Principal:
    """The principal of a verified client certificate (ANONYMOUS without one)."""
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    return Principal.user(distinguished_name(peercert["subject"]))
