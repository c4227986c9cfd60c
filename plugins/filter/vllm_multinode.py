"""Filters for multi-node instances (vllm_deploy.multinode): validation, the ranks of a host, their records
and units, what a rank's loss or difference means, the rank watch.

Registered by @_filter (plugins/plugin_utils/_filters.py); an error names the filter."""

from __future__ import annotations

from ansible_collections.vllm_deploy.fleet.plugins.plugin_utils._filters import FilterRegistry, expect

_filter = FilterRegistry()


@_filter
def vllm_multinode_errors(entries, models, host, play_hosts, views, vllm_instances=None, fleet=None, mode="systemd"):
    """Every problem with the multi-node instances a host is a rank of (vllm_deploy.multinode.validate)."""
    from vllm_deploy import multinode

    expect(host, (str,), "host")
    expect(play_hosts, (list,), "play_hosts")
    expect(views, (dict,), "views")
    return multinode.validate(entries, models, host=host, play_hosts=play_hosts, views=views,
                              instances=vllm_instances, fleet=fleet, mode=mode)


@_filter
def vllm_multinode_mine(entries, host):
    """The multi-node instances `host` is a rank of (vllm_deploy.multinode.mine), in inventory order."""
    from vllm_deploy import multinode

    expect(entries, (list,), "vllm_multinode_instances")
    expect(host, (str,), "host")
    return [entry for _, entry in multinode.mine(entries, host)]


@_filter
def vllm_rank_unit(entry, host):
    """The systemd unit of `host`'s rank of a multi-node instance (vllm_deploy.multinode.rank_unit): vllm-NAME,
    a Ray worker's ray-NAME. `entry`: a vllm_multinode_instances entry or a rank record."""
    from vllm_deploy import multinode

    expect(entry, (dict,), "the multi-node instance")
    expect(host, (str,), "host")
    return multinode.rank_unit(entry, host)


@_filter
def vllm_build_ranks(entries, models, host, addresses, gpu_facts, model_facts, defaults):
    """The records of this host's ranks of multi-node instances (vllm_deploy.multinode.rank_records)."""
    from vllm_deploy import multinode

    expect(entries, (list,), "vllm_multinode_instances")
    expect(host, (str,), "host")
    expect(addresses, (dict,), "addresses")
    return multinode.rank_records(entries, models or {}, host, addresses=addresses or {}, gpu_facts=gpu_facts or {},
                                  model_facts=model_facts or {}, defaults=defaults)


@_filter
def vllm_argv_problems(record, versions, engine):
    """What the pinned vLLM's own argument list refuses in a record's rendered command line."""
    from vllm_deploy import multinode, vllm_args

    expect(record, (dict,), "record")
    expect(versions, (dict,), "versions")
    if not record.get("argv"):
        return []
    spec = vllm_args.for_pins(versions, str(engine))
    return [f"{record['name']}: {p}" for p in multinode.argv_problems(record["argv"], spec)]


@_filter
def vllm_lost_ranks(diagnosis, record, states):
    """One line naming the ranks a multi-node instance lost (vllm_deploy.multinode.lost_ranks)."""
    from vllm_deploy import multinode

    expect(diagnosis, (dict,), "diagnosis")
    expect(states, (dict,), "states")
    return multinode.lost_ranks(diagnosis or {}, record, states or {})


@_filter
def vllm_changed_for(host, hostvars, name, model_name=None):
    """`host` when its files for instance `name` changed in this run (its registered render results,
    or the model it serves was generated), else '': which ranks of a multi-node instance changed."""
    expect(host, (str,), "host")
    expect(name, (str,), "name")
    view = hostvars[host]
    for key in ("__vllm_serve_engine_files", "__vllm_serve_env", "__vllm_serve_ray_units"):
        results = (view.get(key) or {}).get("results") or []
        if any(r.get("changed") and (r.get("item") or {}).get("name") == name for r in results):
            return host
    return host if model_name and model_name in (view.get("vllm_model_changed") or []) else ""


@_filter
def vllm_multinode_diagnosis(diagnosis, record, states):
    """Rank 0's diagnosis, as lost_rank naming the rank when one is gone (vllm_deploy.multinode.diagnose_instance)."""
    from vllm_deploy import multinode

    expect(diagnosis, (dict,), "diagnosis")
    expect(record, (dict,), "record")
    return multinode.diagnose_instance(diagnosis or {}, record, states or {})


@_filter
def vllm_rank_fingerprint_problems(fingerprints, record):
    """Where the ranks of a multi-node instance differ: stack, driver, model files (one line each)."""
    from vllm_deploy import multinode

    expect(fingerprints, (dict,), "fingerprints")
    expect(record, (dict,), "record")
    return multinode.fingerprint_problems(fingerprints, record)


@_filter
def vllm_rank_watch_argv(record, helper_dir, config_dir, interval=30, probe_timeout=120, failures=3):
    """The command line of rank 0's rank watch for a multi-node instance."""
    from vllm_deploy import multinode

    expect(record, (dict,), "record")
    expect(helper_dir, (str,), "helper_dir")
    expect(config_dir, (str,), "config_dir")
    return multinode.watch_argv(record, helper_dir, config_dir, interval, probe_timeout, failures)


@_filter
def vllm_unit_show(text):
    """`systemctl show -p ...` output as a mapping of property to value."""
    from vllm_deploy import multinode

    expect(text, (str,), "the systemctl show output")
    return multinode.parse_show(text or "")


class FilterModule:
    def filters(self):
        return _filter.filters()
