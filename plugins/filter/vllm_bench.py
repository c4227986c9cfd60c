"""Filters for benchmarking and tuning an instance (role vllm_bench: bench.yml, tune.yml).

Registered by @_filter (plugins/plugin_utils/_filters.py); an error names the filter."""

from __future__ import annotations

from ansible_collections.vllm_deploy.fleet.plugins.plugin_utils._filters import FilterRegistry, expect

_filter = FilterRegistry()


@_filter
def vllm_bench_argv(record, python, launcher, config_dir, settings, result_dir):
    """An instance record + the vllm_bench_* settings → the node-side argv of its benchmark sweep."""
    from vllm_deploy import bench

    expect(record, (dict,), "the instance record")
    expect(settings, (dict,), "the bench settings")
    return bench.bench_argv(record, python, launcher, config_dir, settings, result_dir)


@_filter
def vllm_bench_progress(lines):
    """The launcher's JSON lines (parsed) → one progress line."""
    from vllm_deploy import bench

    expect(lines, (list,), "the sweep lines")
    return bench.progress_line(lines)


@_filter
def vllm_tune_candidates(flags, candidates):
    """The instance's current flags + vllm_bench_tune_candidates → the tuned flags of each trial."""
    from vllm_deploy import bench

    expect(flags, (dict,), "the instance's flags")
    expect(candidates, (dict,), "vllm_bench_tune_candidates")
    return bench.candidate_flags(flags, candidates)


@_filter
def vllm_tuned_instances(vllm_instances, name, tuned):
    """vllm_instances with the tuned flags pinned on instance `name`."""
    from vllm_deploy import bench

    expect(vllm_instances, (list,), "vllm_instances")
    expect(tuned, (dict,), "the tuned flags")
    return bench.tuned_instances(vllm_instances, str(name), tuned)


class FilterModule:
    def filters(self):
        return _filter.filters()
