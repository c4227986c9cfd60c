"""vllm_deploy/_validation.py: the helpers every input check shares."""

import pytest

from vllm_deploy._validation import _closest, _describe, _is_gpu_ref, _is_int, _plain, _Problems


@pytest.mark.parametrize("value, expected", [
    (0, True),
    (8000, True),
    (-1, True),
    (True, False),   # YAML's yes/true: an int to Python, never a port or a count
    (False, False),
    (1.0, False),
    ("8000", False),
    (None, False),
])
def test_is_int_takes_integers_and_refuses_booleans(value, expected):
    assert _is_int(value) is expected


@pytest.mark.parametrize("value, expected", [
    (0, True),
    (7, True),
    (-1, False),
    (True, False),
    ("GPU-5f3c1a2b-0000-1111-2222-333344445555", True),
    ("MIG-GPU-5f3c1a2b/1/0", True),
    ("gpu0", False),
    ("GPU-", False),
])
def test_is_gpu_ref(value, expected):
    assert _is_gpu_ref(value) is expected


@pytest.mark.parametrize("name, names, expected", [
    ("tensor_paralel_size", ["tensor_parallel_size", "pipeline_parallel_size"], "tensor_parallel_size"),
    ("prot", ("name", "model", "gpus", "port"), "port"),
    ("qwen7", {"qwen7b": {}, "llama": {}}, "qwen7b"),  # a mapping's keys are its names
    ("completely_different", ["port", "bind"], None),
    ("port", [], None),
])
def test_closest_suggests_only_a_near_name(name, names, expected):
    assert _closest(name, names) == expected


@pytest.mark.parametrize("value, expected", [
    (None, "null None"),
    (True, "boolean True"),
    (3, "integer 3"),
    (0.5, "number 0.5"),
    ("x", "string 'x'"),
    ({"a": 1}, "mapping {'a': 1}"),
    ([1], "list [1]"),
    ((1,), "list (1,)"),
    ({1}, "value of another kind {1}"),
])
def test_describe_names_the_type_in_our_words(value, expected):
    assert _describe(value) == expected


class _Tagged(str):
    """Stands in for Ansible's tagged string class."""


def test_plain_turns_subclasses_into_builtins_recursively():
    value = {_Tagged("k"): [_Tagged("v"), (1, 2.5, True, None)]}
    out = _plain(value)
    assert out == {"k": ["v", [1, 2.5, True, None]]}
    key = next(iter(out))
    assert type(key) is str and type(out[key][0]) is str
    assert type(out[key][1]) is list
    assert out[key][1][2] is True


def test_problems_are_lines_in_the_order_found():
    problems = _Problems("gpu1: ")
    problems.err("vllm_instances[0].port", "must be an integer 1-65535, got 'x'", "e.g. port: 8000")
    problems.err("vllm_bind", "'nowhere' is not an IP address", "use 127.0.0.1")
    assert problems.lines == [
        "gpu1: vllm_instances[0].port: must be an integer 1-65535, got 'x' — e.g. port: 8000",
        "gpu1: vllm_bind: 'nowhere' is not an IP address — use 127.0.0.1",
    ]


def test_problems_without_a_host_have_no_prefix():
    problems = _Problems()
    assert problems.lines == []
    problems.err("vllm_models", "must be a mapping", "see the example")
    assert problems.lines == ["vllm_models: must be a mapping — see the example"]
