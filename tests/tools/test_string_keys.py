"""The results tools read their results through typed fields: the ladder's renderer (report.py) and the
study's stages read no string key of compare's results, and the counter (string_keys.py) counts reads,
not stores, with the JSON readers (`from_json`) apart."""

from __future__ import annotations

import ast

from string_keys import TOOLS, count, string_keys


def test_the_counter_counts_reads_not_stores_and_the_json_readers_apart():
    source = ("def f(d):\n    d['stored'] = d['read'] + d.get('got', 0)\n    return d[key]\n\n"
              "class R:\n    @classmethod\n    def from_json(cls, e):\n        return cls(e['kind'], e.get('value'))\n")
    assert sorted(string_keys(source)) == ["got", "read"]
    assert sorted(string_keys(source, readers=True)) == ["kind", "value"]
    assert set(count()) >= {"compare/report.py", "study/ladder.py", "study/stages.py"}


def test_the_ladder_renderer_reads_no_string_key():
    tree = ast.parse((TOOLS / "study" / "ladder_md.py").read_text())
    ladder = [f for f in tree.body if isinstance(f, ast.FunctionDef) and "ladder" in f.name]
    assert len(ladder) >= 5  # render_ladder and its cells: else the check reads nothing
    assert {f.name: string_keys(ast.unparse(f)) for f in ladder if string_keys(ast.unparse(f))} == {}


def test_the_study_reads_no_key_of_compares_results():
    """The keys of a verdict, a rung and a trend: the study reads them as fields, never from a dict ("arms"
    is left out: selection.json, the study's own file, has it too)."""
    results = {"scales", "trends", "sentence", "missing_runs", "why_no_verdict", "multiplier", "selected",
               "selected_by_budget", "fit_error", "eval_seeds", "warnings", "headline", "bound",
               # a rung's tuning record (RungTuning)
               "pilots", "settings_run", "settings_tried", "selection_losses", "control_settings_run",
               "control_selection_losses", "mean", "frontier_budgets"}
    read = {k for name in ("study/stages.py", "study/tuning.py", "study/progress.py")
            for k in count()[name]} & results
    assert read == set()


def test_compare_builds_and_renders_its_results_through_typed_fields():
    """The modules that build the report's parts (analysis, api, dimensions, verdict, frontier) and those that
    render them (report, plot, the study's ladder) read no key of the results: only a run's summary.json and
    settings (what `loading` hands them) and matplotlib's own."""
    allowed = {"final_val_loss_se", "held_out", "tokens", "sequences",  # a run's summary.json (analysis.held_out)
               "schedule.name",  # a run's setting (dimensions.family)
               "axes.prop_cycle", "color"}  # matplotlib's colour cycle
    found = count()
    modules = ("compare/analysis.py", "compare/api.py", "compare/dimensions.py", "compare/verdict.py",
               "compare/frontier.py", "compare/report.py", "compare/plot.py", "study/ladder.py", "study/ladder_md.py")
    read = {name: set(found[name]) - allowed for name in modules}
    assert {name: keys for name, keys in read.items() if keys} == {}
    assert sum(found["compare/report.py"].values()) == 0
