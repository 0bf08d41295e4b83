"""An error's first line is cut out one way (errors.first_line): what every one-line report quotes."""

from __future__ import annotations

from mltrain.core.errors import first_line


def test_an_errors_first_line_is_cut_out_one_way():
    assert first_line(ValueError("  one\ntwo  ")) == "one"
    wrapper = RuntimeError("")
    wrapper.__cause__ = OSError("the cause\nmore")
    assert first_line(wrapper) == "the cause"
    assert first_line(ValueError()) == ""
