"""The real validation play (role vllm_validate, Ansible itself, no host touched) on switches and
variables as an operator passes them: `-e name=false` arrives as a string and must mean false."""

from __future__ import annotations

import pytest

from conftest import VALIDATE_PLAY, gpu_nodes_inventory, run_playbook

pytestmark = pytest.mark.playbook  # every test here runs ansible-playbook


def validate(tmp_path, *extra):
    return run_playbook(VALIDATE_PLAY, *extra, tmp_path=tmp_path)


@pytest.mark.parametrize("value", ["false", "False", "no", "0", "true", "yes"])
def test_string_forms_of_a_switch_pass(tmp_path, value):
    rc, out = validate(tmp_path, "-e", f"vllm_plan_enforce={value}", "-e", f"vllm_serve_auto_degrade={value}")
    assert rc == 0, out[-2000:]


@pytest.mark.parametrize("extra, message", [
    ("vllm_plan_enforce=fasle", "node1: vllm_plan_enforce: 'fasle' is not a boolean — set it to true or false"),
    ("nvidia_driver_install=maybe", "node1: nvidia_driver_install: 'maybe' is not a boolean — set it to true or false"),
    ("vllm_serve_bind=0.0.0.0", "node1: vllm_serve_bind: this variable was renamed — set vllm_bind instead"),
    ("vllm_serve_mode=compose", "node1: vllm_serve_mode: this variable was renamed — set vllm_mode instead"),
    ("vllm_mode=podman", 'node1: vllm_mode is "podman" — use systemd'),
])
def test_bad_switches_and_old_names_are_refused_in_one_line(tmp_path, extra, message):
    rc, out = validate(tmp_path, "-e", extra)
    assert rc != 0
    assert message in out, out[-2000:]
    assert "Traceback" not in out


def validate_inventory_file(tmp_path, group_vars, *extra):
    """The validation play against a YAML inventory (group_vars as an operator writes them)."""
    return run_playbook(VALIDATE_PLAY, *extra, tmp_path=tmp_path, inventory=gpu_nodes_inventory(tmp_path, group_vars))


def test_dict_and_list_flags_pass_the_real_play(tmp_path):
    rc, out = validate_inventory_file(tmp_path, """\
        vault_vllm_api_key: k
        vllm_engine: cpu
        vllm_instances:
          - name: a
            model: tiny
            port: 8000
            bind: 0.0.0.0
            flags:
              hf_overrides: {rope_scaling: {rope_type: yarn, factor: 4.0}}
              speculative_config: {method: ngram, num_speculative_tokens: 5, prompt_lookup_max: 4}
              enable_lora: true
              lora_modules: [sql=/srv/lora/sql]
              chat_template: /srv/templates/chat.jinja
""")
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize("vars_, message", [
    ("        vllm_bind: yes\n",
     "node1: vllm_bind: must be a string holding an IP address, got boolean True (YAML reads yes/no/on/off as booleans)"),
    ("        vllm_bind: 0.0.0.0\n        vllm_instances: [{name: a, model: tiny, port: 8000}]\n",
     "node1: vllm_bind: instance a listens on 0.0.0.0 (beyond localhost) without an API key — set vault_vllm_api_key"),
    ("        vllm_versions_override: {vllm: {cpu: {version: 0.33}}}\n",
     "node1: vllm_versions_override.vllm.cpu.version: must be a string, got number 0.33"),
    ('        vllm_instances: [{name: a, model: tiny, port: 8000, env: {VLLM_X: "1\\nExecStartPre=/bin/id"}}]\n',
     "node1: vllm_instances[0].env.VLLM_X: contains the control character U+000A"),
    ("        vllm_instances: [{name: a, model: tiny, port: 8000, flags: {tokenizer: --host}}]\n",
     "node1: vllm_instances[0].flags.tokenizer: value '--host' starts with a dash"),
    ("        vllm_instances: [{name: a, model: tiny, port: 8000, flags: {max_model_length: 512}}]\n",
     "node1: vllm_instances[0].flags.max_model_length: is not an argument of"),
])
def test_bad_group_vars_are_refused_by_the_real_play(tmp_path, vars_, message):
    rc, out = validate_inventory_file(tmp_path, vars_)
    assert rc != 0
    assert message in out, out[-3000:]
    assert "Traceback" not in out and "_AnsibleTagged" not in out and "AnsibleMapping" not in out


def test_a_private_network_allows_a_wildcard_bind_without_a_key(tmp_path):
    rc, out = validate_inventory_file(
        tmp_path, "vllm_bind: 0.0.0.0\nvllm_private_network: true\nvllm_instances: [{name: a, model: tiny, port: 8000}]\n")
    assert rc == 0, out[-3000:]


def test_a_bad_routing_mode_is_refused_in_one_line_before_any_host_is_touched(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("""\
all:
  children:
    gpu-nodes:
      hosts: {node1: {ansible_connection: local}}
      vars:
        vllm_models: {tiny: {path: /srv/models/tiny, served_name: tiny-chat}}
        vllm_instances: [{name: a, model: tiny, port: 8000}]
    vllm_gateway:
      hosts: {node1: {}}
      vars:
        vllm_gateway_keys: [{name: team-a, key: 0123456789abcdef0123}]
        vllm_gateway_routing: {tiny-chat: prefx}
""")
    rc, out = run_playbook(VALIDATE_PLAY, tmp_path=tmp_path, inventory=inventory)
    assert rc != 0
    assert ("node1: vllm_gateway_routing.tiny-chat: 'prefx' is not a routing mode — use one of least_conn, session, prefix"
            in out), out[-3000:]
    rc, out = run_playbook(VALIDATE_PLAY, "-e", '{"vllm_gateway_routing": {"tiny-chat": "prefix"}}', tmp_path=tmp_path,
                           inventory=inventory)
    assert rc == 0, out[-3000:]
