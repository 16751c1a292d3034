"""A minimal in-memory fake of the Kubernetes apps/v1 API: Deployments and StatefulSets with
their ``/scale`` subresource, plus the discovery documents kubectl needs.

This is a test double on 127.0.0.1, not a Kubernetes API server: no admission, no RBAC, no
controllers (``status.replicas`` simply follows ``spec.replicas``). It exists because no real
kube-apiserver can run on the development machines (docs in /work/shared/brief/infra.md, §4-5).
"""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeApiServer"]

_PATH = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/(deployments|statefulsets)/([^/]+)(/scale)?$")
_KIND = {"deployments": "Deployment", "statefulsets": "StatefulSet"}
_DISCOVERY = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]},
    "/apis/apps/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1", "resources": [
        {"name": r, "singularName": r[:-1], "namespaced": True, "kind": k, "verbs": ["get", "list", "patch", "update"]}
        for r, k in _KIND.items()] + [
        {"name": f"{r}/scale", "singularName": "", "namespaced": True, "group": "autoscaling", "version": "v1",
         "kind": "Scale", "verbs": ["get", "patch", "update"]} for r in _KIND]},
}


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": message}


class FakeApiServer:
    """``with FakeApiServer({("gnn", "deployments", "argosy-sampler"): 2}) as api: api.url``.

    Attributes:
        objects: {(namespace, "deployments"|"statefulsets", name): replicas}, updated by PATCH/PUT.
        requests: (method, path, content-type, body) of every request, in order.
    """

    def __init__(self, objects: dict[tuple[str, str, str], int]):
        self.objects = dict(objects)
        self.requests: list[tuple[str, str, str | None, dict | None]] = []
        self._srv: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._srv is not None
        return f"http://127.0.0.1:{self._srv.server_address[1]}"

    def __enter__(self) -> "FakeApiServer":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, obj: dict) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _route(self, body: dict | None = None) -> None:
                path = self.path.split("?")[0]
                fake.requests.append((self.command, path, self.headers.get("Content-Type"), body))
                if self.command == "GET" and path in _DISCOVERY:
                    return self._send(200, _DISCOVERY[path])
                m = _PATH.match(path)
                key = (m[1], m[2], m[3]) if m else None
                if key not in fake.objects:
                    return self._send(404, _status(404, "NotFound", f"{path} not found"))
                if self.command in ("PATCH", "PUT"):
                    r = (body or {}).get("spec", {}).get("replicas")
                    if not isinstance(r, int) or isinstance(r, bool) or r < 0:
                        return self._send(422, _status(422, "Invalid", "spec.replicas must be a non-negative integer"))
                    fake.objects[key] = r
                ns, res, name = key
                n = fake.objects[key]
                meta = {"name": name, "namespace": ns, "resourceVersion": str(len(fake.requests))}
                if m[4]:
                    return self._send(200, {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": meta,
                                            "spec": {"replicas": n}, "status": {"replicas": n, "selector": f"app={name}"}})
                labels = {"app": name}
                return self._send(200, {"apiVersion": "apps/v1", "kind": _KIND[res], "metadata": meta,
                                        "spec": {"replicas": n, "selector": {"matchLabels": labels},
                                                 "template": {"metadata": {"labels": labels},
                                                              "spec": {"containers": [{"name": name, "image": "x"}]}}},
                                        "status": {"replicas": n}})

            def _body(self) -> dict:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def do_GET(self):
                self._route()

            def do_PATCH(self):
                self._route(self._body())

            def do_PUT(self):
                self._route(self._body())

        self._srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._srv is not None:
            self._srv.shutdown()
            self._srv.server_close()
