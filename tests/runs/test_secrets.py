"""Secrets stay out of every record: which keys look secret, redaction in commands, config trees and
Hydra's YAML files, and a whole run's files."""

from __future__ import annotations

import uuid

import pytest
import torch
from omegaconf import OmegaConf
from helpers import SMOKE, file_tree, run_tool

from mltrain.runs import provenance


@pytest.mark.parametrize("key,secret", [
    ("hydra.job.env_set.WANDB_API_KEY", True), ("HF_TOKEN", True), ("MY_DB_PASSWORD", True), ("api_key", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("GITHUB_TOKEN2", True), ("data.tokenizer", False), ("prepare.max_tokens", False),
    ("train.keep_checkpoints", False), ("KEYBOARD", False), ("logger.entity", False),
])
def test_secret_looking_keys(key, secret):
    assert provenance.is_secret_key(key) is secret


def test_secrets_are_redacted_in_commands_trees_and_yaml_files(tmp_path):
    argv = ["mltrain", "seed=1", "+hydra.job.env_set.WANDB_API_KEY=abc123", "+hydra.job.env_set={HF_TOKEN: xyz}"]
    assert provenance.redact_argv(argv) == ["mltrain", "seed=1", "+hydra.job.env_set.WANDB_API_KEY=<redacted>",
                                            "+hydra.job.env_set=<redacted>"]
    assert "abc123" not in provenance.provenance(torch.device("cpu"), argv)["command"]
    tree = {"hydra": {"job": {"env_set": {"WANDB_API_KEY": "abc123", "OMP_NUM_THREADS": "1"}},
                      "overrides": {"hydra": ["+hydra.job.env_set.WANDB_API_KEY=abc123"], "task": ["seed=1"]}}}
    yaml = tmp_path / "hydra.yaml"
    yaml.write_text(OmegaConf.to_yaml(OmegaConf.create(tree)))
    clean = tmp_path / "overrides.yaml"
    clean.write_text("- seed=1\n")
    provenance.redact_yaml_files([yaml, clean, tmp_path / "missing.yaml"])
    assert "abc123" not in yaml.read_text() and "OMP_NUM_THREADS: '1'" in yaml.read_text()
    assert clean.read_text() == "- seed=1\n"  # nothing to redact: left byte for byte


def test_a_run_records_no_secret_anywhere(tmp_path):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    run_dir = tmp_path / "run"
    proc = run_tool("mltrain", *SMOKE, f"+hydra.job.env_set.WANDB_API_KEY={secret}", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert secret not in proc.stdout + proc.stderr
    assert [p for p, data in file_tree(run_dir).items() if secret.encode() in data] == []
    assert "WANDB_API_KEY=<redacted>" in (run_dir / ".hydra" / "hydra.yaml").read_text()
