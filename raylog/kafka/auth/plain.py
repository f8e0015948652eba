"""SASL/PLAIN's one message (RFC 4616): ``[authzid] NUL authcid NUL passwd``, UTF-8."""

from __future__ import annotations

from raylog.errors import AuthenticationError


def parse(message: bytes) -> tuple[str, str]:
    """(user, password) of a PLAIN message; AuthenticationError if malformed, or if it asks
    for an authorization id other than the user (Kafka refuses that too)."""
    try:
        authzid, user, password = bytes(message).decode().split("\0")
    except (UnicodeDecodeError, ValueError) as e:
        raise AuthenticationError("a malformed SASL/PLAIN message") from e
    if not user or not password:
        raise AuthenticationError("a SASL/PLAIN message without user or password")
    if authzid and authzid != user:
        raise AuthenticationError(f"authorization id {authzid!r} is not the user {user!r}")
    return user, password
