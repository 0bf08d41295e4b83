"""One GPU per parallel sweep worker, tested without a GPU: the choice is made through
CUDA_VISIBLE_DEVICES before CUDA starts, so it shows in the environment of each job."""

import fcntl
import os
import subprocess
import sys


CLAIM = """
import os, sys
from pathlib import Path
from mltrain.training.devices import claim_sweep_gpu
first = claim_sweep_gpu(Path(sys.argv[1]), job_num=int(sys.argv[2]))
again = claim_sweep_gpu(Path(sys.argv[1]), job_num=99)  # a later job of the same worker
print(first, again, os.environ["CUDA_VISIBLE_DEVICES"])
"""


def claim(lock_dir, job_num, visible):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible}
    out = subprocess.run([sys.executable, "-c", CLAIM, str(lock_dir), str(job_num)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def hold(lock_dir, gpu):
    lock_dir.mkdir(exist_ok=True)
    fd = os.open(lock_dir / f"gpu-{gpu}.lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_worker_takes_the_first_free_gpu_of_the_visible_ones_and_keeps_it(tmp_path):
    locks = tmp_path / "locks"
    assert claim(locks, 0, "4,7") == ["4", "4", "4"]  # nothing held: the first; its lock died with it
    fd = hold(locks, 4)  # another worker holds GPU 4
    try:
        assert claim(locks, 1, "4,7") == ["7", "7", "7"]
        fd7 = hold(locks, 7)
        try:  # more workers than GPUs: round-robin by job number, still one GPU per process
            assert claim(locks, 5, "4,7") == ["7", "7", "7"]
            assert claim(locks, 6, "4,7") == ["4", "4", "4"]
        finally:
            os.close(fd7)
    finally:
        os.close(fd)


def test_nothing_to_choose_with_one_gpu_or_none(tmp_path):
    assert claim(tmp_path, 0, "2") == ["None", "None", "2"]
    assert claim(tmp_path, 0, "") == ["None", "None"]
