"""Plugins (mltrain/method/plugins.py): modules of the user's own named on the command line or in
MLTRAIN_PLUGINS, imported before the schema is built; a method's own `Config` becomes the section named
after it (mltrain/config.py schema()) with no edit of config.py; what is refused, in one line."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest
from helpers import compose_config, typed

from mltrain import config as config_module
from mltrain.config import register_configs, schema, validate
from mltrain.core.errors import ConfigError
from mltrain.method import plugins, registry

PLUGIN = textwrap.dedent('''
    from dataclasses import dataclass

    from mltrain.method.plan import TrainPhase
    from mltrain.method.registry import DepthMethod, register_method


    @dataclass
    class PluggedConfig:
        k: int = 1


    @register_method
    class Plugged(DepthMethod):
        name = "plugged"
        Config = PluggedConfig

        def plan(self, total_steps):
            return [TrainPhase(steps=total_steps)]
''')


@pytest.fixture
def plugin_folder(tmp_path, monkeypatch):
    """A folder holding the module `plugged_mod` (a method with a section of its own) as the current folder;
    afterwards the method, the module and the record of its import are gone again."""
    (tmp_path / "plugged_mod.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(plugins.PLUGINS_ENV, "")  # restored (or removed) afterwards, whatever load() sets
    loaded = list(plugins._LOADED)
    yield tmp_path
    registry._METHODS.pop("plugged", None)
    sys.modules.pop("plugged_mod", None)
    plugins._LOADED[:] = loaded
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))
    register_configs()


def test_the_overrides_name_the_plugins_in_every_form_hydra_takes():
    found = plugins.from_overrides(["plugins=[a,b.c]", "seed=1", "+plugins=[d]", "plugins=[e],[f,g]",
                                    "plugins_x=[h]", "plugins=[unclosed"])
    assert found == ["a", "b.c", "d", "e", "f", "g"]  # a malformed one is left to Hydra's own line


def test_a_plugins_method_brings_its_section_and_runs_its_keys(plugin_folder):
    assert "plugged" not in [f.name for f in config_module.dataclasses.fields(schema())]
    assert plugins.load(plugins.from_overrides(["plugins=[plugged_mod]"])) == ["plugged_mod"]
    assert plugins.load(["plugged_mod"]) == []  # once
    assert os.environ[plugins.PLUGINS_ENV].split(",")[-1] == "plugged_mod"  # the processes started from here
    register_configs()
    cfg = typed(compose_config("plugins=[plugged_mod]", "depth_method=plugged", "plugged.k=3"))
    validate(cfg)
    assert cfg.plugged.k == 3 and str(cfg.depth_method) == "plugged" and cfg.plugins == ["plugged_mod"]
    assert registry.method_class("plugged").sections == ("plugged",)  # its section: its runs' labels keep it


def test_a_name_that_is_no_module_is_one_line(plugin_folder):
    with pytest.raises(ConfigError, match=r"^plugins: 'a-b' is not a module name"):
        plugins.load(["a-b"])
    with pytest.raises(ConfigError, match=r"^plugins: no module named 'nowhere_mod' in the current folder"):
        plugins.load(["nowhere_mod"])
    (plugin_folder / "broken_mod.py").write_text("import not_installed_anywhere\n")
    with pytest.raises(ModuleNotFoundError, match="not_installed_anywhere"):  # the plugin's own bug: its traceback
        plugins.load(["broken_mod"])
    sys.modules.pop("broken_mod", None)


def test_a_plugin_named_in_a_config_file_alone_comes_too_late_and_is_refused():
    cfg = typed(compose_config("plugins=[never_imported_mod]"))
    with pytest.raises(ConfigError, match="never_imported_mod was not imported: plugins are imported before"):
        validate(cfg)


def test_a_method_section_cannot_take_a_common_sections_name():
    from dataclasses import dataclass

    @dataclass
    class Shadow:
        x: int = 0

    class Train(registry.DepthMethod):
        name = "train"
        Config = Shadow

    registry.register_method(Train)
    try:
        with pytest.raises(TypeError, match="train is a common section of the config"):
            schema()
    finally:
        del registry._METHODS["train"]
        register_configs()


def test_a_pickled_depth_method_of_a_plugin_loads_where_only_the_environment_names_it(plugin_folder):
    """As a sweep's worker process (hydra/launcher=local) gets its job's config: unpickled before anything
    imported the plugin, which MLTRAIN_PLUGINS names."""
    plugins.load(["plugged_mod"])
    register_configs()
    value = typed(compose_config("plugins=[plugged_mod]", "depth_method=plugged")).depth_method
    data = pickle.dumps(value).hex()
    code = "import pickle, sys; print(pickle.loads(bytes.fromhex(sys.argv[1])).value)"
    env = {**os.environ, plugins.PLUGINS_ENV: "plugged_mod"}
    proc = subprocess.run([sys.executable, "-c", code, data], cwd=plugin_folder, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "plugged", proc.stderr[-2000:]


HALVES = textwrap.dedent('''
    from mltrain.method.coarsening import Scheme, register_scheme


    @register_scheme
    class Halves(Scheme):
        name = "halves_cli"
        uniform_steps = False

        def partition(self, n_parent, seed):
            size = n_parent // self.k
            return [[(i,) for i in range(r * size, (r + 1) * size)] for r in range(self.k)]
''')


def test_a_plugins_coarsening_scheme_runs_from_the_command_line(tmp_path):
    from helpers import cli, read_rows

    (tmp_path / "halves_mod.py").write_text(HALVES)
    proc = cli(["plugins=[halves_mod]", "coarsening=evenodd", "coarsening.scheme=halves_cli", "scale=smoke",
                "model.n_layer=4", "train.progress=false", "device=cpu", "hydra.run.dir=run"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    coarse = [r for r in read_rows(tmp_path / "run") if r.get("phase") == "coarse"]
    assert {r["coarse_model"] for r in coarse} == {0, 1} and {r["blocks"] for r in coarse} == {2.0}
    refused = cli(["coarsening=evenodd", "coarsening.scheme=halves_cli", "scale=smoke", "hydra.run.dir=no"], cwd=tmp_path)
    assert refused.returncode == 2 and "halves_cli" in refused.stderr and not (tmp_path / "no").exists()


AXIS = textwrap.dedent('''
    from mltrain.tools.study.axes import ladder_axis


    @ladder_axis(name="steps_cli", keys=("model",), words="training steps", symbol="steps", title="steps",
                 unit="steps")
    def steps(size):
        return float(size.max_steps)
''')


def test_a_plugins_study_axis_is_one_mltrain_study_takes(plugin_folder):
    from mltrain.tools.study import schema as study_schema
    from mltrain.tools.study.axes import AXES
    from mltrain.tools.study.cli import compose_study

    (plugin_folder / "axis_mod.py").write_text(AXIS)
    with pytest.raises(ConfigError, match="steps_cli"):
        study_schema.check(compose_study(["study=smoke", "ladder_axis=steps_cli"]))
    try:
        study = compose_study(["plugins=[axis_mod]", "study=smoke", "ladder_axis=steps_cli"])
        study_schema.check(study)
        assert study.plugins == ["axis_mod"] and "steps_cli" in AXES
    finally:
        AXES.pop("steps_cli", None)
        sys.modules.pop("axis_mod", None)
