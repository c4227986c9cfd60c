"""Print each staging node's endpoint and a sample curl (make staging's last step)."""

import sys
from pathlib import Path

import yaml

inv = Path(sys.argv[1] if len(sys.argv) > 1 else "inventory/staging")
hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]["gpu-nodes"]["hosts"]
group = yaml.safe_load((inv / "group_vars/gpu-nodes/vllm.yml").read_text())
served = next(iter(group["vllm_models"].values())).get("served_name")
key = yaml.safe_load((inv / "group_vars/gpu-nodes/vault.yml").read_text())["vault_vllm_api_key"]
print("\nStaging is serving:")
for name, hv in hosts.items():
    print(f"  {name}: http://127.0.0.1:{hv['staging_published_port']}/v1  (model {served})")
children = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]
for name in (children.get("vllm_monitoring") or {}).get("hosts") or {}:
    print(f"  Prometheus (alerts, targets): http://127.0.0.1:{hosts[name]['staging_prometheus_published_port']}/alerts  ({name})")
first = next(iter(hosts.values()))["staging_published_port"]
print(f"""
Try it:
  curl -s http://127.0.0.1:{first}/v1/completions -H 'Authorization: Bearer {key}' \\
       -H 'Content-Type: application/json' -d '{{"model": "{served}", "prompt": "Hello", "max_tokens": 8}}'
(the API key is staging's throwaway value from inventory/staging/group_vars/gpu-nodes/vault.yml)
Remove it all with: make staging-down
""")
