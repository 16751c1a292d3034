"""Move a partitioned store and run directories between pods without a shared (ReadWriteMany) volume.

The Helm chart's default layout (``store.mode=served``) keeps the store on one ReadWriteOnce volume,
mounted by one pod (``<release>-store``): its init steps fetch the input and partition it, then this
script serves that volume. Every other pod copies the store into a pod-local ``emptyDir`` before it
starts (``fetch``), and the submit Job pushes the job's run directory back (``push``), so the report
ends on the volume, where ``kubectl cp`` or ``argosy``-free ``curl``/``tar`` fetch it::

    python store_server.py serve --root /data [--port 8700]            # the store pod
    python store_server.py fetch  --url http://R-store:8700 --dest /data --timeout 1800
    python store_server.py push   --url http://R-store:8700 --src /data/runs/JOB --timeout 300
    python store_server.py fetch-report --url http://127.0.0.1:8700 --job JOB --dest runs   # -> runs/JOB
    python store_server.py fetch-input --dest /data/input --timeout 1800 URL [URL ...]
    python store_server.py wait-file PATH --timeout 1800                # RWX layouts: wait for a ready file

Endpoints (``serve``): ``GET /healthz`` (200 once ``<root>/store/manifest.json`` exists),
``GET /store.tar`` (the store directory as an uncompressed tar stream), ``GET /runs/<job>.tar``,
``PUT /runs/<job>.tar`` (replaces ``<root>/runs/<job>``). Every wait has a deadline (``--timeout``):
a step that cannot finish fails its pod with one line instead of waiting forever. Standard library
only: it runs in every Argosy image.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_JOB = re.compile(r"^/runs/([A-Za-z0-9][A-Za-z0-9_.-]{0,127})\.tar$")


def _say(msg: str) -> None:
    print(f"store_server: {msg}", file=sys.stderr, flush=True)


def _safe_extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract a tar stream; members that would land outside ``dest`` (absolute, ``..``, links) are refused."""
    dest = dest.resolve()
    for m in tar:
        target = (dest / m.name).resolve()
        if not (m.isfile() or m.isdir()) or (target != dest and dest not in target.parents):
            raise ValueError(f"refusing tar member {m.name!r} (outside {dest}, or not a plain file or directory)")
        tar.extract(m, dest, set_attrs=False)


class _Handler(BaseHTTPRequestHandler):
    root: Path = Path("/data")

    def log_message(self, fmt, *args):                       # one line per request, on stderr
        _say(f"{self.address_string()} {fmt % args}")

    def _tar_out(self, path: Path, arcname: str) -> None:
        if not path.is_dir():
            self.send_error(404, f"{path.name}: not here")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-tar")
        self.end_headers()
        with tarfile.open(fileobj=self.wfile, mode="w|") as tar:
            tar.add(path, arcname=arcname)

    def do_GET(self):
        if self.path == "/healthz":
            ok = (self.root / "store" / "manifest.json").is_file()
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(b"ok\n" if ok else b"no store yet\n")
        elif self.path == "/store.tar":
            self._tar_out(self.root / "store", "store")
        elif m := _JOB.match(self.path):
            self._tar_out(self.root / "runs" / m[1], m[1])
        else:
            self.send_error(404)

    def do_PUT(self):
        m = _JOB.match(self.path)
        if not m:
            self.send_error(404)
            return
        runs = self.root / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{m[1]}.", dir=runs))
        try:
            left = int(self.headers.get("Content-Length") or 0)

            class _Body:                                       # a bounded reader over the request body
                def read(self_, n=-1):
                    nonlocal left
                    n = left if n < 0 else min(n, left)
                    data = self.rfile.read(n) if n else b""
                    left -= len(data)
                    return data

            with tarfile.open(fileobj=_Body(), mode="r|") as tar:
                _safe_extract(tar, tmp)
            src = tmp / m[1]
            if not src.is_dir():
                raise ValueError(f"the tar holds no {m[1]}/ directory")
            final = runs / m[1]
            if final.exists():
                shutil.rmtree(final)
            os.replace(src, final)
        except (ValueError, tarfile.TarError, OSError) as e:
            self.send_error(400, str(e)[:200])
            return
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.send_response(201)
        self.end_headers()


def serve(root: str, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"root": Path(root)})
    return ThreadingHTTPServer((host, port), handler)


def _retry(what: str, timeout: float, fn):
    """Call ``fn`` until it returns without a connection error or the deadline passes."""
    deadline, last = time.monotonic() + timeout, None
    while True:
        try:
            return fn()
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            if isinstance(e, urllib.error.HTTPError) and e.code not in (502, 503, 504):
                raise SystemExit(f"store_server: {what}: HTTP {e.code} {e.reason}") from None
            last = e
        if time.monotonic() >= deadline:
            raise SystemExit(f"store_server: {what}: not done within {timeout:.0f} s (last error: {last})")
        time.sleep(min(5.0, max(0.1, deadline - time.monotonic())))


def fetch(url: str, dest: str, timeout: float, path: str = "/store.tar") -> None:
    """Download ``url + path`` (a tar stream) into ``dest`` (waits for the server until ``timeout``)."""
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)

    def once():
        _retry(f"{url} not healthy", timeout, lambda: urllib.request.urlopen(url + "/healthz", timeout=10).read())
        with urllib.request.urlopen(url + path, timeout=60) as r, tarfile.open(fileobj=r, mode="r|") as tar:
            _safe_extract(tar, out)

    t0 = time.monotonic()
    _retry(f"fetching {url}{path}", timeout, once)
    _say(f"{url}{path} -> {out} in {time.monotonic() - t0:.1f} s")


def push(url: str, src: str, timeout: float) -> None:
    """Upload directory ``src`` as ``/runs/<name>.tar``."""
    src_p = Path(src)
    if not src_p.is_dir():
        raise SystemExit(f"store_server: {src}: no such directory")
    with tempfile.TemporaryFile() as f:
        with tarfile.open(fileobj=f, mode="w") as tar:
            tar.add(src_p, arcname=src_p.name)
        size = f.tell()

        def once():
            f.seek(0)
            req = urllib.request.Request(f"{url}/runs/{src_p.name}.tar", data=f, method="PUT",
                                         headers={"Content-Length": str(size), "Content-Type": "application/x-tar"})
            urllib.request.urlopen(req, timeout=60).read()

        _retry(f"pushing {src} to {url}", timeout, once)
    _say(f"{src} -> {url}/runs/{src_p.name} ({size / 2**20:.1f} MiB)")


def fetch_input(urls: list[str], dest: str, timeout: float) -> None:
    """Download each URL into ``dest`` under its own file name (an existing complete file is kept)."""
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    for u in urls:
        name = Path(urllib.request.urlparse(u).path).name or "input"
        target = out / name
        if target.exists():
            _say(f"{target} exists; not downloading {u} again")
            continue

        def once(u=u, target=target):
            tmp = target.with_name(f".{target.name}.part")
            with urllib.request.urlopen(u, timeout=60) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f, 1 << 20)
            os.replace(tmp, target)

        _retry(f"downloading {u}", timeout, once)
        _say(f"{u} -> {target} ({target.stat().st_size / 2**20:.1f} MiB)")


def wait_file(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() >= deadline:
            raise SystemExit(f"store_server: {path} did not appear within {timeout:.0f} s (did the partitioner fail? "
                             "kubectl logs job/<release>-partitioner-r<revision>)")
        time.sleep(2.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="store_server.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--root", default="/data")
    s.add_argument("--port", type=int, default=8700)
    for name in ("fetch", "push", "fetch-report", "fetch-input", "wait-file"):
        a = sub.add_parser(name)
        a.add_argument("--timeout", type=float, required=True, help="seconds before giving up (a deadline, always)")
        if name in ("fetch", "push", "fetch-report"):
            a.add_argument("--url", required=True)
        if name in ("fetch", "fetch-report", "fetch-input"):
            a.add_argument("--dest", required=True)
        if name == "push":
            a.add_argument("--src", required=True)
        if name == "fetch-report":
            a.add_argument("--job", required=True)
        if name == "fetch-input":
            a.add_argument("urls", nargs="+")
        if name == "wait-file":
            a.add_argument("path")
    args = p.parse_args(argv)
    if args.cmd == "serve":
        srv = serve(args.root, args.port)
        _say(f"serving {args.root} on port {srv.server_address[1]}")
        srv.serve_forever()
    elif args.cmd == "fetch":
        fetch(args.url.rstrip("/"), args.dest, args.timeout)
    elif args.cmd == "fetch-report":
        fetch(args.url.rstrip("/"), args.dest, args.timeout, f"/runs/{args.job}.tar")
    elif args.cmd == "push":
        push(args.url.rstrip("/"), args.src, args.timeout)
    elif args.cmd == "fetch-input":
        fetch_input(args.urls, args.dest, args.timeout)
    else:
        wait_file(args.path, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
