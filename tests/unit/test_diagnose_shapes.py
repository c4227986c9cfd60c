"""Every collected real failure log, in the shapes users pipe into `vllm-deploy diagnose`, gets the diagnosis
of its bare excerpt: `journalctl -u vllm-NAME` (README's command; the unit's journal, short format),
`docker compose logs` (Compose mode's container), `docker logs -t` / `kubectl logs --timestamps` (an RFC 3339
time stamp and one blank before each line), and a paste with Windows line ends.

The logs are the public threads' excerpts under tests/fixtures/vllm-failures-* (their meta files say where
each came from); what is compared is the classifier's answer on the excerpt as posted, whatever that answer
is, so a log the classifier gets wrong still has to be read the same in every shape."""

from __future__ import annotations

import pytest

from conftest import REPO
from vllm_deploy.diagnose import diagnose

FOLDERS = sorted(p for p in (REPO / "tests" / "fixtures").glob("vllm-failures-*") if p.is_dir())
LOGS = [p for folder in FOLDERS for p in sorted(folder.glob("*.log"))]


def _journal(text: str) -> str:   # journalctl's short format, as the unit's journal prints it
    return "\n".join(f"Dec 04 12:00:{i % 60:02d} gpu1 vllm-qwen[4242]: {line}" for i, line in enumerate(text.split("\n")))


def _compose(text: str) -> str:   # docker compose logs: the container's name, padded, and a bar
    return "\n".join(f"vllm-qwen-1  | {line}" for line in text.split("\n"))


def _timestamps(text: str) -> str:   # docker logs -t, kubectl logs --timestamps
    return "\n".join(f"2026-12-04T12:00:00.123456789Z {line}" for line in text.split("\n"))


def _crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


SHAPES = {"journalctl": _journal, "compose": _compose, "timestamps": _timestamps, "crlf": _crlf}


def test_every_collected_log_is_here():
    assert len(FOLDERS) >= 12 and len(LOGS) >= 500, (len(FOLDERS), len(LOGS))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_log_reads_the_same_in_every_shape_users_pipe_in(folder, shape):
    changed = []
    for path in sorted(folder.glob("*.log")):
        text = path.read_text(errors="replace")
        bare, piped = diagnose(text), diagnose(SHAPES[shape](text))
        if (piped.category, piped.phase) != (bare.category, bare.phase):
            changed.append(f"{path.name}: {bare.category}/{bare.phase} -> {piped.category}/{piped.phase}")
    assert not changed, "\n".join(changed)


def test_a_timestamp_prefix_keeps_a_tracebacks_indentation():
    # the blanks after docker's one are the line's own: the source line under a frame (the profiling run's call) stays
    # the frame's, and places the error
    log = ("Traceback (most recent call last):\n"
           '  File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 228, in _initialize_kv_caches\n'
           "    available_gpu_memory = self.model_executor.determine_available_memory()\n"
           "RuntimeError: Worker proc VllmWorker-0 died unexpectedly, shutting down executor.")
    assert diagnose(_timestamps(log)).phase == diagnose(log).phase == "profile_run"
