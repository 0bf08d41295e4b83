"""train.compile=auto|true|false: auto compiles on CUDA only, the booleans keep working, anything else is
refused in one line; scale=paper compiles on CUDA."""

import pytest
import torch
from helpers import compose_config, typed

from mltrain.training.compiling import compile_setting, compiles


def test_compile_auto_is_on_for_cuda_only_and_true_false_keep_working():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not compiles("auto", cpu) and compiles("auto", cuda)
    assert compiles(True, cpu) and compiles("true", cpu) and not compiles(False, cuda)
    assert compile_setting("auto") is None
    for value in ("auto", "true", "false"):
        compose_config(f"train.compile={value}")  # composes and validates
    with pytest.raises(Exception, match="train.compile='maybe' must be auto, true or false"):
        from mltrain.config import validate

        validate(typed(compose_config("train.compile=maybe")))
    assert compose_config(tiny=False).train.compile == "auto"
    assert compose_config("scale=paper", tiny=False).train.compile == "auto"  # the paper's run compiles on CUDA
