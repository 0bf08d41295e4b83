"""W&B as a mirror of a run's files: the same rows and summary, never a reason for training to stop.

One W&B run per run dir, `dir=run_dir` (offline files land in `run_dir/wandb/offline-run-*`, upload later
with `wandb sync run_dir/wandb/offline-run-*`). Rows go as they are, every key of theirs; FLOPs is the
default x-axis of every `train/*`, `val/*` and `diag/*` key (a row metric named `train/<name>` is
plotted against FLOPs with no change here); `step` and `tokens` are logged too. `online` without an API key, without a server that answers
(one HTTP request that must be answered within PROBE_TIMEOUT_S, through the HTTPS proxy when one is
set: a server that accepts connections but never answers counts as none), or with an online init that
fails (bounded by `init_timeout`), falls back to offline with one warning naming `wandb sync`; if offline
fails too, training goes on with metrics.jsonl only. The waits on the server, start and finish together,
stay within ONLINE_WAIT_S: a finish that does not end in what is left of it is left behind with one
warning (the run's files are complete; `wandb sync` uploads them). Any W&B error later (log, summary,
finish) is one warning and W&B is off for the rest of the run. The W&B run id is kept in `run_dir/wandb/run_id`; a resumed run
continues that run (`resume="allow"`), and each row goes to W&B with its row number as the step, so the
rows W&B already has from before the interruption are not sent twice. wandb is imported only here, and
only when `logger.name=wandb`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from mltrain.core.errors import first_line
from mltrain.core import atomic
from mltrain.runs.logger import LoggerConfig
from mltrain.runs.names import shorten
from mltrain.runs.provenance import redacted_argv

log = logging.getLogger("mltrain.runs.tracking")

# W&B field limits: longer values are shortened with a hash suffix (the full label stays in the config
# and in summary.json).
_WANDB_MAX = {"name": 128, "group": 128, "job_type": 64, "tag": 64}
# All the waiting on the W&B server one run does, start (probe, init) and finish together, in seconds.
ONLINE_WAIT_S = 12.0
# Seconds wandb.init may take to reach the server before we fall back to offline (at most what the probe
# left of ONLINE_WAIT_S, less FINISH_MIN_S). The WANDB_INIT_TIMEOUT environment variable, when set, wins
# (wandb reads it itself).
INIT_TIMEOUT_S = 7.0
# Before that, one HTTP request to the W&B server (or through the HTTPS proxy that leads there) must be
# answered within this many seconds, name lookup included: without a network, or with a server that
# never answers, the run goes offline at once, not after wandb's own retries.
PROBE_TIMEOUT_S = 3.0
# The least a finish is given, whatever the start took: the last rows and the summary go to wandb-core.
FINISH_MIN_S = 2.0


def setting(logger_cfg: Optional[LoggerConfig], key: str, default: Any = None) -> Any:
    """A field of the logger section; `default` when there is no section or the field is None."""
    value = getattr(logger_cfg, key, None) if logger_cfg is not None else None
    return default if value is None else value


class WandbMirror:
    """The W&B run of one run dir. `run` is the wandb Run (None once W&B is off), `mode` online|offline."""

    def __init__(self, run_dir: Path, resuming: bool):
        self.run_dir, self.resuming = Path(run_dir), resuming
        self.run: Any = None
        self.mode: Optional[str] = None
        self.skip_below = 0  # rows W&B already holds from before a resume
        self.waited = 0.0  # seconds spent waiting on the server at start (of ONLINE_WAIT_S)

    @classmethod
    def start(cls, run_dir: Path, logger_cfg: LoggerConfig, config: dict, *, name: str, group: str, job_type: str,
              resuming: bool) -> "WandbMirror":
        """A mirror whose W&B run is started (online, else offline), or off (`run` None) when W&B is
        disabled or cannot start: one warning then, never an exception."""
        mirror = cls(run_dir, resuming)
        mode = setting(logger_cfg, "mode", "online")
        if mode == "disabled":
            log.info("logger.mode=disabled: W&B off, metrics.jsonl only")
            return mirror
        try:
            import wandb
        except Exception as err:  # noqa: BLE001 - a broken install must not stop training
            log.warning("cannot import wandb (%s: %s); metrics.jsonl only", type(err).__name__, first_line(err))
            return mirror
        kwargs = mirror._init_arguments(logger_cfg, config, name, group, job_type)
        if mode == "online" and mirror._start_online(wandb, kwargs):
            return mirror
        try:
            mirror._init(wandb, kwargs, "offline")
        except Exception as err:  # noqa: BLE001
            log.warning("W&B offline init failed (%s: %s); continuing with metrics.jsonl only",
                        type(err).__name__, first_line(err))
        return mirror

    def _init_arguments(self, logger_cfg: LoggerConfig, config: dict, name: str, group: str, job_type: str) -> dict:
        kwargs: dict[str, Any] = {}
        id_file = self.run_dir / "wandb" / "run_id"
        if self.resuming and id_file.exists():  # the same run again after an interruption, not a second one
            kwargs.update(id=id_file.read_text().strip(), resume="allow")
        tags = [shorten(str(t), _WANDB_MAX["tag"]) for t in (setting(logger_cfg, "tags", []) or [])]
        return {
            **kwargs,
            "project": setting(logger_cfg, "project", "mltrain"),
            "entity": setting(logger_cfg, "entity", None),
            "name": shorten(name, _WANDB_MAX["name"]),
            "group": shorten(group, _WANDB_MAX["group"]),
            "job_type": shorten(job_type, _WANDB_MAX["job_type"]),
            "tags": tags,
            "config": config,
            "dir": str(self.run_dir),
        }

    def _start_online(self, wandb: Any, kwargs: dict) -> bool:
        """Start online; False (with one warning: offline follows) without a key or when init fails."""
        began = time.monotonic()
        # The server first: logging in already asks it who the key belongs to, and waits on a silent one.
        reason = _server_problem(wandb) or _api_key_problem(wandb)
        if reason is None:
            try:
                self._init(wandb, kwargs, "online", ONLINE_WAIT_S - FINISH_MIN_S - (time.monotonic() - began))
                return True
            except Exception as err:  # noqa: BLE001
                reason = f"W&B online init failed ({type(err).__name__}: {first_line(err)})"
            finally:
                self.waited = time.monotonic() - began
        sync_hint = f"upload later with `wandb sync {self.run_dir / 'wandb'}/offline-run-*`"
        log.warning("%s; logging W&B offline to %s, %s", reason, self.run_dir / "wandb", sync_hint)
        return False

    def _init(self, wandb: Any, kwargs: dict, mode: str, left_s: float = INIT_TIMEOUT_S) -> None:
        settings = {}
        if mode == "online" and "WANDB_INIT_TIMEOUT" not in os.environ:
            settings["init_timeout"] = max(1.0, min(INIT_TIMEOUT_S, left_s))
        with redacted_argv():  # W&B records the command line: without secret values
            run = wandb.init(mode=mode, settings=wandb.Settings(**settings), **kwargs)
        try:
            if self.resuming:
                self.skip_below = int(getattr(run, "step", 0) or 0)
            atomic.write_bytes(self.run_dir / "wandb" / "run_id", run.id.encode())
            run.define_metric("flops")
            run.define_metric("tokens")
            run.define_metric("step")
            for key in ("train/*", "val/*", "diag/*"):
                run.define_metric(key, step_metric="flops")
        except Exception:
            run.finish(exit_code=1)
            raise
        self.run, self.mode = run, mode

    # -- mirroring ---------------------------------------------------------------------------------
    def log(self, row: Mapping[str, Any], index: int) -> None:
        """Row number `index` of metrics.jsonl (rows W&B holds from before a resume are not sent again)."""
        if self.run is None or index < self.skip_below:
            return
        try:
            # step = the row's number (coarse rows share a fine step; the x-axis is flops), so a
            # resumed run's rows land where the interrupted run's were.
            self.run.log({k: v for k, v in row.items() if v is not None}, step=index)
        except Exception as err:  # noqa: BLE001 - logging never kills training
            self._failed("log", err)

    def summary(self, summary: Mapping[str, Any]) -> None:
        if self.run is None:
            return
        try:
            self.run.summary.update({k: v for k, v in summary.items() if v is not None})
        except Exception as err:  # noqa: BLE001
            self._failed("summary", err)

    def finish(self, exit_code: int) -> None:
        """Finish the W&B run, waiting at most what the start left of ONLINE_WAIT_S (FINISH_MIN_S at least);
        a finish still going then is left to end with the process, with one warning."""
        if self.run is None:
            return
        run, self.run = self.run, None
        limit = max(FINISH_MIN_S, ONLINE_WAIT_S - self.waited) if self.mode == "online" else None
        failed: list[BaseException] = []

        def finish() -> None:
            try:
                run.finish(exit_code=exit_code)
            except Exception as err:  # noqa: BLE001
                failed.append(err)

        if limit is None:  # offline: only local files, nothing to wait on
            finish()
        else:
            worker = threading.Thread(target=finish, name="wandb-finish", daemon=True)
            worker.start()
            worker.join(limit)
            if worker.is_alive():
                log.warning("W&B online finish did not end within %.3g s (the server does not answer); metrics.jsonl "
                            "and %s are complete: upload later with `wandb sync %s`", limit,
                            self.run_dir / "wandb", _run_files(run, self.run_dir))
                return
        if failed:
            self._failed("finish", failed[0])

    def _failed(self, what: str, err: BaseException) -> None:
        log.warning("W&B %s failed (%s: %s); W&B is off for the rest of this run, metrics.jsonl goes on",
                    what, type(err).__name__, first_line(err))
        run, self.run, self.mode = self.run, None, None
        if run is not None and what != "finish":
            try:
                run.finish(exit_code=1)
            except Exception:  # noqa: BLE001
                pass


def _run_files(run: Any, run_dir: Path) -> str:
    """The folder of W&B's own files for `run` (what `wandb sync` takes), as far as it says."""
    try:
        return str(Path(run.dir).parent)
    except Exception:  # noqa: BLE001
        return f"{run_dir / 'wandb'}/run-*"


def _server_problem(wandb: Any, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the W&B server cannot be reached from here within `timeout` seconds (no network, no name
    lookup, a proxy or server that does not answer), or None when it answers an HTTP request (any
    status: an error page is an answer)."""
    import urllib.error
    import urllib.request
    from urllib.parse import urlparse

    try:
        base = os.environ.get("WANDB_BASE_URL") or str(wandb.Settings().base_url)
    except Exception:  # noqa: BLE001 - a wandb without these settings: let init decide
        return None
    url = urlparse(base)
    if not url.hostname:
        return None
    target = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(url.hostname):
        p = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            target = (p.hostname, p.port or 80)
    failure: list[str] = ["no answer in time"]

    def ask() -> None:
        try:
            urllib.request.urlopen(f"{base.rstrip('/')}/healthz", timeout=timeout).close()
            failure.clear()
        except urllib.error.HTTPError:  # the server (or the proxy) answered
            failure.clear()
        except (OSError, ValueError) as err:  # URLError, a timeout, a connection closed without an answer
            reason = getattr(err, "reason", err)
            failure[0] = getattr(reason, "strerror", None) or str(reason) or type(err).__name__

    probe = threading.Thread(target=ask, daemon=True)  # a name lookup that hangs is left behind, not waited on
    probe.start()
    probe.join(timeout)
    if probe.is_alive() or failure:
        via = f" through the proxy {target[0]}:{target[1]}" if target[0] != url.hostname else ""
        return f"cannot reach the W&B server {base}{via} within {timeout:g} s ({failure[0] if failure else 'no answer'})"
    return None


def _api_key_problem(wandb: Any) -> str | None:
    """Why W&B cannot go online with the credentials configured here (env, settings file, netrc): none
    found, or W&B refuses the one found (its words, never the key); None when there is one. Never prompts."""
    try:
        if wandb.login(prompt=False, verify=False):
            return None
    except TypeError:  # older wandb without `prompt=`: let init decide (it raises without a key)
        return None
    except Exception as err:  # noqa: BLE001
        return f"W&B rejected the API key configured here ({type(err).__name__}: {first_line(err)})"
    return "no W&B API key found (run `wandb login` or set WANDB_API_KEY)"
