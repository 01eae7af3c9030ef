"""llama-server as a peer: start it on localhost with a configuration's flags, ask it for greedy
completions, read back its own timings, stop it.

What it runs is llama.cpp's server built by ``scripts/install_llamacpp.sh`` from the llama.cpp tree
that the pinned llama-cpp-python vendors (or the binary ``$HSD_PLAN_LLAMA_SERVER`` names). Every
speculative setting of that server is a start-up flag, so one server runs one configuration; its
``/completion`` answer carries ``timings`` with ``predicted_ms`` and ``predicted_n`` (decoding,
prefill apart) and, when anything was drafted, ``draft_n`` and ``draft_n_accepted``.

Failures are one line (:class:`LlamaServerError`): the binary missing, the server exiting at start
(its own reason), every port tried taken by other programs, the server dying or answering short
under a request (whether it exited, with its code, and its last line).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from hsd_runtime.models.engine import LLAMA_CPP_PYTHON
from hsd_runtime.models.packaged import cache_dir
from hsd_runtime.terms.errors import HSDError, first_line

__all__ = ["LLAMA_CPP_PYTHON", "Completion", "LlamaServer", "LlamaServerError", "llama_server_path"]

INSTALL = "bash scripts/install_llamacpp.sh"
PORT_TRIES = 3  # ports tried when another program takes the free one before the server binds it


class LlamaServerError(HSDError):
    """llama-server is missing, would not start, or failed while serving."""


def llama_server_path() -> Path:
    """The llama-server binary: ``$HSD_PLAN_LLAMA_SERVER``, else the one the install step built into
    the cache (this run's, else the default ``~/.cache/hsd-plan`` the install step uses when
    ``$HSD_PLAN_CACHE`` was not set: a program, not a model, it serves a run on an empty model
    cache too), else ``llama-server`` on ``PATH``."""
    named = os.environ.get("HSD_PLAN_LLAMA_SERVER")
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise LlamaServerError(f"HSD_PLAN_LLAMA_SERVER={named}: not an executable file")
        return path
    for root in dict.fromkeys([cache_dir(), Path.home() / ".cache" / "hsd-plan"]):
        built = root / "llama.cpp" / LLAMA_CPP_PYTHON / "bin" / "llama-server"
        if built.is_file() and os.access(built, os.X_OK):
            return built
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise LlamaServerError(f"llama-server is not installed; run: {INSTALL} (or set HSD_PLAN_LLAMA_SERVER to a llama-server binary)")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Completion:
    """One greedy completion as llama-server reports it."""

    text: str
    tokens: list[int]
    predicted_n: int  # tokens generated
    predicted_ms: float  # decoding time, prefill excluded
    prompt_ms: float  # prefill
    draft_n: int  # tokens drafted (0 when nothing was)
    draft_n_accepted: int

    @property
    def ms_per_token(self) -> float:
        return self.predicted_ms / self.predicted_n if self.predicted_n else float("nan")


class LlamaServer:
    """A llama-server process on localhost, started with ``args`` (after ``-m``) and stopped on exit.

    Args:
        model: the target GGUF file.
        args: more start-up flags, as an export's ``server_args`` gives them.
        threads: ``-t`` and ``-tb`` both (single-token and batched passes on the same threads).
        ctx: the context size (``-c``).
        timeout: seconds to wait for the model to load.
    """

    def __init__(self, model: Path | str, args: Sequence[str] = (), threads: int = 2, ctx: int = 2048, timeout: float = 120.0) -> None:
        self.binary = llama_server_path()
        self._args = [
            str(self.binary), "-m", str(model), *args,
            "--host", "127.0.0.1",
            "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-np", "1", "--no-webui",
        ]  # fmt: skip
        self._on(free_port())
        self.timeout = timeout
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - the server's output for its whole life; closed with the object
        self._proc: subprocess.Popen[bytes] | None = None

    def _on(self, port: int) -> None:
        """Listen on ``port`` (the next start)."""
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.command = [*self._args, "--port", str(port)]

    def __enter__(self) -> LlamaServer:
        """Start the server and wait until its model is loaded; where another program took the port
        meanwhile (it was free when chosen), start again on another, :data:`PORT_TRIES` ports in all."""
        tried = []
        for _ in range(PORT_TRIES):
            tried.append(self.port)
            if self._start():
                return self
            self._on(free_port())
        raise LlamaServerError(
            f"llama-server could not listen on 127.0.0.1 port {', '.join(map(str, tried))}: each was in use by another program"
        )

    def _start(self) -> bool:
        """Start the server on :attr:`port`; True once it answers there, False where it could not
        bind the port. Only its own answer counts: /health is trusted once its log says it listens
        on that port (another program on the port answers too, and this server then exits)."""
        self._log.seek(0)
        self._log.truncate()
        try:
            self._proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise LlamaServerError(f"cannot run {self.binary}: {exc.strerror or exc}; reinstall it with: {INSTALL}") from None
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                if any("bind" in line.lower() for line in self._lines()):  # "couldn't bind HTTP server socket, ..., port: N"
                    return False
                raise LlamaServerError(f"llama-server exited with code {self._proc.returncode} at start: {self.last_line()}")
            if self._listening():
                try:
                    with urllib.request.urlopen(f"{self.url}/health", timeout=5) as resp:
                        if resp.status == 200 and self._proc.poll() is None:
                            return True
                except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError):
                    pass
            time.sleep(0.2)
        self.stop()
        raise LlamaServerError(f"llama-server did not answer within {self.timeout:.0f} s: {self.last_line()}")

    def _listening(self) -> bool:
        """Whether the server's log says it listens on :attr:`port` ("listening on http://127.0.0.1:N")."""
        port = re.compile(rf"\b{self.port}\b")
        return any("listening" in line and port.search(line) for line in self._lines())

    def _lines(self) -> list[str]:
        """The server's output so far, line by line (blank lines left out)."""
        self._log.seek(0)
        return [line.strip() for line in self._log.read().decode(errors="replace").splitlines() if line.strip()]

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 10 s)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _exit_state(self) -> str:
        """Whether the server is still running, after a failed request: it may take a moment to exit."""
        if self._proc is None:
            return "it was not started"
        try:
            return f"it exited with code {self._proc.wait(timeout=2)}"
        except subprocess.TimeoutExpired:
            return "it is running but gave no answer"

    def last_line(self) -> str:
        """Why the server stopped, as it said it: its last line naming an error, else its last line."""
        lines = self._lines()
        errors = [line for line in lines if "error" in line.lower()]
        return (errors or lines or ["(it printed nothing)"])[-1]

    def complete(self, prompt: str | list[int], n_predict: int, timeout: float = 600.0) -> Completion:
        """A greedy completion of ``prompt`` (text, or token ids) of ``n_predict`` tokens at most."""
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "cache_prompt": False, "return_tokens": True}
        request = urllib.request.Request(
            f"{self.url}/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                out = json.load(resp)
        except urllib.error.HTTPError as exc:  # it answered, with an error of its own
            raise LlamaServerError(f"llama-server refused the completion (HTTP {exc.code}: {_error_message(exc)})") from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, ValueError) as exc:
            # no answer, or one cut short (a server that dies mid-answer): a lost connection, a short body, broken JSON
            raise LlamaServerError(
                f"llama-server at {self.url} failed mid-run ({self._exit_state()}; {type(exc).__name__}: {first_line(exc)}); its last line: {self.last_line()}"
            ) from None
        timings = out.get("timings", {})
        return Completion(
            text=out.get("content", ""),
            tokens=list(out.get("tokens", [])),
            predicted_n=int(timings.get("predicted_n", 0)),
            predicted_ms=float(timings.get("predicted_ms", 0.0)),
            prompt_ms=float(timings.get("prompt_ms", 0.0)),
            draft_n=int(timings.get("draft_n", 0)),
            draft_n_accepted=int(timings.get("draft_n_accepted", 0)),
        )


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The message of llama-server's error answer (``{"error": {"message": ...}}``), else its reason."""
    try:
        message = json.loads(exc.read() or b"{}").get("error", {}).get("message")
    except (ValueError, AttributeError, OSError, http.client.HTTPException):
        message = None
    return first_line(Exception(message)) if message else str(exc.reason)
