"""`mltrain --help` names the tool and lists the groups a run takes, each with its options, as conf/ and the
folders of hydra.searchpath have them (not `study`, which is mltrain-study's), then the depth methods and
coarsening schemes the registries hold, a plugin's included: nothing in it is a list kept by hand."""
import re

from helpers import REPO, cli

from mltrain.method.coarsening import scheme_class, scheme_names
from mltrain.method.registry import NONE, depth_method_values, method_class

RUN_GROUPS = sorted(p.name for p in (REPO / "conf").iterdir() if p.is_dir() and p.name not in {"study", "hydra", "__pycache__"})


def _built_in() -> dict[str, list[str]]:
    """The registries as a fresh `mltrain` process holds them: the package's own entries (a test in this
    process may have registered more)."""
    ours = lambda cls: cls.__module__.startswith("mltrain.")  # noqa: E731
    return {"depth_method": [v for v in depth_method_values() if v == NONE or ours(method_class(v))],
            "coarsening.scheme": [n for n in scheme_names() if ours(scheme_class(n))]}


def _groups(out: str) -> dict[str, list[str]]:
    section = out.split("== Configuration groups ==")[1].split("== Registered ==")[0]
    return {group: options.split(", ") for group, options in re.findall(r"^(\w+): (.+)$", section, flags=re.M)}


def _registered(out: str) -> dict[str, list[str]]:
    section = out.split("== Registered ==")[1].split("== Config ==")[0]
    return {key: values.split("|") for key, values in re.findall(r"^([\w.]+)=(.+)$", section, flags=re.M)}


def test_help_names_the_tool_and_lists_exactly_the_groups_a_run_takes(tmp_path):
    proc = cli(["--help"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("mltrain: ") and "powered by Hydra" not in out
    listed = _groups(out)
    assert sorted(listed) == RUN_GROUPS and "study" not in listed
    for group, options in listed.items():
        assert options == sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml")), group
    assert _registered(out) == _built_in()
    assert "\nmodel:\n" in out and not list(tmp_path.iterdir())  # the config follows; help writes nothing


def test_help_lists_a_plugins_method_and_the_presets_of_a_folder_on_the_search_path(tmp_path):
    (tmp_path / "helped.py").write_text(
        "from mltrain.method.registry import DepthMethod, register_method\n\n\n"
        "@register_method\nclass Helped(DepthMethod):\n    name = 'helped'\n")
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "helped.yaml").write_text("# @package _global_\ndepth_method: helped\n")
    (tmp_path / "mine" / "study").mkdir()
    (tmp_path / "mine" / "study" / "not_a_run_group.yaml").write_text("name: x\n")
    proc = cli(["plugins=[helped]", "hydra.searchpath=[file://mine]", "--help"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed, registered = _groups(proc.stdout), _registered(proc.stdout)
    assert "helped" in listed["experiment"] and "multilevel" in listed["experiment"] and "study" not in listed
    assert registered["depth_method"] == [*_built_in()["depth_method"], "helped"]
