#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's license). Runs on the target: standard library + AnsibleModule only.
"""Merge settings into Docker's daemon.json the way `nvidia-ctk runtime configure` does."""

from __future__ import annotations

import copy
import json
import os
import tempfile

DOCUMENTATION = r"""
---
module: docker_daemon_json
short_description: Merge settings into Docker's daemon.json without dropping the user's own keys
description:
  - Reads the existing JSON file (a missing or empty file is C({})), deep-merges O(settings) into it and writes
    the result only when the merged configuration differs from what is there.
  - Mappings merge key by key (so C(runtimes.nvidia) is added beside the user's other runtimes); any other value
    replaces the old one; a value of V(null) removes the key.
  - The same semantics as C(nvidia-ctk runtime configure --runtime=docker), which edits the file in place.
  - A file that is not a JSON object is never overwritten: the module fails and names it.
  - Supports check mode and C(--diff) (before/after text).
options:
  path:
    description: The daemon configuration file.
    type: path
    default: /etc/docker/daemon.json
  settings:
    description: Keys to merge into the file.
    type: dict
    required: true
  backup:
    description: Keep a timestamped copy of the previous file when it changes.
    type: bool
    default: false
extends_documentation_fragment: [files]
attributes:
  check_mode: {support: full}
  diff_mode: {support: full}
author: vllm-deploy
"""

EXAMPLES = r"""
- name: Register the NVIDIA runtime with Docker
  docker_daemon_json:
    settings:
      runtimes:
        nvidia: {path: nvidia-container-runtime, args: []}
    mode: "0644"
"""

RETURN = r"""
config:
  description: The configuration after the merge.
  returned: always
  type: dict
added_keys:
  description: Dotted paths of keys that the merge added or changed.
  returned: always
  type: list
  elements: str
backup_file:
  description: Where the previous file was copied (O(backup=true) and a change).
  returned: changed and backup
  type: str
"""


class DaemonJsonError(ValueError):
    """The existing file cannot be merged into."""


def load_config(text, path="daemon.json"):
    """The file's text -> dict. Empty or whitespace -> {}; anything but a JSON object -> DaemonJsonError."""
    if text is None or not text.strip():
        return {}
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise DaemonJsonError("%s is not valid JSON (%s); fix or move it, it is never overwritten" % (path, exc))
    if not isinstance(config, dict):
        raise DaemonJsonError("%s holds a JSON %s, not an object; fix or move it" % (path, type(config).__name__))
    return config


def merge_config(current, settings):
    """Deep merge: mappings key by key, other values replace, None deletes. Returns (merged, changed_paths).

    The user's keys keep their order; new keys are appended (as nvidia-ctk does).
    """
    merged = copy.deepcopy(current)
    changed = []

    def walk(dst, src, prefix):
        for key, value in src.items():
            dotted = prefix + key
            if value is None:
                if key in dst:
                    del dst[key]
                    changed.append(dotted)
            elif isinstance(value, dict) and isinstance(dst.get(key), dict):
                walk(dst[key], value, dotted + ".")
            elif key not in dst or dst[key] != value:
                dst[key] = copy.deepcopy(value)
                changed.append(dotted)

    walk(merged, settings, "")
    return merged, changed


def render_config(config):
    """The file's text: 4-space indent like nvidia-ctk and dockerd's docs, trailing newline."""
    return json.dumps(config, indent=4) + "\n"


def plan(text, settings, path="daemon.json"):
    """(changed, before_text, after_text, merged, changed_paths) for a file holding `text` (None: absent)."""
    current = load_config(text, path)
    merged, changed_paths = merge_config(current, settings)
    changed = merged != current
    before_text = text if text is not None else ""
    after_text = render_config(merged) if changed else before_text
    return changed, before_text, after_text, merged, changed_paths


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/docker/daemon.json"),
            settings=dict(type="dict", required=True),
            backup=dict(type="bool", default=False),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    path = module.params["path"]
    text = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    try:
        changed, before_text, after_text, merged, changed_paths = plan(text, module.params["settings"], path)
    except DaemonJsonError as exc:
        module.fail_json(msg=str(exc))

    result = dict(changed=changed, config=merged, added_keys=changed_paths, path=path)
    if module._diff:
        result["diff"] = dict(before=before_text, after=after_text, before_header=path, after_header=path)

    if changed and not module.check_mode:
        directory = os.path.dirname(path) or "."
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        if module.params["backup"] and text is not None:
            result["backup_file"] = module.backup_local(path)
        fd, tmp = tempfile.mkstemp(prefix=".daemon.json.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(after_text)
        module.atomic_move(tmp, path)

    file_args = module.load_file_common_arguments(module.params)
    if os.path.exists(path):
        result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"], diff=None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
