"""`python -m vllm_deploy.cli`: the `vllm-deploy` command (the roles call it with the controller's Python)."""

import sys

from vllm_deploy.cli import main

sys.exit(main())
