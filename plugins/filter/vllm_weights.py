"""Filters for models fetched into the fleet cache and copied to the nodes (roles/vllm_model)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from vllm_deploy import models


def vllm_model_fetch_sources(used):
    """This host's url / hub models: [{name, source}] (the loop of `vllm-deploy weights fetch`)."""
    return models.fetch_sources(used)


def vllm_model_revisions(cache_results, fetch, vllm_models):
    """{name: revision, dir, node path, cache path, listing, size, origin} for this host's fetched models."""
    try:
        return models.revisions(cache_results, fetch, vllm_models)
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_model_revisions: the fleet cache gave no answer for {exc}") from exc


def vllm_models_resolved(vllm_models, revisions):
    """vllm_models with each fetched model's path at the revision it serves."""
    return models.resolved(vllm_models, revisions)


def vllm_fetched_model_facts(slurped, revisions):
    """The planner's model facts for fetched models (config from the cache, size from the listing)."""
    return models.fetched_facts(slurped, revisions)


def vllm_deploy_module_file(name):
    """The file of a module of the vllm_deploy package on the controller (weights.py is copied to the nodes)."""
    import importlib
    return importlib.import_module(f"vllm_deploy.{name}").__file__


class FilterModule:
    def filters(self):
        return {f.__name__: f for f in (vllm_model_fetch_sources, vllm_model_revisions, vllm_models_resolved,
                                       vllm_fetched_model_facts, vllm_deploy_module_file)}
