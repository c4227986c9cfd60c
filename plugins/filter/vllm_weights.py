"""Filters for models fetched into the fleet cache and copied to the nodes (role vllm_model:
tasks/sources.yml, tasks/weights.yml).

Registered by @_filter (plugins/plugin_utils/_filters.py); an error names the filter."""

from __future__ import annotations

from ansible_collections.vllm_deploy.fleet.plugins.plugin_utils._filters import FilterRegistry, expect, plain

_filter = FilterRegistry()


@_filter
def vllm_model_fetch_sources(used):
    """This host's url / hub models: [{name, source}] (the loop of `vllm-deploy weights fetch`)."""
    from vllm_deploy import models

    expect(used, (list,), "the models this host serves")
    return models.fetch_sources(plain(used))


@_filter
def vllm_model_revisions(cache_results, fetch, vllm_models):
    """{name: revision, dir, node path, cache path, listing, size, origin} for this host's fetched models."""
    from vllm_deploy import models

    expect(cache_results, (list,), "the fleet cache's results")
    expect(fetch, (list,), "vllm_model_fetch")
    expect(vllm_models, (dict,), "vllm_models")
    return models.revisions(plain(cache_results), plain(fetch), plain(vllm_models))


@_filter
def vllm_models_resolved(vllm_models, revisions):
    """vllm_models with each fetched model's path at the revision it serves."""
    from vllm_deploy import models

    expect(vllm_models, (dict,), "vllm_models")
    expect(revisions, (dict,), "vllm_model_revisions")
    return models.resolved(plain(vllm_models), plain(revisions))


@_filter
def vllm_fetched_model_facts(slurped, revisions):
    """The planner's model facts for fetched models (config from the cache, size from the listing)."""
    from vllm_deploy import models

    expect(slurped, (list,), "the slurped config.json results")
    expect(revisions, (dict,), "vllm_model_revisions")
    return models.fetched_facts(plain(slurped), plain(revisions))


@_filter
def vllm_deploy_module_file(name):
    """The file of a module of the vllm_deploy package on the controller (weights.py is copied to the nodes)."""
    import importlib

    expect(name, (str,), "the module's name")
    return importlib.import_module(f"vllm_deploy.{name}").__file__


class FilterModule:
    def filters(self):
        return _filter.filters()
