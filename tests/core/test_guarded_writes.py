"""Nothing any tool writes goes through a symbolic link (mltrain/core/guarded.py): the study's reports and its
folders, mltrain-compare's files, mltrain-export's folder, mltrain-prepare's logs. Each planted link is
refused in one line naming it, before anything is written, and the file it points to is left as it
was. The installed tools are run from outside the repository."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from mltrain.core.errors import StorageError
from mltrain.core import guarded
from helpers import VICTIM, fake_runs, made_once, refused, smoke_run, tool_here, tree, victim

# ---------------------------------------------------------------------------------------------
# The writer itself


def test_a_link_anywhere_below_the_root_is_refused_and_the_root_itself_is_followed(tmp_path):
    target = victim(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "file.md").symlink_to(target)
    (root / "sub").symlink_to(elsewhere)
    for path, named in ((root / "file.md", "file.md"), (root / "sub" / "x.json", "sub")):
        with pytest.raises(StorageError, match=f"{named}: it is a symbolic link"):
            guarded.write_text(path, "new", root=root)
    assert not list(elsewhere.iterdir()) and target.read_bytes() == VICTIM
    linked_root = tmp_path / "chosen"
    linked_root.symlink_to(elsewhere, target_is_directory=True)  # the folder the user named may be a link
    guarded.write_json(linked_root / "a" / "b.json", {"x": 1}, root=linked_root)
    assert (elsewhere / "a" / "b.json").read_text() == '{\n "x": 1\n}\n'


def test_a_write_that_fails_is_one_storage_error_naming_the_file_and_leaves_no_partial_file(tmp_path, monkeypatch):
    from mltrain.core import atomic

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(atomic, "write_bytes", full)
    with pytest.raises(StorageError) as e:
        guarded.write_text(tmp_path / "r" / "ladder.md", "text", root=tmp_path, kept="ladder.json was written")
    assert "ladder.md" in str(e.value) and "disk" in str(e.value) and str(e.value).endswith("ladder.json was written")
    assert not (tmp_path / "r" / "ladder.md").exists()


def test_a_figure_is_drawn_aside_and_renamed_into_place_whole(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    guarded.write_figure(fig, tmp_path / "p.png", root=tmp_path, dpi=20)
    plt.close(fig)
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.png"]  # no temporary left


# ---------------------------------------------------------------------------------------------
# The study: refused before it claims its folder or starts a run


@pytest.mark.parametrize("place", ["ladder.md", "ladder.png", "ladder.json", "study.log", "study.json",
                                   "d16/selection.json", "d16/verdict", "d16/verdict/comparison.md", "d16",
                                   "d16/tune/single/optim.lr=0.03,seed=0,train.budget=0.5"])
def test_a_study_with_a_link_where_it_writes_is_refused_in_one_line(tmp_path, place):
    target = victim(tmp_path)
    study = tmp_path / "study"
    link = study / place
    link.parent.mkdir(parents=True, exist_ok=True)
    if place.endswith((".md", ".png", ".json", ".log")):
        link.symlink_to(target)
    else:  # a folder of the study (a scale, its verdict, a run's folder) that leads outside
        link.symlink_to(target.parent, target_is_directory=True)
    before = tree(tmp_path / "outside")
    proc = tool_here("mltrain-study", "study=smoke", f"dir={study}", "~ladder.d32", cwd=tmp_path)
    refused(proc, "symbolic link")
    assert tree(tmp_path / "outside") == before
    assert not (study / ".mltrain.lock").exists()  # refused before the study claimed its folder


# ---------------------------------------------------------------------------------------------
# compare, export, prepare


@pytest.mark.parametrize("name", ["comparison.md", "comparison.json", "comparison.png"])
def test_compare_refuses_each_of_its_files_as_a_link_and_writes_none(tmp_path, name):
    runs = fake_runs(tmp_path)
    target = victim(tmp_path)
    out = tmp_path / "report"
    out.mkdir()
    (out / name).symlink_to(target)
    before = tree(tmp_path / "outside")
    proc = tool_here("mltrain-compare", str(runs), "--out", str(out), cwd=tmp_path)
    refused(proc, name)
    assert tree(tmp_path / "outside") == before
    assert [p.name for p in out.iterdir()] == [name]  # none of the three written


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    return made_once(tmp_path_factory, "smoke_run", smoke_run) / "run"  # once for the whole suite


@pytest.mark.parametrize("dangling", [False, True])
def test_export_never_writes_through_a_link_in_its_folder(finished_run, tmp_path, dangling):
    target = victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.safetensors").symlink_to(tmp_path / "outside" / "new.bin" if dangling else target)
    before = tree(tmp_path / "outside")
    proc = tool_here("mltrain-export", str(finished_run), str(out), cwd=tmp_path)
    refused(proc, "model.safetensors")
    assert tree(tmp_path / "outside") == before and not (out / "config.json").exists()


def test_prepare_refuses_a_linked_log_folder_before_hydra_writes_into_it(tmp_path):
    victim(tmp_path)
    docs = tmp_path / "docs.txt"
    docs.write_text("plain text to tokenize. " * 400)
    out = tmp_path / "shards"
    out.mkdir()
    (out / ".prepare_logs").symlink_to(tmp_path / "outside", target_is_directory=True)
    before = tree(tmp_path / "outside")
    proc = tool_here("mltrain-prepare", f"prepare.data_files={docs}", f"prepare.out_dir={out}", "prepare.tokenizer=bytes",
                     "prepare.progress=false", "prepare.workers=1", cwd=tmp_path)
    refused(proc, ".prepare_logs")
    assert tree(tmp_path / "outside") == before
    assert not any(p.suffix == ".bin" for p in out.iterdir())


def test_the_study_log_is_opened_without_following_a_link(tmp_path):
    from mltrain.tools.study.launch import output_to

    target = victim(tmp_path)
    (tmp_path / "study.log").symlink_to(target)
    with pytest.raises(StorageError, match="study.log"):
        with output_to(tmp_path / "study.log"):
            pass
    assert target.read_bytes() == VICTIM
