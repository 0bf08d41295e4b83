"""Secrets stay out of every record: which keys look secret, redaction in commands, config trees and
Hydra's YAML files, and a whole run's files."""

from __future__ import annotations


import pytest
import torch
from omegaconf import OmegaConf
from helpers import SMOKE, file_tree, run_tool_here

from mltrain.runs import provenance


@pytest.mark.parametrize("key,secret", [
    ("hydra.job.env_set.WANDB_API_KEY", True), ("HF_TOKEN", True), ("MY_DB_PASSWORD", True), ("api_key", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("GITHUB_TOKEN2", True), ("data.tokenizer", False), ("prepare.max_tokens", False),
    ("train.keep_checkpoints", False), ("KEYBOARD", False), ("logger.entity", False),
    # names used in the wild: a personal access token, *_KEY, *_PASS, camelCase, a DSN, a lone word
    ("hydra.job.env_set.GITHUB_PAT", True), ("GH_PAT", True), ("DB_PASS", True), ("MYSQL_PWD", True),
    ("githubToken", True), ("apiKey", True), ("SENTRY_DSN", True), ("AUTH", True), ("CREDENTIALS", True),
    ("SLACK_WEBHOOK_URL", True), ("OPENAI_API_KEY", True), ("x.Authorization", True), ("PRIVATE_KEY_FILE", True),
    ("PATH", False), ("PWD", False), ("OLDPWD", False), ("BYPASS_PROXY", False), ("data.path", False),
    ("tokens_per_param", False), ("hydra.job.config.override_dirname.exclude_keys", False),
])
def test_secret_looking_keys(key, secret):
    assert provenance.is_secret_key(key) is secret


TOKENS = {  # made-up values of each format (none is a real credential)
    "github": "ghp_" + "a1B2" * 9, "github_fine": "github_pat_11ABCDEFG0" + "x" * 60, "huggingface": "hf_" + "Qz" * 17,
    "openai": "sk-proj-" + "A9" * 20, "anthropic": "sk-ant-api03-" + "b" * 40, "slack": "xoxb-123456789012-abcdefABCDEF",
    "aws": "AKIAIOSFODNN7EXAMPLE", "gitlab": "glpat-" + "c" * 20, "google": "AIza" + "d" * 35,
    "npm": "npm_" + "e" * 36, "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
}


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_secret_shaped_values_are_redacted_whatever_their_key(kind):
    token = TOKENS[kind]
    for override in (f"+hydra.job.env_set.MY_SETTING={token}", f"logger.wandb.notes=see {token} here", token):
        assert provenance.secret_override(override), override
        assert token not in provenance.redact_override(override) and "<redacted>" in provenance.redact_override(override)
    tree = provenance.redact_tree({"hydra": {"job": {"env_set": {"MY_SETTING": token}}}, "task": [f"a.b={token}"]})
    assert token not in str(tree)


def test_a_urls_password_is_redacted_and_ordinary_values_are_kept():
    assert provenance.redact_override("data.path=https://me:hunter2@example.com/x.txt") == \
        "data.path=https://<redacted>@example.com/x.txt"
    for plain in ("data.path=hf_corpus.txt", "data.path=https://example.com/a/b", "optim.lr=0.3", "experiment=sk-learn",
                  "git=0123456789abcdef0123456789abcdef01234567", "data.tokenizer=gpt2", "data.path=ghp_notes.md"):
        assert provenance.redact_override(plain) == plain and not provenance.secret_override(plain), plain


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


# Fixed values: a test's id must be the same in every pytest-xdist worker (a random one fails collection).
@pytest.mark.parametrize("name,secret", [
    ("WANDB_API_KEY", "s3cr3t-2648493555c54a77b3e546b12b10baf5"),
    ("GITHUB_PAT", "s3cr3t-f3bf8db385ba436ca309948c730bce31"),  # PAT was not among the secret words
    ("MY_SETTING", "ghp_97d37d92bd3d4822a2336b965ad4e1eb0000"),  # an innocent name, a token's shape
], ids=["wandb-key", "github-pat", "token-shaped-value"])
def test_a_run_records_no_secret_anywhere(tmp_path, name, secret):
    run_dir = tmp_path / "run"
    proc = run_tool_here("mltrain", *SMOKE, f"+hydra.job.env_set.{name}={secret}", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert secret not in proc.stdout + proc.stderr
    assert [p for p, data in file_tree(run_dir).items() if secret.encode() in data] == []
    assert f"{name}=<redacted>" in (run_dir / ".hydra" / "hydra.yaml").read_text()
