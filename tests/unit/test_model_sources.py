"""`source: url` / `source: hub` models (issue 22): their keys are checked by the validation play's
vllm_deploy.instances.validate_inventory, one line each naming host, variable and fix, before any host
is touched; `present` and `generate` models read as before. (The roles do not fetch these sources yet:
vllm_deploy.weights does, tests/unit/test_weights.py.)"""

from __future__ import annotations

import pytest

from vllm_deploy import instances

INST = [{"name": "a", "model": "tiny", "gpus": [], "port": 8000}]
MV = "node1: vllm_models.tiny"
SHA = "0123456789abcdef0123456789abcdef01234567"


def check(**model):
    return instances.validate_inventory({"tiny": {"path": "/srv/models/tiny", **model}}, INST, host="node1")


@pytest.mark.parametrize("model", [
    pytest.param({}, id="present-by-default"),
    pytest.param({"source": "present"}, id="present"),
    pytest.param({"source": "generate", "generate": {"layers": 2}}, id="generate"),
    pytest.param({"source": "url", "url": "https://store.example/models/tiny"}, id="url"),
    pytest.param({"source": "url", "url": "http://10.0.0.5:8080/tiny/"}, id="url-port"),
    pytest.param({"source": "hub", "repo": "Qwen/Qwen2.5-7B-Instruct", "revision": SHA}, id="hub"),
    pytest.param({"source": "hub", "repo": "gpt2", "revision": SHA, "endpoint": "http://mirror.internal:8090",
                  "include": ["*.safetensors", "*.json"], "exclude": ["original/*"]}, id="hub-mirror-patterns"),
    pytest.param({"source": "hub", "repo": "a/b", "revision": SHA, "exclude": []}, id="hub-exclude-nothing"),
])
def test_valid_sources_pass(model):
    assert check(**model) == []


@pytest.mark.parametrize("model, line", [
    pytest.param({"source": "url"}, f"{MV}.url: is required with source: url — e.g. url: https://store.example/models/qwen7b (the prefix that serves manifest.json)", id="url-missing"),
    pytest.param({"source": "url", "url": "ftp://store/x"}, f"{MV}.url: must be an http:// or https:// URL, got 'ftp://store/x' — e.g. https://store.example/models/qwen7b", id="url-scheme"),
    pytest.param({"source": "url", "url": "https://store/x\ny"}, f"{MV}.url: must be an http:// or https:// URL, got 'https://store/x\\ny' — e.g. https://store.example/models/qwen7b", id="url-newline"),
    pytest.param({"source": "hub", "revision": SHA}, f"{MV}.repo: is required with source: hub — e.g. repo: Qwen/Qwen2.5-7B-Instruct", id="hub-repo-missing"),
    pytest.param({"source": "hub", "repo": "a/b"}, f"{MV}.revision: is required with source: hub — pin the 40-hex commit the hub resolves its branch to (HfApi().model_info(repo).sha)", id="hub-revision-missing"),
    pytest.param({"source": "hub", "repo": "a/b", "revision": "main"}, f"{MV}.revision: 'main' is not a 40-hex commit (a branch or tag moves under a deploy) — pin the commit it resolves to now: HfApi().model_info(repo, revision=NAME).sha", id="hub-branch"),
    pytest.param({"source": "hub", "repo": "a/b", "revision": SHA.upper()}, f"{MV}.revision: '{SHA.upper()}' is not a 40-hex commit (a branch or tag moves under a deploy) — pin the commit it resolves to now: HfApi().model_info(repo, revision=NAME).sha", id="hub-upper-hex"),
    pytest.param({"source": "hub", "repo": "a/b/c", "revision": SHA}, f"{MV}.repo: 'a/b/c' is not a hub repo id — e.g. repo: Qwen/Qwen2.5-7B-Instruct", id="hub-repo-shape"),
    pytest.param({"source": "hub", "repo": "a/b", "revision": SHA, "endpoint": "mirror:8090"}, f"{MV}.endpoint: must be an http:// or https:// URL, got 'mirror:8090' — e.g. https://store.example/models/qwen7b", id="hub-endpoint"),
    pytest.param({"source": "hub", "repo": "a/b", "revision": SHA, "include": "*.safetensors"}, f'{MV}.include: must be a list of file patterns, got string \'*.safetensors\' — e.g. include: ["*.safetensors", "*.json"]', id="hub-include-string"),
    pytest.param({"source": "hub", "repo": "a/b", "revision": SHA, "include": []}, f'{MV}.include: must be a list of file patterns, got list [] — e.g. include: ["*.safetensors", "*.json"]', id="hub-include-empty"),
    pytest.param({"source": "hub", "repo": "a/b", "revision": SHA, "exclude": "original/*"}, f'{MV}.exclude: must be a list of file patterns, got string \'original/*\' — e.g. exclude: ["*.safetensors", "*.json"]', id="hub-exclude-string"),
    pytest.param({"url": "https://store/x"}, f"{MV}.url: is read only with source: url — remove it, or set source: url", id="url-key-on-present"),
    pytest.param({"source": "url", "url": "https://s/x", "revision": SHA}, f"{MV}.revision: is read only with source: hub — remove it, or set source: hub", id="hub-key-on-url"),
    pytest.param({"source": "generate", "repo": "a/b"}, f"{MV}.repo: is read only with source: hub — remove it, or set source: hub", id="hub-key-on-generate"),
    pytest.param({"source": "s3"}, f"{MV}.source: unknown source 's3' — use one of present, generate, url, hub, controller", id="unknown-source"),
    pytest.param({"source": "controller"}, f"{MV}.dir: is required with source: controller — e.g. dir: /srv/export/qwen7b (the model's directory on the controller)", id="controller-without-dir"),
    pytest.param({"source": "controller", "dir": "export/qwen"}, f"{MV}.dir: must be an absolute path on the controller, got 'export/qwen' — e.g. dir: /srv/export/qwen7b (the model's directory on the controller)", id="controller-relative-dir"),
    pytest.param({"source": "url", "url": "https://s/x", "dir": "/srv/x"}, f"{MV}.dir: is read only with source: controller — remove it, or set source: controller", id="controller-key-on-url"),
])
def test_bad_sources_refused_in_one_line(model, line):
    assert check(**model) == [line]
