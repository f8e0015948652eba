"""Listener security settings: what is refused when they are built, and why."""

from __future__ import annotations

import os
import shutil
import ssl

import pytest

from raylog.errors import SecurityConfigError
from raylog.kafka.gateway.security import ListenerSecurity
from tests.tls import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls(pki, **more) -> ListenerSecurity:
    return ListenerSecurity(security_protocol="SASL_SSL", ssl_certfile=str(pki.server_cert),
                            ssl_keyfile=str(pki.server_key), **more)


def test_defaults_are_plaintext_without_login():
    security = ListenerSecurity()
    assert (security.uses_tls, security.uses_sasl, security.mechanisms) == (False, False, ())
    assert security.ssl_context() is None


def test_sasl_defaults_to_both_scram_mechanisms_and_takes_a_list():
    assert ListenerSecurity(security_protocol="SASL_PLAINTEXT").mechanisms == \
        ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert ListenerSecurity(security_protocol="SASL_PLAINTEXT",
                            sasl_enabled_mechanisms="PLAIN, SCRAM-SHA-512").mechanisms == \
        ("PLAIN", "SCRAM-SHA-512")


def test_a_tls_listener_gets_a_server_context(pki):
    context = tls(pki, ssl_cafile=str(pki.ca), ssl_client_auth="required").ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert tls(pki, ssl_cafile=str(pki.ca), ssl_client_auth="requested").ssl_context() \
        .verify_mode == ssl.CERT_OPTIONAL
    assert tls(pki).ssl_context().verify_mode == ssl.CERT_NONE


def test_settings_round_trip_as_a_dict(pki):
    security = tls(pki, sasl_enabled_mechanisms=("PLAIN",), super_users=["User:admin"])
    assert ListenerSecurity(**security.to_dict()) == security


def test_super_users_are_principals_as_kafka_writes_them():
    assert ListenerSecurity(super_users="User:admin; User:CN=ops,O=acme").super_users == \
        ("User:admin", "User:CN=ops,O=acme")
    for bad in ("admin", "User:", ["Group:ops"]):
        with pytest.raises(SecurityConfigError, match=r"super\.users must be principals"):
            ListenerSecurity(super_users=bad)


@pytest.mark.parametrize("settings, message", [
    ({"security_protocol": "SASL_TLS"}, "security.protocol must be one of"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_enabled_mechanisms": ["GSSAPI"]},
     "unknown or none \\['GSSAPI'\\]"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_enabled_mechanisms": []}, "unknown or none"),
    ({"sasl_enabled_mechanisms": ["PLAIN"]}, "needs a SASL security.protocol"),
    ({"security_protocol": "SSL"}, "needs ssl_certfile"),
    ({"ssl_certfile": "/x.pem"}, "has no TLS"),
    ({"ssl_client_auth": "required"}, "has no TLS"),
    ({"ssl_client_auth": "always"}, "ssl.client.auth must be one of"),
    ({"security_protocol": "SASL_PLAINTEXT", "failed_authentication_delay_ms": -1},
     "failed_authentication_delay_ms must be"),
    ({"failed_authentication_delay_ms": 600, "failed_authentication_max_delay_ms": 500},
     "is above"),
])
def test_bad_settings_are_refused_with_their_name(settings, message):
    with pytest.raises(SecurityConfigError, match=message):
        ListenerSecurity(**settings)


def test_a_missing_certificate_is_refused(pki, tmp_path):
    with pytest.raises(SecurityConfigError, match=r"ssl_certfile '.*absent.pem': no such file"):
        ListenerSecurity(security_protocol="SSL", ssl_certfile=str(tmp_path / "absent.pem"))


def test_a_key_that_is_not_the_certificates_is_refused(pki, tmp_path):
    _, other_key = pki.client("someone")
    with pytest.raises(SecurityConfigError, match="do not make a server identity"):
        ListenerSecurity(security_protocol="SSL", ssl_certfile=str(pki.server_cert),
                         ssl_keyfile=str(other_key))


def test_a_file_that_is_not_pem_is_refused(pki, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(SecurityConfigError, match="do not make a server identity"):
        ListenerSecurity(security_protocol="SSL", ssl_certfile=str(garbage),
                         ssl_keyfile=str(pki.server_key))
    with pytest.raises(SecurityConfigError, match=r"ssl_cafile .* holds no CA"):
        tls(pki, ssl_cafile=str(garbage), ssl_client_auth="required")


def test_client_authentication_needs_a_ca(pki):
    with pytest.raises(SecurityConfigError, match="needs ssl_cafile"):
        tls(pki, ssl_client_auth="requested")


def test_the_certificate_file_may_hold_the_key(pki, tmp_path):
    both = tmp_path / "both.pem"
    both.write_bytes(pki.server_cert.read_bytes() + pki.server_key.read_bytes())
    assert ListenerSecurity(security_protocol="SSL", ssl_certfile=str(both)).uses_tls


def test_an_unreadable_file_is_refused(pki, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    locked = tmp_path / "locked.key"
    shutil.copy(pki.server_key, locked)
    locked.chmod(0)
    with pytest.raises(SecurityConfigError, match="not readable"):
        ListenerSecurity(security_protocol="SSL", ssl_certfile=str(pki.server_cert),
                         ssl_keyfile=str(locked))
