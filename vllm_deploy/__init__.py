"""vllm-deploy: the logic behind the Ansible roles (planner, nvidia-smi parsing, log diagnosis, presets).

Pure Python, standard library plus PyYAML, so it runs on the controller and in tests without torch.
"""

__version__ = "0.1.0"
