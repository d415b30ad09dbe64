"""The P/D example is a real vLLM NixlConnector pair whose containers source fabric.env."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gangs" / "vllm-disaggregated.yaml"


def test_prefill_and_decode_run_vllm_with_the_nixl_connector_under_bash() -> None:
    groups = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(EXAMPLE.read_text())}
    assert set(groups) == {"vllm-prefill", "vllm-decode"}
    for group in groups.values():
        template = group["spec"]["leaderWorkerTemplate"]
        leader = template["leaderTemplate"]["spec"]["containers"][0]
        assert leader["command"] == ["bash", "-c"]  # bash sources BASH_ENV: the pod's fabric.env
        script = leader["args"][0]
        serve = shlex.split(script[script.index("vllm serve") :])
        config = json.loads(serve[serve.index("--kv-transfer-config") + 1])
        assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        assert "UCX_NET_DEVICES" not in script  # fabric.env sets it from the pod's rails
        worker = template["workerTemplate"]["spec"]["containers"][0]
        assert worker["command"] == ["bash", "-c"]
        assert re.search(r"--tensor-parallel-size 16\b", script)
