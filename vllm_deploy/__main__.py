import sys

from vllm_deploy.cli import main

sys.exit(main())
