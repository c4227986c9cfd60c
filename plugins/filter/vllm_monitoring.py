"""Filters for monitoring and the fleet's status: Prometheus targets, plan versus actual, the GPU
collector's pinned GPUs, status.yml's table.

Registered by @_filter (plugins/plugin_utils/_filters.py); an error names the filter."""

from __future__ import annotations

from ansible_collections.vllm_deploy.fleet.plugins.plugin_utils._filters import FilterRegistry, expect

_filter = FilterRegistry()


@_filter
def vllm_plan_actual(record, log, tolerance=0.05):
    """An instance record + its start's log → the planner's figures next to vLLM's (plan.json)."""
    from vllm_deploy import monitoring

    expect(record, (dict,), "the instance record")
    expect(log, (str,), "the log")
    return monitoring.plan_vs_actual(record, log or "", float(tolerance))


@_filter
def vllm_plan_textfile(report):
    """A vllm_plan_actual report → node-exporter textfile metrics (vllm_deploy_plan_*{kind=planned|actual})."""
    from vllm_deploy import monitoring

    expect(report, (dict,), "the plan report")
    return monitoring.plan_textfile(report)


@_filter
def vllm_scrape_targets(hosts, local_host):
    """[{host, address, instances}] → Prometheus static_configs of every instance (labels host, instance, model, gpus)."""
    from vllm_deploy import monitoring

    expect(hosts, (list,), "the hosts")
    expect(local_host, (str,), "the Prometheus host")
    return monitoring.scrape_targets(hosts, local_host=local_host)


@_filter
def vllm_monitoring_fleet(hosts, hostvars, local_host):
    """Host names + hostvars → [{host, address, instances}] (the input of vllm_scrape_targets)."""
    from vllm_deploy import monitoring

    expect(hosts, (list,), "the hosts")
    expect(local_host, (str,), "the Prometheus host")
    if not hasattr(hostvars, "__getitem__"):
        raise TypeError(f"hostvars must be a mapping, got {type(hostvars).__name__}")
    return monitoring.fleet_hosts(hosts, hostvars, local_host)


@_filter
def vllm_dcgm_targets(hosts, port):
    """[{host, address, dcgm, gpus}] (vllm_monitoring_fleet) → static_configs of the DCGM exporters (labels host, gpus)."""
    from vllm_deploy import monitoring

    expect(hosts, (list,), "the hosts")
    return monitoring.dcgm_targets(hosts, port)


@_filter
def vllm_pinned_gpus(records):
    """Instance records → {GPU index or UUID: [instance names]} (the GPU collector's pinned GPUs)."""
    from vllm_deploy import monitoring

    expect(records, (list,), "the instance records")
    return monitoring.pinned_gpus(records)


@_filter
def vllm_status_table(nodes):
    """[{host, instances, systemctl, plans, gpus}] → the fleet as one text table (status.yml)."""
    from vllm_deploy import monitoring

    expect(nodes, (list,), "the nodes")
    return monitoring.status_table(nodes)


class FilterModule:
    def filters(self):
        return _filter.filters()
