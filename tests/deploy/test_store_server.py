"""docker/store_server.py, the chart's ReadWriteOnce layout (store.mode=served), over real HTTP on
loopback: a store served from one volume is copied whole into another directory, a run directory is
pushed back and fetched again, hostile tars are refused, and every wait ends at its deadline."""
from __future__ import annotations

import importlib.util
import io
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request

import pytest

from tests.deploy.tools import ROOT

SCRIPT = ROOT / "docker" / "store_server.py"
_spec = importlib.util.spec_from_file_location("store_server", SCRIPT)
store_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(store_server)


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "volume"
    (root / "store" / "part-0").mkdir(parents=True)
    (root / "store" / "manifest.json").write_text('{"num_parts": 1}')
    (root / "store" / "part-0" / "indptr.npy").write_bytes(b"\x00" * 100_000)
    srv = store_server.serve(str(root), 0, "127.0.0.1")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_store_is_copied_and_a_run_dir_goes_back(server, tmp_path):
    root, url = server
    dest = tmp_path / "pod"
    store_server.fetch(url, str(dest), timeout=10)
    assert (dest / "store" / "manifest.json").read_text() == '{"num_parts": 1}'
    assert (dest / "store" / "part-0" / "indptr.npy").stat().st_size == 100_000
    run = dest / "runs" / "demo"
    run.mkdir(parents=True)
    (run / "report.md").write_text("# Argosy run demo\n")
    store_server.push(url, str(run), timeout=10)
    assert (root / "runs" / "demo" / "report.md").read_text() == "# Argosy run demo\n"
    (run / "report.md").write_text("second\n")               # pushed again: replaced, not merged
    store_server.push(url, str(run), timeout=10)
    assert (root / "runs" / "demo" / "report.md").read_text() == "second\n"
    out = subprocess.run([sys.executable, str(SCRIPT), "fetch-report", "--url", url, "--job", "demo",
                          "--dest", str(tmp_path / "mine"), "--timeout", "10"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "mine" / "demo" / "report.md").read_text() == "second\n"


def test_hostile_tar_is_refused(server):
    root, url = server
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    req = urllib.request.Request(f"{url}/runs/demo.tar", data=buf.getvalue(), method="PUT")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400
    assert not (root.parent / "escaped.txt").exists() and not (root / "runs" / "demo").exists()
    with pytest.raises(urllib.error.HTTPError):                 # a job name that is a path
        urllib.request.urlopen(urllib.request.Request(f"{url}/runs/..%2Fx.tar", data=b"", method="PUT"), timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("cmd", [["fetch", "--url", "URL", "--dest", "DEST"], ["wait-file", "DEST/never"]])
def test_every_wait_ends_at_its_deadline_with_one_line(cmd, tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"                   # nothing listens there
    args = [a.replace("URL", url).replace("DEST", str(tmp_path)) for a in cmd]
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, str(SCRIPT), *args, "--timeout", "3"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and time.monotonic() - t0 < 30
    assert out.stderr.strip().count("\n") == 0 and "within 3 s" in out.stderr, out.stderr


def test_a_server_without_a_store_is_not_healthy(tmp_path):
    srv = store_server.serve(str(tmp_path), 0, "127.0.0.1")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{srv.server_address[1]}/healthz", timeout=10)
        assert e.value.code == 503
    finally:
        srv.shutdown()
