"""``raylog gateway`` and the listener actors have Ray carry a produce's batches inline in
the call to the leader (not through the object store), unless the user set Ray's
threshold."""

from __future__ import annotations

import io

import pytest

from actors.launch import listener_runtime_env
from raylog.cli import gateway
from raylog.cli.commands import build_parser, main
from raylog.kafka.gateway import settings
from raylog.util.cluster_names import ACTOR_RUNTIME_ENV

SETTING = "RAY_max_direct_call_object_size"


def test_the_threshold_is_raised_unless_set():
    environ: dict[str, str] = {}
    settings.inline_appends(environ)
    assert environ == {SETTING: str(settings.INLINE_ARGUMENT_BYTES)}
    assert settings.INLINE_ARGUMENT_BYTES >= 1 << 20  # a librdkafka batch (1 MB) fits
    environ = {SETTING: "1000"}
    settings.inline_appends(environ)
    assert environ == {SETTING: "1000"}


class _Connected(Exception):
    pass


def test_it_is_set_before_the_command_connects_to_ray(monkeypatch):
    monkeypatch.delenv(SETTING, raising=False)
    seen = []

    def connect(args, out):
        import os

        seen.append(os.environ.get(SETTING))
        raise _Connected

    monkeypatch.setattr(gateway, "connect_or_embed", connect)
    with pytest.raises(_Connected):
        gateway.cmd_gateway(build_parser().parse_args(["gateway"]), None)
    assert seen == [str(settings.INLINE_ARGUMENT_BYTES)]


def test_the_listener_actors_get_it_in_their_environment(monkeypatch):
    """``raylog start --kafka-port``'s listener actors: the setting, beside the environment
    every raylog actor gets; a user's own value (in the starting process) is passed on."""
    monkeypatch.delenv(SETTING, raising=False)
    env = listener_runtime_env()["env_vars"]
    assert env == {**ACTOR_RUNTIME_ENV["env_vars"],
                   SETTING: str(settings.INLINE_ARGUMENT_BYTES)}
    monkeypatch.setenv(SETTING, "1000")
    assert listener_runtime_env()["env_vars"][SETTING] == "1000"


def test_security_options_are_kafkas_on_both_commands(tmp_path):
    """``raylog gateway --security-protocol``, ``raylog start --kafka-security-protocol``:
    the same settings either way."""
    served = build_parser().parse_args(["gateway", "--security-protocol", "SASL_PLAINTEXT",
                                        "--sasl-mechanisms", "PLAIN,SCRAM-SHA-512",
                                        "--max-connections-per-ip", "50"])
    started = build_parser().parse_args(["start", "--kafka-port", "9092",
                                         "--kafka-security-protocol", "SASL_PLAINTEXT",
                                         "--kafka-sasl-mechanisms", "PLAIN,SCRAM-SHA-512",
                                         "--kafka-max-connections-per-ip", "50"])
    for args in (served, started):
        security = gateway.security_from(args)
        assert security.mechanisms == ("PLAIN", "SCRAM-SHA-512")
        assert args.max_connections_per_ip == 50


def test_the_authorizer_options_on_both_commands():
    """``--authorizer`` / ``--kafka-authorizer`` and the no-ACL setting reach the
    ListenerSecurity (and so the listener actors, through its to_dict); off by default."""
    served = build_parser().parse_args(["gateway", "--authorizer",
                                        "--allow-everyone-if-no-acl-found"])
    started = build_parser().parse_args(["start", "--kafka-port", "9092",
                                         "--kafka-authorizer",
                                         "--kafka-allow-everyone-if-no-acl-found"])
    for args in (served, started):
        security = gateway.security_from(args)
        assert security.authorizer and security.allow_everyone_if_no_acl_found
        assert security.to_dict()["authorizer"] is True
    default = gateway.security_from(build_parser().parse_args(["gateway"]))
    assert not default.authorizer and not default.allow_everyone_if_no_acl_found


@pytest.mark.parametrize("argv, message", [
    (["--security-protocol", "SSL", "--ssl-certfile", "/nowhere/server.pem"],
     "ssl_certfile '/nowhere/server.pem': no such file"),
    (["--sasl-mechanisms", "PLAIN"], "needs a SASL security.protocol"),
    (["--security-protocol", "SASL_SSL", "--sasl-mechanisms", "GSSAPI"], "unknown or none"),
])
def test_bad_security_is_refused_before_anything_connects(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(gateway, "connect_or_embed", lambda *a: pytest.fail("connected"))
    assert main(["gateway", *argv], out=io.StringIO()) == 1
    assert message in capsys.readouterr().err


def test_raylog_start_refuses_bad_security_before_starting_listeners(monkeypatch, capsys):
    import raylog.session
    from raylog.cli import commands

    class Cluster:
        controller = type("C", (), {"list_topics": staticmethod(lambda: [])})

    monkeypatch.setattr(commands, "connect", lambda args, create=False: Cluster())
    monkeypatch.setattr(raylog.session, "start_kafka_listeners",
                        lambda *a, **k: pytest.fail("listeners started"))
    assert main(["start", "--kafka-port", "0", "--kafka-security-protocol", "SSL"],
                out=io.StringIO()) == 1
    assert "needs ssl_certfile" in capsys.readouterr().err
