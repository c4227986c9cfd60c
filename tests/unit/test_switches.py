"""Boolean switches in every form an inventory or `-e` gives them, renamed variables, and the
conventions that keep them honest across the roles (every `when:` on a switch goes through `| bool`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from vllm_deploy import switches

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"


@pytest.mark.parametrize("value, meant", [
    (True, True), (False, False), ("true", True), ("false", False), ("False", False), ("yes", True),
    ("no", False), ("on", True), ("off", False), ("1", True), ("0", False), (1, True), (0, False),
    (" false ", False),
])
def test_the_forms_a_person_means_are_read_as_meant(value, meant):
    assert switches.as_bool(value) is meant


@pytest.mark.parametrize("value", ["fasle", "ture", "", "enabled", 2, -1, 0.5, [], {}])
def test_anything_else_is_refused_with_host_variable_and_fix(value):
    errors = switches.switch_errors({"vllm_plan_enforce": value}, host="node1")
    assert errors == [f"node1: vllm_plan_enforce: {value!r} is not a boolean — set it to true or false"]


def test_unset_switches_are_not_errors():
    assert switches.switch_errors({"vllm_plan_enforce": None, "vllm_serve_auto_degrade": "false"}) == []


def test_renamed_variables_name_their_new_name():
    assert switches.renamed_errors(["vllm_serve_bind", "vllm_bind"], host="n") == [
        "n: vllm_serve_bind: this variable was renamed — set vllm_bind instead (its role owns it now)"]


def test_every_switch_declared_bool_is_known():
    names = switches.bool_switch_names(ROLES)
    for expected in ("vllm_plan_enforce", "vllm_plan_enabled", "vllm_serve_auto_degrade", "vllm_preflight_enabled",
                     "nvidia_driver_install", "vllm_hf_hub_offline", "vllm_image_text_only"):
        assert expected in names


def _yaml_files():
    return sorted(p for d in ("roles", "playbooks") for p in (REPO / d).rglob("*.yml"))


def test_every_condition_on_a_boolean_switch_goes_through_the_bool_filter():
    names = switches.bool_switch_names(ROLES)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b(?!\s*(\|\s*default\([^)]*\)\s*)?\|\s*bool|\s+is\s+(not\s+)?none)")
    bad = []
    for path in _yaml_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split(" #", 1)[0]
            if re.match(r"\s*(-\s+)?(when|that|failed_when|changed_when|until):", code) or re.match(r"\s+-\s+(not\s+)?[a-z_]+\s*\|", code):
                if pattern.search(code):
                    bad.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert bad == [], "a string 'false' from -e would be true here; add | bool:\n" + "\n".join(bad)


def test_roles_claim_the_ansible_versions_the_validation_play_checks():
    checked = yaml.safe_load((ROLES / "vllm_validate" / "vars" / "main.yml").read_text())
    minimum = checked["__vllm_validate_ansible_min"]
    for meta in sorted(ROLES.glob("*/meta/main.yml")):
        claimed = yaml.safe_load(meta.read_text())["galaxy_info"]["min_ansible_version"]
        assert str(claimed) == minimum, meta
    pinned = re.search(r"^ansible==(\d+)\.", (REPO / "requirements.txt").read_text(), re.M)
    # The `ansible` 12.x bundle carries ansible-core 2.19.
    assert pinned and int(pinned.group(1)) == 12 and minimum == "2.19"
    runtime = REPO / "meta" / "runtime.yml"
    if runtime.exists():  # the collection's own claim must match too
        requires = yaml.safe_load(runtime.read_text())["requires_ansible"]
        assert f">={minimum}" in requires.replace(" ", "") and f"<{checked['__vllm_validate_ansible_below']}" in requires.replace(" ", "")
