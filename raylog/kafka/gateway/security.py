"""How a Kafka listener protects itself: its security protocol, SASL mechanisms and TLS
files, as Kafka's broker settings name them (``security.protocol`` per listener,
``sasl.enabled.mechanisms``, ``ssl.client.auth``, the PEM files of ``ssl.keystore.*`` and
``ssl.truststore.*`` as Python's ssl module takes them).

- ``security_protocol``: PLAINTEXT (no TLS, no login), SSL (TLS; with a client
  certificate, mTLS, its subject is the principal), SASL_PLAINTEXT (login, no TLS: passwords
  of PLAIN cross the network in the clear), SASL_SSL (both).
- ``sasl_enabled_mechanisms``: of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (default the two
  SCRAM ones); only with a SASL protocol.
- ``ssl_certfile`` (the server's certificate chain, PEM), ``ssl_keyfile`` (its private key,
  PEM; in the certfile if not given), ``ssl_cafile`` (the CAs client certificates must chain
  to), ``ssl_client_auth`` (required, requested or none: Kafka's ``ssl.client.auth``;
  requested and required need ``ssl_cafile``); only with a TLS protocol.
- ``super_users`` (Kafka's ``super.users``: principals such as ``User:admin``, a list or
  one string separated by ";"): who may describe and alter users over Kafka's protocol
  (raylog/kafka/gateway/scram_users.py); none by default.
- ``failed_authentication_delay_ms`` (Kafka's ``connection.failed.authentication.delay.ms``,
  100) and ``failed_authentication_max_delay_ms`` (5000): a failed login is answered after a
  delay that doubles with the client address's recent failures, up to the maximum
  (raylog/kafka/auth/throttle.py).

Everything is checked when built: an unknown protocol or mechanism, a missing or unreadable
file, a key that does not match its certificate, a setting given to a protocol that does not
use it: SecurityConfigError naming the setting and the value. Plain data, picklable (the
listener actors get it as a dict: :meth:`to_dict`, ``ListenerSecurity(**d)``).
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from typing import Any

from raylog.errors import SecurityConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
               "none": ssl.CERT_NONE}


@dataclasses.dataclass(frozen=True)
class ListenerSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_enabled_mechanisms: tuple[str, ...] | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None
    ssl_client_auth: str = "none"
    failed_authentication_delay_ms: int = 100
    failed_authentication_max_delay_ms: int = 5000
    super_users: tuple[str, ...] = ()
    # ACLs (raylog/kafka/auth/acls.py): off, everything is allowed, as Kafka's brokers
    # without authorizer.class.name; on, denied unless an ACL allows
    authorizer: bool = False
    allow_everyone_if_no_acl_found: bool = False

    def __post_init__(self) -> None:
        if self.security_protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol must be one of "
                                      f"{', '.join(PROTOCOLS)}, got {self.security_protocol!r}")
        self._check_sasl()
        self._check_tls()
        for name in ("failed_authentication_delay_ms", "failed_authentication_max_delay_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise SecurityConfigError(f"{name} must be an integer >= 0, got {value!r}")
        if self.failed_authentication_delay_ms > self.failed_authentication_max_delay_ms:
            raise SecurityConfigError(
                f"failed_authentication_delay_ms ({self.failed_authentication_delay_ms}) is "
                f"above failed_authentication_max_delay_ms "
                f"({self.failed_authentication_max_delay_ms})")
        self._check_super_users()
        if self.uses_tls:
            self.ssl_context()  # loads the files: a bad one is refused now, not per client

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The SASL mechanisms enabled (none without SASL)."""
        if not self.uses_sasl:
            return ()
        return self.sasl_enabled_mechanisms or DEFAULT_MECHANISMS

    def _check_sasl(self) -> None:
        given = self.sasl_enabled_mechanisms
        if given is None:
            return
        if isinstance(given, str):
            given = tuple(m.strip() for m in given.split(",") if m.strip())
        object.__setattr__(self, "sasl_enabled_mechanisms", tuple(given))
        if not self.uses_sasl:
            raise SecurityConfigError(f"sasl.enabled.mechanisms {','.join(given)!r} needs a "
                                      f"SASL security.protocol (SASL_PLAINTEXT or SASL_SSL), "
                                      f"not {self.security_protocol}")
        unknown = [m for m in given if m not in MECHANISMS]
        if unknown or not given:
            raise SecurityConfigError(f"sasl.enabled.mechanisms: unknown or none "
                                      f"{unknown or list(given)!r} (known: "
                                      f"{', '.join(MECHANISMS)})")

    def _check_super_users(self) -> None:
        given = self.super_users
        if isinstance(given, str):  # Kafka's spelling: "User:alice;User:bob"
            given = [p.strip() for p in given.split(";") if p.strip()]
        object.__setattr__(self, "super_users", tuple(given))
        bad = [p for p in self.super_users
               if not isinstance(p, str) or not p.startswith("User:") or p == "User:"]
        if bad:
            raise SecurityConfigError(f"super.users must be principals such as User:alice, "
                                      f"got {bad!r}")

    def _check_tls(self) -> None:
        if self.ssl_client_auth not in CLIENT_AUTH:
            raise SecurityConfigError(f"ssl.client.auth must be one of "
                                      f"{', '.join(CLIENT_AUTH)}, got {self.ssl_client_auth!r}")
        files = {"ssl_certfile": self.ssl_certfile, "ssl_keyfile": self.ssl_keyfile,
                 "ssl_cafile": self.ssl_cafile}
        if not self.uses_tls:
            given = [name for name, path in files.items() if path]
            if given or self.ssl_client_auth != "none":
                raise SecurityConfigError(
                    f"{', '.join(given) or 'ssl_client_auth'} given, but security.protocol "
                    f"{self.security_protocol} has no TLS (SSL or SASL_SSL)")
            return
        if not self.ssl_certfile:
            raise SecurityConfigError(f"security.protocol {self.security_protocol} needs "
                                      f"ssl_certfile (the server's certificate, PEM)")
        if self.ssl_client_auth != "none" and not self.ssl_cafile:
            raise SecurityConfigError(f"ssl.client.auth {self.ssl_client_auth} needs "
                                      f"ssl_cafile (the CAs client certificates chain to)")
        for name, path in files.items():
            if path and not os.path.isfile(path):
                raise SecurityConfigError(f"{name} {path!r}: no such file")
            if path and not os.access(path, os.R_OK):
                raise SecurityConfigError(f"{name} {path!r}: not readable")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context (None without TLS); SecurityConfigError when its files
        do not make one (a key that is not the certificate's, a file that is not PEM)."""
        if not self.uses_tls:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        except ssl.SSLError as e:
            raise SecurityConfigError(
                f"ssl_certfile {self.ssl_certfile!r} and ssl_keyfile "
                f"{self.ssl_keyfile or self.ssl_certfile!r} do not make a server identity "
                f"(a key that is not the certificate's, or not PEM): {e.reason or e}") from e
        except OSError as e:
            raise SecurityConfigError(f"cannot read ssl_certfile {self.ssl_certfile!r} or "
                                      f"ssl_keyfile {self.ssl_keyfile!r}: {e}") from e
        if self.ssl_cafile:
            try:
                context.load_verify_locations(cafile=self.ssl_cafile)
            except (ssl.SSLError, OSError) as e:
                raise SecurityConfigError(f"ssl_cafile {self.ssl_cafile!r} holds no CA "
                                          f"certificate (PEM): {e}") from e
        context.verify_mode = CLIENT_AUTH[self.ssl_client_auth]
        return context

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values (``ListenerSecurity(**d)`` builds them again)."""
        values = dataclasses.asdict(self)
        if values["sasl_enabled_mechanisms"] is not None:
            values["sasl_enabled_mechanisms"] = list(values["sasl_enabled_mechanisms"])
        values["super_users"] = list(values["super_users"])
        return values
