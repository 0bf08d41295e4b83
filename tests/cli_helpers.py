"""tests/test_readme.py imports its CLI helpers from here; they are tests/helpers.py's (every other test
imports helpers). This module goes when test_readme.py imports helpers too."""

from helpers import cli, kill, one_line, start, stderr_of, summary, wait_until  # noqa: F401
