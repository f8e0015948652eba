"""cluster.yaml (AWS) and cluster-local.yaml (on-premises): checked with Ray's own code.

No cluster is started and nothing goes to the network. Each file goes through the first two
steps of `ray up` (``ray.autoscaler._private.commands._bootstrap_config``):

- ``prepare_config``: merges the provider's defaults.yaml (``ray/autoscaler/aws/defaults.yaml``
  or ``local/defaults.yaml``), folds ``setup_commands`` into the head and worker setup commands,
  sets per-node-type worker limits; for the local provider it also builds the single node type
  and aborts on fields an on-premises cluster must not have.
- ``validate_config``: validates against Ray's JSON schema (``ray/autoscaler/ray-schema.json``,
  with jsonschema, a dependency of ray itself) plus Ray's cross-field checks.

Neither imports boto3 nor calls AWS, so this runs on a machine that has only raylog's
dependencies. What `ray up` does after them is left out on purpose: on AWS,
``fillout_available_node_types_resources`` (asks EC2 for the CPUs and memory of the instance
types) and ``bootstrap_config`` (key pair, IAM role, subnets, security group) need boto3,
credentials and the network.

On top of Ray's checks, the raylog-specific facts: brokers carry ``raylog_broker``, the head
does not; brokers get RAYLOG_DATA_DIR on local disk; token authentication is on in both start
commands (and Ray's own auth code, run with that environment, accepts it); the setup installs
raylog with Python 3.11 and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

REPO = Path(__file__).resolve().parents[2]
AWS = REPO / "cluster.yaml"
LOCAL = REPO / "cluster-local.yaml"
CONFIGS = [pytest.param(AWS, id="aws"), pytest.param(LOCAL, id="local")]

BROKER_RESOURCE = "raylog_broker"
# EC2 families whose instances come with local NVMe instance-store disks.
NVME_FAMILIES = ("i4i.", "i3en.", "i3.", "i4g.", "i7i.", "i7ie.", "i8g.", "im4gn.", "is4gen.")
ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def load(path: Path) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)


def prepared(path: Path) -> dict:
    """The config as `ray up` has it after its own preparation and validation."""
    config = prepare_config(load(path))
    validate_config(config)
    return config


def ray_start(commands: list[str]) -> tuple[dict[str, str], list[str]]:
    """The environment assignments in front of the single `ray start` and its arguments."""
    found = []
    for command in commands:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        segment: list[str] = []
        for token in [*lexer, ";"]:
            if token not in (";", "&&", "||", "|", "&"):
                segment.append(token)
                continue
            env = {}
            while segment and (m := ENV_ASSIGNMENT.match(segment[0])):
                env[m.group(1)] = m.group(2)
                segment.pop(0)
            if segment[:2] == ["ray", "start"]:
                found.append((env, segment[2:]))
            segment = []
    assert len(found) == 1, f"expected exactly one `ray start` in {commands}"
    return found[0]


def flag(args: list[str], name: str) -> str | None:
    for arg in args:
        if arg == name:
            return ""
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def home_path(value: str) -> str:
    """`$HOME/x` or `~/x` as the `~/x` form that file_mounts uses."""
    for prefix in ("$HOME/", "${HOME}/", "~/"):
        if value.startswith(prefix):
            return "~/" + value[len(prefix):]
    raise AssertionError(f"{value!r} is not under the home directory")


# --- Ray's own validation -------------------------------------------------------------------


@pytest.mark.parametrize("path", CONFIGS)
def test_ray_prepares_and_validates_the_config(path):
    config = prepared(path)
    assert config["cluster_name"].startswith("raylog")
    assert config["head_node_type"] in config["available_node_types"]


@pytest.mark.parametrize("path", CONFIGS)
def test_ray_validation_is_not_a_no_op(path):
    # The same validator refuses a field the schema does not know (additionalProperties is
    # false at the top level), so passing it above means something.
    broken = dict(prepared(path), raylog_data_dir="/mnt/x")
    with pytest.raises(jsonschema.ValidationError):
        validate_config(broken)


@pytest.mark.parametrize("path", CONFIGS)
def test_every_shell_command_parses(path):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    config = load(path)
    for key in ("initialization_commands", "setup_commands", "head_setup_commands",
                "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands"):
        for command in config.get(key, []):
            result = subprocess.run([bash, "-n", "-c", command], capture_output=True, text=True,
                                    timeout=60)
            assert result.returncode == 0, f"{key}: {command!r}: {result.stderr}"


@pytest.mark.parametrize("path", CONFIGS)
def test_ray_start_flags_exist_in_this_ray(path):
    from ray.scripts.scripts import start  # the click command behind `ray start`

    known = {opt for param in start.params for opt in param.opts}
    config = load(path)
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        _, args = ray_start(config[key])
        for arg in args:
            if arg.startswith("-"):
                assert arg.split("=", 1)[0] in known, f"{key}: unknown `ray start` flag {arg}"


# --- node types: head and brokers -----------------------------------------------------------


def test_aws_brokers_carry_the_resource_and_the_head_does_not():
    config = prepared(AWS)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get(BROKER_RESOURCE, 0) == 0, "the head must not be a broker"

    brokers = {name: t for name, t in types.items() if t["resources"].get(BROKER_RESOURCE, 0) >= 1}
    assert brokers, f"no node type has resources {BROKER_RESOURCE} >= 1"
    for name, broker in brokers.items():
        # Stateful nodes: a fixed fleet, never scaled away by the autoscaler as "idle".
        assert broker["min_workers"] == broker["max_workers"] >= 3, name
        instance_type = broker["node_config"]["InstanceType"]
        assert instance_type.startswith(NVME_FAMILIES), f"{name}: {instance_type} has no NVMe"
        assert "InstanceMarketOptions" not in broker["node_config"], f"{name}: no spot brokers"
    assert config["max_workers"] >= sum(b["min_workers"] for b in brokers.values())


def test_aws_brokers_use_the_autoscaler_resource_path():
    # On AWS the autoscaler hands `resources` of the node type to `ray start` through
    # RAY_OVERRIDE_RESOURCES; a --resources flag as well would only confuse matters.
    _, args = ray_start(load(AWS)["worker_start_ray_commands"])
    assert flag(args, "--resources") is None


def test_local_brokers_get_the_resource_from_ray_start():
    # The local provider has one node type and does not set RAY_OVERRIDE_RESOURCES, so the
    # worker start command has to declare the resource itself.
    config = load(LOCAL)
    _, worker_args = ray_start(config["worker_start_ray_commands"])
    resources = json.loads(flag(worker_args, "--resources") or "{}")
    assert resources.get(BROKER_RESOURCE, 0) >= 1

    _, head_args = ray_start(config["head_start_ray_commands"])
    head_resources = json.loads(flag(head_args, "--resources") or "{}")
    assert head_resources.get(BROKER_RESOURCE, 0) == 0, "the head must not be a broker"
    assert config["max_workers"] == len(config["provider"]["worker_ips"])


@pytest.mark.parametrize("path", CONFIGS)
def test_head_and_worker_start_commands(path):
    config = prepared(path)
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert config[key][0] == "ray stop", f"{key} must stop Ray first"
    _, head_args = ray_start(config["head_start_ray_commands"])
    assert flag(head_args, "--head") == ""
    assert flag(head_args, "--port") == "6379"
    assert flag(head_args, "--autoscaling-config") == "~/ray_bootstrap_config.yaml"
    _, worker_args = ray_start(config["worker_start_ray_commands"])
    assert flag(worker_args, "--address") == "$RAY_HEAD_IP:6379"


@pytest.mark.parametrize("path", CONFIGS)
def test_ray_up_starts_raylog_on_the_head(path):
    """After `ray start --head`, the head runs `raylog start` against that cluster, with
    the token the cluster needs; and `raylog` commands there are told which cluster."""
    config = prepared(path)
    args = raylog_start(config["head_start_ray_commands"], "localhost:6379")
    assert args.kafka_port == KAFKA_PORT
    assert "export RAY_ADDRESS=localhost:6379" in "\n".join(config["head_setup_commands"])


@pytest.mark.parametrize("path", CONFIGS)
def test_every_broker_starts_its_kafka_listener_when_it_joins(path):
    """A broker joining after the head's `raylog start` (every broker, at `ray up`; a
    replaced one later) starts its own node's Kafka listener against the head."""
    config = prepared(path)
    args = raylog_start(config["worker_start_ray_commands"], "$RAY_HEAD_IP:6379")
    assert args.kafka_port == KAFKA_PORT
    assert not args.auto_create_topics


KAFKA_PORT = 9092


def raylog_start(commands: list[str], address: str) -> argparse.Namespace:
    """The arguments of the `raylog start` that follows `ray start` in ``commands``, as
    raylog's own command line parses them, checked to reach ``address`` with the token."""
    from raylog.cli.commands import build_parser

    starts = [i for i, c in enumerate(commands) if "raylog" in shlex.split(c)]
    assert starts, "the start commands must run `raylog start`"
    assert starts[0] > max(i for i, c in enumerate(commands) if "ray start" in c)
    words = shlex.split(commands[starts[0]])
    assert "RAY_AUTH_MODE=token" in words
    assert any(w.startswith("RAY_AUTH_TOKEN_PATH=") for w in words)
    args = build_parser().parse_args(words[words.index("raylog") + 1:])
    assert (args.run, args.address) == ("start", address)
    return args


# --- the data directory ---------------------------------------------------------------------


@pytest.mark.parametrize("path", CONFIGS)
def test_brokers_get_raylog_data_dir_on_local_disk(path):
    config = prepared(path)
    env, _ = ray_start(config["worker_start_ray_commands"])
    data_dir = env.get("RAYLOG_DATA_DIR")
    assert data_dir and data_dir.startswith("/"), "worker `ray start` must set RAYLOG_DATA_DIR"
    # prepare_config has folded setup_commands into worker_setup_commands.
    worker_setup = "\n".join(config["worker_setup_commands"])
    assert f"mkdir -p {data_dir}" in worker_setup, "the setup must create the data directory"
    mount_point = str(Path(data_dir).parent)
    assert f"mountpoint -q {mount_point}" in worker_setup, "the data dir must be on a mounted disk"


def test_aws_brokers_mount_the_nvme_instance_store():
    worker_setup = "\n".join(prepared(AWS)["worker_setup_commands"])
    assert "Instance Storage" in worker_setup  # the model name of EC2 NVMe instance-store disks
    assert "mkfs.xfs" in worker_setup and "mount " in worker_setup
    assert "blkid -L raylog" in worker_setup, "never reformat an existing raylog filesystem"


@pytest.mark.parametrize("path", CONFIGS)
def test_head_keeps_the_controller_data_dir(path):
    config = prepared(path)
    env, _ = ray_start(config["head_start_ray_commands"])
    data_dir = env.get("RAYLOG_DATA_DIR")
    assert data_dir and data_dir.startswith("/")
    assert f"mkdir -p {data_dir}" in "\n".join(config["head_setup_commands"])


# --- token authentication -------------------------------------------------------------------


@pytest.mark.parametrize("path", CONFIGS)
def test_token_auth_is_on_in_both_start_commands(path):
    config = load(path)
    mounts = config["file_mounts"]
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        env, _ = ray_start(config[key])
        assert env.get("RAY_AUTH_MODE") == "token", f"{key}: RAY_AUTH_MODE=token missing"
        assert "RAY_AUTH_TOKEN" not in env, f"{key}: never put the token itself in the config"
        token_path = env.get("RAY_AUTH_TOKEN_PATH")
        assert token_path, f"{key}: RAY_AUTH_TOKEN_PATH missing"
        # The token file is delivered to every node by file_mounts, from the operator's machine.
        assert home_path(token_path) in mounts, f"{key}: {token_path} is not in file_mounts"
    # No token value anywhere in the config (comments aside): no RAY_AUTH_TOKEN=... at all.
    assert not re.search(r"RAY_AUTH_TOKEN\s*[=:]", json.dumps(config))


AUTH_PROBE = textwrap.dedent(
    """
    from ray._raylet import AuthenticationMode, AuthenticationTokenLoader, get_authentication_mode
    from ray._private.authentication.authentication_token_setup import (
        ensure_token_if_auth_enabled,
    )

    assert get_authentication_mode() == AuthenticationMode.TOKEN, get_authentication_mode()
    # What `ray start` (head and worker) runs before it starts any Ray process.
    ensure_token_if_auth_enabled(None, create_token_if_missing=False)
    print(AuthenticationTokenLoader.instance().get_raw_token(ignore_auth_mode=True))
    """
)


@pytest.mark.parametrize("path", CONFIGS)
@pytest.mark.parametrize("role", ["head", "worker"])
def test_ray_accepts_the_start_environment_for_token_auth(path, role, tmp_path):
    """Run Ray 2.60's own auth setup with the start command's environment, in a fresh process.

    $HOME is a temporary directory holding a fake token where file_mounts would put the
    operator's one. Ray must see token mode on and load that token.
    """
    env, _ = ray_start(load(path)[f"{role}_start_ray_commands"])
    token_path = home_path(env["RAY_AUTH_TOKEN_PATH"])
    token_file = tmp_path / token_path.removeprefix("~/")
    token_file.parent.mkdir(parents=True)
    token_file.write_text("raylog-test-token\n")

    child_env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    child_env["HOME"] = str(tmp_path)
    home = str(tmp_path)
    for name, value in env.items():
        if name.startswith("RAY_AUTH_"):
            child_env[name] = value.replace("${HOME}", home).replace("$HOME", home)
    result = subprocess.run([sys.executable, "-c", AUTH_PROBE], env=child_env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "raylog-test-token"


# --- installation ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", CONFIGS)
def test_setup_installs_raylog_python311_and_java17(path):
    config = prepared(path)
    local_repo = config["file_mounts"].get("~/raylog")
    assert local_repo is not None, "file_mounts must copy the repository to ~/raylog"
    # `ray up` is run from the repository root; a relative path is taken from there.
    pyproject = (REPO / os.path.expanduser(local_repo) / "pyproject.toml").resolve()
    assert 'name = "raylog"' in pyproject.read_text()

    for key in ("head_setup_commands", "worker_setup_commands"):  # setup_commands folded in
        setup = "\n".join(config[key])
        assert re.search(r"pip install (-e )?~/raylog\b", setup), f"{key}: raylog not installed"
        assert "python3.11 -m venv" in setup, f"{key}: no Python 3.11 venv"
        assert "openjdk-17-jre-headless" in setup, f"{key}: no Java 17 for Spark"
    if config["provider"]["type"] == "aws":
        # The autoscaler on the head uses the AWS node provider, which needs boto3.
        assert "boto3" in "\n".join(config["head_setup_commands"])
