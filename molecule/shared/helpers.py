"""What the scenarios' testinfra tests share: a node by name, requests to the engine on the node, the
instance's secrets file, ansible-playbook runs against the scenario's nodes, and the converge log.

Imported as `helpers` (molecule/conftest.py puts this directory on sys.path).
"""

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import testinfra

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[2]))

# Sent to the node as a script: the nodes have python3 but no curl. Prints the status, then the body.
_HTTP_SCRIPT = (
    "import json,sys,urllib.request,urllib.error\n"
    "url,body,key=sys.argv[1],sys.argv[2],sys.argv[3]\n"
    "req=urllib.request.Request(url,data=body.encode() if body else None,"
    "headers={'Content-Type':'application/json',**({'Authorization':'Bearer '+key} if key else {})})\n"
    "try:\n r=urllib.request.urlopen(req,timeout=120); print(r.status); print(r.read().decode())\n"
    "except urllib.error.HTTPError as e:\n print(e.code); print(e.read().decode())\n"
)


def node(name):
    """A testinfra host for one of the scenario's nodes, by its inventory name (for a test that drives
    several nodes, beside the `host` fixture)."""
    return testinfra.get_host(f"ansible://{name}", ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"])


def assert_secrets_file(host, instance, *, key):
    """The instance's secrets file as the style asks: root's alone (0600), holding its API key."""
    env = host.file(f"/etc/vllm/{instance}.env")
    assert env.mode == 0o600
    assert env.user == "root"
    assert f"VLLM_API_KEY={key}" in env.content_string


def engine_http(host, path, port, body=None, *, key):
    """An HTTP request to the engine made on the node itself; `key=None` sends no API key.

    Returns (status, body text). A JSON `body` makes it a POST.
    """
    out = host.check_output(
        "python3 -c %s %s %s %s",
        _HTTP_SCRIPT, f"http://127.0.0.1:{port}{path}", json.dumps(body) if body else "", key or "",
    )
    status, _, payload = out.partition("\n")
    return int(status), payload


def completion(host, port, *, key, model="tiny-llama", prompt="Hello", max_tokens=3, **params):
    """A /v1/completions answer (parsed) that must have succeeded."""
    status, payload = engine_http(host, "/v1/completions", port,
                                  {"model": model, "prompt": prompt, "max_tokens": max_tokens, **params}, key=key)
    assert status == 200, payload
    return json.loads(payload)


def flat(text):
    """Ansible's YAML output wraps long messages: compare with whitespace runs folded to one space."""
    return " ".join(text.split())


@dataclass
class PlaybookRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self):
        """stdout and stderr with Ansible's wrapped lines joined (see `flat`)."""
        return flat(self.stdout + self.stderr)


def ansible_playbook(*args, playbook="deploy.yml", timeout=1200):
    """`ansible-playbook PLAYBOOK ARGS...` from the project root against the scenario's inventory,
    with molecule's ansible.cfg (roles, plugins, connection to the nodes), as an operator would run it.

    Its output stays out of ansible.log: that log is the converge's, which the tests search for secrets.
    """
    ephemeral = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
    inventory = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
    # PYTHONPATH: the filters import this checkout's vllm_deploy, not another install (see the Makefile).
    env = dict(os.environ, ANSIBLE_CONFIG=str(ephemeral / "ansible.cfg"), ANSIBLE_LOG_PATH="/dev/null",
               ANSIBLE_NOCOLOR="1", PYTHONPATH=os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")])))
    run = subprocess.run(["ansible-playbook", "-i", str(inventory), str(PROJECT / playbook), *args],
                         capture_output=True, text=True, env=env, timeout=timeout, cwd=PROJECT)
    return PlaybookRun(run.returncode, run.stdout, run.stderr)


def converge_log(*, joined=False):
    """The converge's (and idempotence run's) Ansible log (log_path in .config/molecule);
    `joined`: with wrapped lines joined (see `flat`)."""
    text = (Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "ansible.log").read_text()
    return flat(text) if joined else text
