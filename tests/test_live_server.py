"""lab.live.server: a start-up that loses its port to another process is retried on a fresh one."""

import sys
import textwrap

import pytest

from lab.live import server as live_server
from lab.live.server import ServerError, VllmServer

#: Stands in for `vllm serve`: the first start-up dies as vLLM does when its port was taken,
#: later ones answer /v1/models on the port they are given.
FAKE = textwrap.dedent(
    """
    import http.server, pathlib, sys
    port, marker, message = int(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    if not marker.exists():
        marker.write_text(str(port))
        print(message, flush=True)
        sys.exit(1)

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

    http.server.HTTPServer(("127.0.0.1", port), Models).serve_forever()
    """
)


class FakeServer(VllmServer):
    def __init__(self, tmp_path, message):
        super().__init__("model", tmp_path / "server.log")
        self.script, self.marker, self.message = tmp_path / "fake.py", tmp_path / "first-port", message
        self.script.write_text(FAKE)

    @property
    def cmd(self):
        return [sys.executable, str(self.script), str(self.port), str(self.marker), self.message]


def test_a_start_up_that_lost_its_port_is_retried_on_another(tmp_path):
    server = FakeServer(tmp_path, "OSError: [Errno 98] Address already in use")
    first = server.port
    with server:
        assert server.port != first and server.marker.read_text() == str(first)
        assert server.proc.poll() is None  # the second start-up is serving
    assert server.proc.poll() is not None  # and stopped on leaving


def test_any_other_start_up_failure_is_raised_with_the_log(tmp_path):
    server = FakeServer(tmp_path, "ValueError: max_model_len=0")
    first = server.port
    with pytest.raises(ServerError, match="max_model_len=0"):
        server.start()
    assert server.port == first  # not retried on another port


def test_the_retries_end(tmp_path, monkeypatch):
    monkeypatch.setattr(live_server, "PORT_ATTEMPTS", 1)
    with pytest.raises(ServerError, match="Address already in use"):
        FakeServer(tmp_path, "OSError: [Errno 98] Address already in use").start()
