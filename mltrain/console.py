"""The tools' console entry points (`mltrain-compare`, `mltrain-prepare`, `mltrain-sample`, `mltrain-export`,
`mltrain-study`).

Each imports its tool only when called, and this module imports nothing of mltrain at all, so a tool
pays only for what it uses: `mltrain-compare` starts without torch or wandb. Training's own entry point
(`mltrain`, with Hydra and the run guard) is mltrain/cli.py.
"""

from __future__ import annotations

import sys


def compare_main(argv: list[str] | None = None) -> None:
    from mltrain.tools.compare import main

    try:
        code = main(argv)
    except OSError as err:  # --out on a read-only path, a full disk: one line, not a traceback
        where = f"{err.filename}: " if err.filename else ""
        print(f"mltrain-compare: error: cannot write {where}{err.strerror or err}", file=sys.stderr)
        code = 2
    sys.exit(code)


def prepare_main() -> None:
    from mltrain.data.prepare import hydra_main

    hydra_main()


def sample_main(argv: list[str] | None = None) -> None:
    from mltrain.tools.sample import main

    sys.exit(main(argv))


def export_main(argv: list[str] | None = None) -> None:
    from mltrain.tools.export import main

    sys.exit(main(argv))


def study_main(argv: list[str] | None = None) -> None:
    from mltrain.tools.study.cli import main

    sys.exit(main(argv))
