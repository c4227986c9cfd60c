"""What every filter file of vllm_deploy.fleet shares (private: not an API of the collection).

The filters are thin adapters over the vllm_deploy package: a plain function, AnsibleFilterError on bad
input, registered by the decorator of its file's FilterRegistry (no hand-kept list to forget)."""

from __future__ import annotations

import functools
import sys

from ansible.errors import AnsibleError, AnsibleFilterError

# The logic lives in the vllm_deploy package, pip-installed beside Ansible: the collection ships it
# (pyproject.toml at its root), so `pip install` of the installed collection's directory provides it.
try:
    import vllm_deploy  # noqa: F401
except ImportError as exc:
    raise AnsibleError(
        f"the vllm_deploy.fleet filters need the Python package vllm_deploy, which Ansible's Python ({sys.executable}) "
        "cannot import — pip install the installed collection's directory "
        "(pip install ~/.ansible/collections/ansible_collections/vllm_deploy/fleet), or `pip install -e .` in a checkout"
    ) from exc

from vllm_deploy._validation import _plain as plain  # noqa: E402 - Ansible's lazy values as plain data

__all__ = ["FilterRegistry", "expect", "plain"]


class FilterRegistry:
    """One per filter file: `@_filter` above a function registers it under its own name, and the file's
    FilterModule.filters returns `_filter.filters()`."""

    def __init__(self):
        self._filters = {}

    def __call__(self, fn):
        """Registers `fn`. Any error it meets becomes one AnsibleFilterError that names the filter: Ansible
        would otherwise report a bare TypeError/KeyError from deep in the package, with no hint which filter."""
        name = fn.__name__

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except AnsibleFilterError as exc:
                if str(exc).startswith(f"{name}: "):
                    raise
                raise AnsibleFilterError(f"{name}: {exc}", orig_exc=exc) from exc
            except Exception as exc:  # noqa: BLE001 - every package error, reported under the filter's name
                detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__
                raise AnsibleFilterError(f"{name}: {detail}", orig_exc=exc) from exc

        if name in self._filters:
            raise AnsibleError(f"filter {name} is registered twice")
        self._filters[name] = wrapper
        return wrapper

    def filters(self):
        return dict(self._filters)


def expect(value, types, what):
    """TypeError unless value is one of types (None allowed): for filters whose package function
    would otherwise accept anything and answer nonsense (str() of a dict, an 'unknown' diagnosis)."""
    if value is not None and not isinstance(value, types):
        raise TypeError(f"{what} must be {' or '.join(t.__name__ for t in types)}, got {type(value).__name__}")
