#!/usr/bin/env python3
"""CUDA smoke test: a tiny allocation and matmul on every visible GPU through torch.

Usage: cuda-smoke.py EXPECTED_GPUS  (0: any number >= 1). Prints one JSON line per GPU and exits
non-zero on the first failure, naming the GPU and the error.
"""
import json
import sys


def main() -> int:
    expected = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "torch.cuda.is_available() is False",
                          "torch": torch.__version__, "torch_cuda": torch.version.cuda}))
        return 1
    count = torch.cuda.device_count()
    if count < 1 or (expected and count != expected):
        print(json.dumps({"ok": False, "error": f"torch sees {count} GPU(s), expected {expected or '>= 1'}"}))
        return 1
    for index in range(count):
        try:
            with torch.cuda.device(index):
                a = torch.ones((256, 256), device="cuda", dtype=torch.float32)
                total = float((a @ a).sum().item())
                torch.cuda.synchronize()
            ok = total == 256.0 * 256 * 256
            print(json.dumps({"index": index, "name": torch.cuda.get_device_name(index), "ok": ok,
                              "torch_cuda": torch.version.cuda}))
            if not ok:
                return 1
        except Exception as exc:  # report which GPU failed, then stop
            print(json.dumps({"index": index, "ok": False, "error": f"{type(exc).__name__}: {exc}"}))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
