"""data=packages: the installed packages' documentation as a corpus, on a small package tree the tests
write (the real extraction parses ~10,000 modules: minutes), and the real packages' files found."""

import json

import pytest

from mltrain.data import embedded, loader, load_tokens, packages

LONG = ("This paragraph is long enough to count as a repeat when another module copies it word for word, "
        "as generated model files often do.")


def _module(doc_lines: list[str], func_doc: str = "") -> str:
    body = '"""' + "\n".join(doc_lines) + '"""\n\n'
    if func_doc:
        body += f'def f():\n    """{func_doc}"""\n'
    return body


@pytest.fixture
def tree(tmp_path):
    """A package `fakepkg`: prose, a doctest, a code-like paragraph, a paragraph repeated in two modules,
    a tests/ folder."""
    root = tmp_path / "site" / "fakepkg"
    (root / "tests").mkdir(parents=True)
    (root / "__init__.py").write_text(_module(["The fake package, for tests.", "", LONG]))
    (root / "alpha.py").write_text(_module(
        ["Alpha computes things with care.", "", ">>> f(1)", "2", ">>> f(2)", "3", "", "{x: [a[i] * 2 + b_j] / (c-d)}"],
        "Return the answer to a question that nobody asked."))
    (root / "beta.py").write_text(_module(["Beta repeats what the package said.", "", LONG]))
    (root / "tests" / "test_alpha.py").write_text(_module(["Tests are not documentation."]))
    (root / "blank.py").write_text("x = 1\n")
    return [("fakepkg", root)]


def test_extraction_keeps_prose_and_drops_code_repeats_and_tests(tree):
    files = packages.module_files(tree)
    assert [n for n, _ in files] == ["fakepkg/__init__.py", "fakepkg/alpha.py", "fakepkg/beta.py", "fakepkg/blank.py"]
    docs = dict(packages.package_documents(files))
    assert set(docs) == {"fakepkg/__init__.py", "fakepkg/alpha.py", "fakepkg/beta.py"}  # blank.py has no text
    assert docs["fakepkg/alpha.py"] == ("Alpha computes things with care.\n\n"
                                        "Return the answer to a question that nobody asked.")
    assert LONG in docs["fakepkg/__init__.py"] and LONG not in docs["fakepkg/beta.py"]  # read once, where first
    assert docs["fakepkg/beta.py"] == "Beta repeats what the package said."


def test_same_files_same_documents_and_hash_twice(tree):
    files = packages.module_files(tree)
    a, b = packages.package_documents(files), packages.package_documents(packages.module_files(tree))
    assert a == b and packages.content_hash(a) == packages.content_hash(b)
    assert packages.fingerprint(files) == packages.fingerprint(packages.module_files(tree))
    assert packages.content_hash(a) != packages.content_hash(a[:-1])


def test_text_is_cached_and_read_back_without_parsing(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "documents", lambda: (("pydoc/x", "Python's own text."),))
    files = packages.module_files(tree)
    key = packages.fingerprint(files)
    first = packages.documents(tmp_path / "cache", files, key)
    assert [n for n, _ in first] == ["fakepkg/__init__.py", "fakepkg/alpha.py", "fakepkg/beta.py", "pydoc/x"]
    saved = json.loads((tmp_path / "cache" / "text" / f"packages-{key[:24]}.json").read_text())
    assert saved["key"] == key
    monkeypatch.setattr(packages, "package_documents", lambda files: pytest.fail("parsed again"))
    assert packages.documents(tmp_path / "cache", files, key) == first


def _fake_install(monkeypatch, tree, extra_docs=()):
    docs = (("pydoc/a", "Python topic A " * 40), ("pydoc/b", "Python topic B " * 40), *extra_docs)
    monkeypatch.setattr(embedded, "documents", lambda: docs)
    monkeypatch.setattr(packages, "package_dirs", lambda: tree)
    monkeypatch.setattr(loader, "_INSTALLED_LOADED", {})


def test_loaded_corpus_splits_by_document_and_records_its_hash(tree, tmp_path, monkeypatch):
    _fake_install(monkeypatch, tree)
    cfg = {"source": "packages", "tokenizer": "bytes", "cache_dir": str(tmp_path / "cache"), "val_fraction": 0.3}
    splits = load_tokens(cfg)
    meta = json.loads(next((tmp_path / "cache" / "tokens").glob("packages-bytes-*.json")).read_text())
    docs = packages.documents(tmp_path / "cache", packages.module_files(tree), packages.fingerprint(
        packages.module_files(tree)))
    names = [n for n, _ in docs]
    assert 0 < len(meta["val_documents"]) < len(names) and set(meta["val_documents"]) < set(names)
    sizes = {n: len(t.encode()) + 2 for n, t in docs}  # bytes plus the "\n\n" separator
    assert len(splits.val[0]) == sum(sizes[n] for n in meta["val_documents"])
    assert len(splits.train[0]) == sum(sizes.values()) - len(splits.val[0])  # disjoint, nothing lost
    assert f"sha256 {packages.content_hash(docs)[:16]}" in splits.description
    assert splits.description.startswith("packages (docs of 1 installed packages and Python ")

    monkeypatch.setattr(loader, "_INSTALLED_LOADED", {})
    (tree[0][1] / "gamma.py").write_text(_module(["Gamma arrived with a new version of the package."]))
    changed = load_tokens(cfg)
    assert changed.description != splits.description  # other text, other identity
    assert len(changed.train[0]) + len(changed.val[0]) > len(splits.train[0]) + len(splits.val[0])


def test_identity_differs_from_the_embedded_corpus(tree, tmp_path, monkeypatch):
    _fake_install(monkeypatch, tree)
    base = {"tokenizer": "bytes", "cache_dir": str(tmp_path / "cache")}
    mine = load_tokens({"source": "packages", **base}).description
    theirs = load_tokens({"source": "embedded", **base}).description
    assert mine.split(",")[0] != theirs.split(",")[0]
    assert mine.startswith("packages (") and theirs.startswith("embedded (")


def test_the_installed_packages_are_found_without_importing_them():
    import sys

    before = set(sys.modules)
    found = dict(packages.package_dirs())
    assert {"torch", "numpy", "scipy", "matplotlib", "datasets"} <= found.keys()
    assert not {"scipy", "matplotlib", "sympy", "pandas"} & (set(sys.modules) - before)
    files = packages.module_files(found.items())
    assert len(files) > 2000 and all(name.endswith(".py") for name, _ in files)
    assert not any("/tests/" in name for name, _ in files)
    assert packages.fingerprint(files) == packages.fingerprint(packages.module_files(found.items()))


def test_a_real_package_gives_the_same_documents_twice():
    roots = packages.package_dirs(["click"])  # small (17 modules), installed with wandb and huggingface_hub
    if not roots:
        pytest.skip("click is not installed here")
    first = packages.package_documents(packages.module_files(roots))
    again = packages.package_documents(packages.module_files(packages.package_dirs(["click"])))
    assert len(first) >= 10 and first == again
    assert packages.content_hash(first) == packages.content_hash(again)
    assert sum(len(text) for _, text in first) > 50_000  # English prose, not a handful of one-liners


def test_a_folder_in_the_working_directory_named_like_a_source_is_not_read(tmp_path, monkeypatch):
    import sys

    name = "sympy"  # a source that this process has not imported (an imported one is found in sys.modules)
    if name in sys.modules or not packages.package_dirs([name]):
        pytest.skip(f"{name} is imported already or not installed here")
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text('"""Not the installed package."""\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")  # what `python -m` / `python -c` put first: the working directory
    found = dict(packages.package_dirs([name]))
    assert found[name].resolve() != (tmp_path / name).resolve()


def test_a_huge_expression_or_a_dangling_link_is_passed_over(tree, tmp_path):
    root = tree[0][1]
    (root / "generated.py").write_text('"""Generated."""\nx = ' + " + ".join(["1"] * 5000) + "\n")
    (root / "gone.py").symlink_to(tmp_path / "nowhere.py")
    files = packages.module_files(tree)
    assert "fakepkg/gone.py" not in dict(files)
    packages.fingerprint(files)  # no FileNotFoundError
    docs = dict(packages.package_documents(files))  # no RecursionError out of ast.parse
    assert "fakepkg/alpha.py" in docs


def test_a_cache_dir_that_cannot_hold_the_cache_is_refused_before_extraction(tree, tmp_path, monkeypatch):
    _fake_install(monkeypatch, tree)
    monkeypatch.setattr(packages, "documents", lambda *a, **k: pytest.fail("extracted before the cache was checked"))
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(loader.DataError, match="cannot create the token cache folder"):
        load_tokens({"source": "packages", "tokenizer": "bytes", "cache_dir": str(blocker)})
