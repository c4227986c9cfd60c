"""Inventory switches: the boolean ones, in every form they arrive in, and variables that were renamed.

`-e vllm_plan_enforce=false` reaches Ansible as the *string* "false"; a `when:` on it without `| bool`
would be true. Every boolean switch is declared `type: bool` in its role's meta/argument_specs.yml, so
that file set is the one list of them; the validation play checks each value set on a host is a
boolean Ansible's `bool` filter reads the way a person means it, before any host is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

TRUE = frozenset({"true", "yes", "on", "1", "y", "t"})
FALSE = frozenset({"false", "no", "off", "0", "n", "f"})

# Old name -> new name, for inventories written before a variable moved to its owning role.
RENAMED = {
    "vllm_serve_mode": "vllm_mode",
    "vllm_serve_bind": "vllm_bind",
    "vllm_serve_min_model_len": "vllm_min_model_len",
    "vllm_serve_min_num_seqs": "vllm_min_num_seqs",
    "vllm_serve_cpu_kv_cache_space_gib": "vllm_cpu_kv_cache_space_gib",
    "vllm_serve_hf_hub_offline": "vllm_hf_hub_offline",
    "vllm_serve_gate_timeout": "vllm_verify_timeout_base",
    "vllm_image_uid": "vllm_container_uid",
    "vllm_image_gid": "vllm_container_gid",
}


def bool_switch_names(roles_dir: str | Path) -> list[str]:
    """Every option declared `type: bool` in roles_dir/*/meta/argument_specs.yml."""
    names = set()
    for path in sorted(Path(roles_dir).glob("*/meta/argument_specs.yml")):
        specs = (yaml.safe_load(path.read_text()) or {}).get("argument_specs") or {}
        for entry in specs.values():
            for name, option in ((entry or {}).get("options") or {}).items():
                if (option or {}).get("type") == "bool":
                    names.add(name)
    return sorted(names)


def as_bool(value: Any) -> bool | None:
    """The boolean a value means, or None when it means neither (a typo such as 'fasle')."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE:
            return True
        if word in FALSE:
            return False
    return None


def switch_errors(values: dict[str, Any], host: str = "") -> list[str]:
    """One line per boolean switch whose value is not a boolean (`values`: name -> value; None = unset)."""
    where = f"{host}: " if host else ""
    return [
        f"{where}{name}: {value!r} is not a boolean — set it to true or false"
        for name, value in sorted(values.items())
        if value is not None and as_bool(value) is None
    ]


def renamed_errors(defined: list[str], host: str = "") -> list[str]:
    """One line per variable the inventory still sets under a name vllm-deploy no longer reads."""
    where = f"{host}: " if host else ""
    return [
        f"{where}{old}: this variable was renamed — set {RENAMED[old]} instead (its role owns it now)"
        for old in sorted(set(defined) & set(RENAMED))
    ]
