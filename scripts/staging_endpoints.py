"""Print the staging gateway's URL and key, each node's endpoint, and a sample curl (make staging's last step)."""

import sys
from pathlib import Path

import yaml

inv = Path(sys.argv[1] if len(sys.argv) > 1 else "inventory/staging")
children = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]
hosts = children["gpu-nodes"]["hosts"]
group = yaml.safe_load((inv / "group_vars/gpu-nodes/vllm.yml").read_text())
served = next(iter(group["vllm_models"].values())).get("served_name")
engine_key = yaml.safe_load((inv / "group_vars/gpu-nodes/vault.yml").read_text())["vault_vllm_api_key"]
gateway_key = yaml.safe_load((inv / "group_vars/vllm_gateway/vault.yml").read_text())["vault_gateway_key_staging"]
gateway_port = hosts[next(iter(children["vllm_gateway"]["hosts"]))]["staging_gateway_published_port"]
# With vllm_gateway_tls: https, trusting the role's CA in its default directory beside the inventory.
gateway_vars = yaml.safe_load((inv / "group_vars/vllm_gateway/gateway.yml").read_text()) or {}
ca = inv / ".vllm-gateway-ca" / "ca.crt"
scheme, ca_note, cacert = ("https", f", CA {ca}", f" --cacert {ca}") if gateway_vars.get("vllm_gateway_tls") else ("http", "", "")
print(f"""
Staging serves the fleet through one URL:
  gateway: {scheme}://127.0.0.1:{gateway_port}/v1  (model {served}, key {gateway_key}{ca_note})
Each engine straight (its own key, for debugging):""")
for name, hv in hosts.items():
    print(f"  {name}: http://127.0.0.1:{hv['staging_published_port']}/v1  (key {engine_key})")
for name in (children.get("vllm_monitoring") or {}).get("hosts") or {}:
    print(f"  Prometheus (alerts, targets): http://127.0.0.1:{hosts[name]['staging_prometheus_published_port']}/alerts  ({name})")
sdk = (f"""OpenAI SDK (Python): SSL_CERT_FILE={ca} and OpenAI(base_url="{scheme}://127.0.0.1:{gateway_port}/v1", api_key=...)
""" if cacert else "")
print(f"""
Try it:
  curl -s{cacert} {scheme}://127.0.0.1:{gateway_port}/v1/completions -H 'Authorization: Bearer {gateway_key}' \\
       -H 'Content-Type: application/json' -d '{{"model": "{served}", "prompt": "Hello", "max_tokens": 8}}'
{sdk}(throwaway staging keys from inventory/staging/group_vars/*/vault.yml)
Remove it all with: make staging-down
""")
