"""An HTTP fake of the Kubernetes API server on 127.0.0.1 — **a wire-format test, not a scheduling
test**: it implements just the calls the ``kubernetes`` backend makes (create, read and delete a
``batch/v1`` Job; list pods by label; list nodes by label) with the shapes the official client parses, keeps Jobs and
their pods in memory, and lets a test move a pod (running, succeeded, failed with a code,
disrupted with ``DisruptionTarget``, unschedulable). Nothing is scheduled and no container runs;
the manifests are checked against the Kubernetes schema by ``kubernetes-validate`` in the tests.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_JOBS = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
_NODES = "/api/v1/nodes"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeApiServer:
    """See the module docstring."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.nodes: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, Any]] = []
        self.fail_next: list[int] = []  # statuses to answer the next calls with
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"null")

            def _route(self, method: str) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                body = self._body() if method in {"POST", "DELETE"} else None
                with fake.lock:
                    fake.requests.append((method, self.path, body))
                    if fake.fail_next:
                        code = fake.fail_next.pop(0)
                        self._reply(code, _status(code, "injected"))
                        return
                    code, answer = fake.handle(method, parsed, body)
                self._reply(code, answer)

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def kubeconfig(self, folder: Path, namespace: str = "ml") -> Path:
        path = folder / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [
                        {
                            "name": "fake",
                            "context": {"cluster": "fake", "user": "u", "namespace": namespace},
                        }
                    ],
                    "current-context": "fake",
                }
            )
        )
        return path

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the API ----------------------------------------------------------------------------
    def handle(self, method: str, url: urllib.parse.SplitResult, body: Any) -> tuple[int, Any]:
        if m := _JOBS.match(url.path):
            ns, name = m.group(1), m.group(2)
            if method == "POST" and name is None:
                return self._create(ns, body)
            key = (ns, name or "")
            if key not in self.jobs:
                return 404, _status(404, f'jobs.batch "{name}" not found', "NotFound")
            if method == "GET":
                return 200, self.jobs[key]
            if method == "DELETE":
                del self.jobs[key]
                self.pods.pop(key, None)
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if (m := _PODS.match(url.path)) and method == "GET":
            query = dict(urllib.parse.parse_qsl(url.query))
            want = dict(p.split("=", 1) for p in query.get("labelSelector", "").split(",") if p)
            items = [
                pod
                for (ns, _), pods in self.pods.items()
                if ns == m.group(1)
                for pod in pods
                if all(pod["metadata"]["labels"].get(k) == v for k, v in want.items())
            ]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        if url.path == _NODES and method == "GET":
            query = dict(urllib.parse.parse_qsl(url.query))
            want = dict(p.split("=", 1) for p in query.get("labelSelector", "").split(",") if p)
            items = [
                n
                for n in self.nodes
                if all(n["metadata"]["labels"].get(k) == v for k, v in want.items())
            ]
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items}
        return 404, _status(404, f"no route {method} {url.path}", "NotFound")

    def _create(self, ns: str, job: Any) -> tuple[int, Any]:
        name = job["metadata"]["name"]
        if (ns, name) in self.jobs:
            return 409, _status(409, f'jobs.batch "{name}" already exists', "AlreadyExists")
        job = json.loads(json.dumps(job))
        job["metadata"] |= {"namespace": ns, "uid": f"uid-{name}", "creationTimestamp": _now()}
        job["status"] = {}
        self.jobs[(ns, name)] = job
        labels = job["spec"]["template"]["metadata"]["labels"]
        pods = []
        for i in range(job["spec"].get("parallelism", 1)):
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-{i}-x{i:04d}",
                        "namespace": ns,
                        "labels": {
                            **labels,
                            "batch.kubernetes.io/job-name": name,
                            "batch.kubernetes.io/job-completion-index": str(i),
                        },
                    },
                    "spec": job["spec"]["template"]["spec"],
                    "status": {"phase": "Pending", "conditions": []},
                }
            )
        self.pods[(ns, name)] = pods
        return 201, job

    # -- what a test makes happen ----------------------------------------------------------
    def _each(self, name: str) -> list[dict[str, Any]]:
        return next(pods for (_, n), pods in self.pods.items() if n == name)

    def job(self, name: str) -> dict[str, Any]:
        return next(j for (_, n), j in self.jobs.items() if n == name)

    def add_node(
        self, name: str, labels: dict[str, str], *, ready: bool = True, cordoned: bool = False
    ) -> None:
        """A node the autoscaler brought (``ready``: its Ready condition)."""
        with self.lock:
            self.nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": dict(labels)},
                    "spec": {"unschedulable": cordoned},
                    "status": {
                        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]
                    },
                }
            )

    def run(self, name: str, node: str | None = None) -> None:
        with self.lock:
            for pod in self._each(name):
                if node is not None:
                    pod["spec"] = {**pod["spec"], "nodeName": node}
                pod["status"] = {
                    "phase": "Running",
                    "startTime": _now(),
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                }

    def succeed(self, name: str) -> None:
        with self.lock:
            for pod in self._each(name):
                pod["status"] = {"phase": "Succeeded", "containerStatuses": [_terminated(0)]}
            job = self.job(name)
            job["status"] = {
                "succeeded": len(self._each(name)),
                "conditions": [
                    {"type": "Complete", "status": "True", "lastTransitionTime": _now()}
                ],
            }

    def fail(self, name: str, code: int, index: int = 0) -> None:
        with self.lock:
            pod = self._each(name)[index]
            pod["status"] = {"phase": "Failed", "containerStatuses": [_terminated(code)]}
            self.job(name)["status"] = {
                "failed": 1,
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                    }
                ],
            }

    def disrupt(self, name: str, reason: str = "PreemptionByScheduler", index: int = 0) -> None:
        with self.lock:
            pod = self._each(name)[index]
            pod["status"] = {
                "phase": "Failed",
                "containerStatuses": [_terminated(143)],
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": reason,
                        "message": "Kubernetes is evicting the pod",
                    }
                ],
            }

    def unschedulable(self, name: str) -> None:
        with self.lock:
            for pod in self._each(name):
                pod["status"] = {
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
                        }
                    ],
                }


def _terminated(code: int) -> dict[str, Any]:
    return {
        "name": "job",
        "ready": False,
        "restartCount": 0,
        "image": "img",
        "imageID": "",
        "state": {
            "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        },
    }


def _status(code: int, message: str, reason: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
