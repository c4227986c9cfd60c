"""Hostile values at render time, even when the validation play was skipped: the record builder
refuses what would add a line or an option, and what it lets through (quotes, `$`, `%`, backslashes,
semicolons, spaces) comes out of the systemd unit and the Compose file as exactly one argument or
one variable — checked with systemd's own parser (`systemd-analyze verify`, on this host or in the
node image) and Compose's (`docker-compose config`), and with a strict line parser of our own.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import FilterModule as CoreFilters

from conftest import filter_plugins
from vllm_deploy import containers, instances

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = {"engine": "cpu", "bind": "127.0.0.1", "hf_home": "/var/lib/vllm/hf", "cache_root": "/var/lib/vllm/cache"}
NODE_IMAGE = "vllm-deploy/node:bookworm"

FILTERS = filter_plugins()

# Legal values that a naive template would still break: every one must stay one argument / one value.
TRICKY_FLAGS = {
    "chat_template": "/srv/templates/it's \"quoted\" $HOME %h ${X} a;b \\n.jinja",
    "hf_overrides": {"note": "$HOME %i \"q\" \\ ; --host 0.0.0.0"},
    "revision": "two words",
    "lora_modules": ["a=/srv/lora/$a", "b=/srv/lora/%n"],
    "max_model_len": 256,
}
TRICKY_ENV = {"VLLM_LOGGING_PREFIX": "$USER %H \"x\" \\ ; y", "OMP_NUM_THREADS": "2"}


def record(**inst):
    base = {"name": "tiny", "model": "tiny", "port": 8000, "gpus": [], "flags": dict(TRICKY_FLAGS), "env": dict(TRICKY_ENV)}
    base.update(inst)
    model = {"path": "/srv/models/$tiny%d", "served_name": "tiny@v1"}
    return instances.build_instance(base, model, "tiny", gpu_facts={}, plan=None, defaults=DEFAULTS)


def jinja_env():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPO / "roles/vllm_serve/templates")), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(CoreFilters().filters())
    # The templates call the filters by their collection names (vllm_deploy.fleet.*), as Ansible does.
    env.filters.update({f"vllm_deploy.fleet.{name}": fn for name, fn in FILTERS.items()})
    return env


def render_unit(rec, venv="/opt/vllm/venv"):
    return jinja_env().get_template("vllm.service.j2").render(
        instance=rec, unit_instance=rec, ansible_managed="Ansible managed", vllm_user="vllm", vllm_home="/var/lib/vllm",
        vllm_venv=venv, vllm_config_dir="/etc/vllm")


def render_compose(rec, env_file):
    settings = {"image": "vllm-deploy/vllm:0.32.0-cpu-0123456789ab", "uid": 10001, "gid": 10001,
                "gpu_reservations": True, "shm_size": "2g", "ipc_host": False, "restart": "unless-stopped",
                "ulimits": {"memlock": -1}, "env_file": env_file}
    return jinja_env().get_template("compose.yml.j2").render(instance=rec, unit_instance=rec, compose=settings, ansible_managed="Ansible managed")


# --- a strict reading of the unit: what systemd would take as directives, and their values

UNIT_KEYS = {
    "Unit": {"Description", "Documentation", "After", "Wants"},
    "Service": {"Type", "User", "Group", "WorkingDirectory", "Environment", "EnvironmentFile", "ExecStart", "Restart",
                "RestartSec", "TimeoutStartSec", "TimeoutStopSec", "KillMode", "LimitNOFILE", "LimitMEMLOCK",
                "NoNewPrivileges", "PrivateTmp", "ProtectSystem", "ProtectHome", "ProtectKernelTunables",
                "ProtectControlGroups", "RestrictSUIDSGID"},
    "Install": {"WantedBy"},
}


def parse_unit(text):
    """[(section, key, value)] of every directive; fails on any line systemd would read otherwise."""
    section, out = None, []
    for line in text.split("\n"):
        if not line.strip() or line.startswith(("#", ";")):
            continue
        header = re.fullmatch(r"\[(\w+)\]", line)
        if header:
            section = header.group(1)
            continue
        assert not line.endswith("\\"), f"a continuation line: {line!r}"
        key, sep, value = line.partition("=")
        assert sep and section in UNIT_KEYS and key in UNIT_KEYS[section], f"not a directive of ours: {line!r}"
        out.append((section, key, value))
    return out


def systemd_words(value):
    """A value split as systemd does for ExecStart=/Environment= (specifiers %% and $$ first)."""
    return shlex.split(value.replace("%%", "%").replace("$$", "$"))


def test_tricky_values_stay_one_argument_and_one_variable_each():
    rec = record()
    directives = parse_unit(render_unit(rec))
    execs = [v for _, k, v in directives if k == "ExecStart"]
    assert len(execs) == 1
    assert systemd_words(execs[0]) == ["/opt/vllm/venv/bin/python"] + rec["argv"]
    argv = systemd_words(execs[0])
    assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--chat-template") + 1] == TRICKY_FLAGS["chat_template"]
    assert json.loads(argv[argv.index("--hf-overrides") + 1]) == TRICKY_FLAGS["hf_overrides"]
    envs = [v for _, k, v in directives if k == "Environment"]
    parsed = dict(w.split("=", 1) for v in envs for w in systemd_words(v))
    assert len(envs) == len(rec["env"]) + 1  # HOME plus the record's, one line each
    assert parsed == {"HOME": "/var/lib/vllm", **rec["env"]}
    assert parsed["VLLM_LOGGING_PREFIX"] == TRICKY_ENV["VLLM_LOGGING_PREFIX"]


def _verify_unit(tmp_path, text):
    """systemd-analyze verify on the unit: here if the host has it, else inside the node image."""
    unit = tmp_path / "vllm-tiny.service"
    unit.write_text(text)
    if shutil.which("systemd-analyze"):
        run = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=120)
    else:
        run = subprocess.run(["docker", "run", "--rm", "-v", f"{tmp_path}:/u:ro", NODE_IMAGE, "systemd-analyze", "verify",
                              "/u/vllm-tiny.service"], capture_output=True, text=True, timeout=120)
    return run.returncode, run.stdout + run.stderr


def test_systemd_parses_the_unit_with_tricky_values(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(shutil.which("python3"))
    rc, out = _verify_unit(tmp_path, render_unit(record(), venv=str(venv)))
    # Only the unit's own lines may be named: an unknown directive or a bad quote is reported by file:line.
    problems = [line for line in out.splitlines() if "vllm-tiny.service:" in line]
    assert rc == 0 and problems == [], out


def test_an_injected_line_would_be_seen_by_systemd(tmp_path):
    """The check above can fail: the same unit with an Environment= value that carries a newline into a
    directive systemd does not know is reported (what the record builder and the template now refuse)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(shutil.which("python3"))
    text = render_unit(record(), venv=str(venv)).replace("[Install]", "NotADirective=1\n\n[Install]")
    rc, out = _verify_unit(tmp_path, text)
    assert "NotADirective" in out


@pytest.mark.parametrize("inst, model, message", [
    pytest.param({"env": {"VLLM_X": "a\nExecStartPre=/bin/sh -c id"}}, {}, "env contains the control character U+000A", id="env-value"),
    pytest.param({"env": {"A\nB": "x"}}, {}, "env contains the control character U+000A", id="env-key"),
    pytest.param({"env": {"A B": "x"}}, {}, "'A B' is not an environment variable name", id="env-key-space"),
    pytest.param({"flags": {"chat_template": "/t\n--host 0.0.0.0"}}, {}, "argv contains the control character U+000A", id="flag-value"),
    pytest.param({"flags": {"lora_modules": ["a=/x", "b=/y\r"]}}, {}, "argv contains the control character U+000D", id="flag-list-item"),
    pytest.param({"flags": {"tokenizer": "--host"}}, {}, "flag tokenizer has the value '--host'", id="flag-dash"),
    pytest.param({"flags": {"lora_modules": ["a=/x", "--port"]}}, {}, "flag lora_modules has the value '--port'", id="flag-list-dash"),
    pytest.param({"bind": "127.0.0.1\n"}, {}, "bind contains the control character U+000A", id="bind"),
    pytest.param({"gpus": ["GPU-1\n"]}, {}, "devices contains the control character U+000A", id="gpu-uuid"),
    pytest.param({}, {"path": "/srv/m\n[Install]"}, "model.path contains the control character U+000A", id="model-path"),
    pytest.param({}, {"served_name": "x\x1b[31m"}, "model.served_name contains the control character U+001B", id="served-name"),
    pytest.param({"name": "tiny\n"}, {}, "instance name 'tiny\\n' is not lower-case", id="name"),
])
def test_the_record_builder_refuses_what_validation_would_have(inst, model, message):
    base = {"name": "tiny", "model": "tiny", "port": 8000, "gpus": [], "flags": {}, **inst}
    with pytest.raises(ValueError, match=re.escape(message)):
        instances.build_instance(base, {"path": "/srv/models/tiny", **model}, "tiny", gpu_facts={}, plan=None, defaults=DEFAULTS)


def test_the_filter_reports_it_as_a_filter_error_not_a_traceback():
    bad = [{"name": "tiny", "model": "tiny", "port": 8000, "env": {"X": "a\nb"}}]
    with pytest.raises(AnsibleFilterError, match="vllm_build_instances: instance tiny: env contains the control character U\\+000A"):
        FILTERS["vllm_build_instances"](bad, {"tiny": {"path": "/m"}}, {}, {}, {**DEFAULTS, "plan": False})


def test_the_unit_template_refuses_a_newline_in_a_hand_made_record():
    rec = record()
    rec = {**rec, "env": {**rec["env"], "VLLM_X": "a\nExecStartPre=/bin/sh"}}  # past build_instance's check
    with pytest.raises(AnsibleFilterError, match="U\\+000A"):
        render_unit(rec)
    rec = {**record(), "argv": record()["argv"] + ["--revision", "x\n[Install]"]}
    with pytest.raises(AnsibleFilterError, match="U\\+000A"):
        render_unit(rec)


def test_compose_reads_tricky_values_as_written(tmp_path):
    rec = record()
    (tmp_path / "tiny.env").write_text("VLLM_API_KEY=k\n")
    path = tmp_path / "compose.yml"
    path.write_text(render_compose(rec, str(tmp_path / "tiny.env")))
    run = subprocess.run(["docker-compose", "-f", str(path), "config"], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent-home", "USER": "nobody"})
    assert run.returncode == 0, run.stderr
    assert "variable is not set" not in run.stderr, run.stderr  # nothing was read as $VAR
    service = yaml.safe_load(run.stdout)["services"]["vllm-tiny"]
    # `config` prints the file re-escaped for Compose; one unescape gives what the container gets.
    command = [a.replace("$$", "$") for a in service["command"]]
    assert command == containers.container_args(rec)
    assert command.count("--host") == 1
    environment = {k: v.replace("$$", "$") for k, v in service["environment"].items()}
    assert environment == {**containers.container_env(rec), "VLLM_API_KEY": "k"}  # + the env_file
    assert [v.replace("$$", "$") for v in service["volumes"]][0].startswith("/srv/models/$tiny%d:/srv/models/$tiny%d")
