"""Run by the Dockerfile's runtime stage: fail the build, not the first start on a GPU node.

    python image-check.py --torch 2.14.0 [--text-only] [--triton-launcher]

- vLLM and torch import on the runtime base, and torch is the pinned version (PyPI's CUDA torch
  reports its CUDA as a local label, 2.14.0+cu130, which a pin without a label matches);
- --text-only: the OpenAI server still imports without the multimodal-only packages;
- --triton-launcher: Triton's CUDA launcher module (backends/nvidia/driver.c) compiles here the way
  Triton compiles it at the first start (its own compiler lookup, Python.h, -O3 -shared -fPIC), so
  a missing C compiler or Python.h, or a toolchain pruned too far, shows now. Linked without libcuda
  (the driver is injected at run time); nothing of it is kept.
"""

import argparse
import os
import shutil
import sys
import tempfile


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--torch", required=True)
    p.add_argument("--text-only", action="store_true")
    p.add_argument("--triton-launcher", action="store_true")
    a = p.parse_args()

    import torch
    import vllm  # noqa: F401 - the import is the check

    # The rule of vllm_deploy.compat.torch_matches (filter vllm_torch_matches), restated: this runs
    # inside the image, where vllm_deploy is not installed.
    seen = torch.__version__ if "+" in a.torch else torch.__version__.split("+")[0]
    if seen != a.torch:
        sys.exit(f"image check: torch {torch.__version__} is installed, the pin is {a.torch}")
    print(f"image check: torch {torch.__version__} and vLLM {vllm.__version__} import")

    if a.text_only:
        import vllm.entrypoints.openai.api_server  # noqa: F401
        print("image check: the OpenAI server imports without the multimodal-only packages")

    if a.triton_launcher:
        import triton
        from triton.runtime import build

        nvidia = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia")
        with tempfile.TemporaryDirectory() as tmp:
            kwargs = dict(name="cuda_utils", src=os.path.join(nvidia, "driver.c"), srcdir=tmp, library_dirs=[],
                          include_dirs=[os.path.join(nvidia, "include")], libraries=[])
            try:
                so = build._build(**kwargs, ccflags=[])
            except TypeError:  # Triton releases before ccflags
                so = build._build(**kwargs)
            cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
            print(f"image check: Triton {triton.__version__} compiles its CUDA launcher with {cc} ({os.path.getsize(so)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
