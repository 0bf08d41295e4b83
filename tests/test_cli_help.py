"""`mltrain --help` names the tool and lists the groups a run takes, each with its options, as conf/ has
them: the list is written by hand in conf/config.yaml (Hydra would add `study`, which is mltrain-study's)."""
import re

from helpers import REPO, cli

RUN_GROUPS = sorted(p.name for p in (REPO / "conf").iterdir() if p.is_dir() and p.name not in {"study", "hydra", "__pycache__"})


def test_help_names_the_tool_and_lists_exactly_the_groups_a_run_takes(tmp_path):
    proc = cli(["--help"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("mltrain: ") and "powered by Hydra" not in out
    groups_section = out.split("== Configuration groups ==")[1].split("== Config ==")[0]
    listed = dict(re.findall(r"^(\w+): (.+)$", groups_section, flags=re.M))
    assert sorted(listed) == RUN_GROUPS and "study" not in listed
    for group, options in listed.items():
        assert options.split(", ") == sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml")), group
    assert "\nmodel:\n" in out and not list(tmp_path.iterdir())  # the config follows; help writes nothing
