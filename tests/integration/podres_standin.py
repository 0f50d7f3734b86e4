#!/usr/bin/python3
"""Stand-ins for test-device-plugin-follow.sh: what kubelet's PodResources
API (v1.PodResourcesLister/List, python3-grpcio, messages generated at run
time with `protoc --python_out` from proto/podresources.proto) and the
apiserver's pods (GET list, merge PATCH with metadata.uid and
metadata.resourceVersion preconditions: 409 when they differ; a Node
answers any node's GET or PATCH) answer.

  podres_standin.py --socket SOCK --proto PROTO --held FILE
                    --store FILE --patches FILE --port-file FILE

--held FILE, read at each List: {"pods": [{"namespace", "name",
"containers": [{"name", "resource", "ids": [...]}]}]}: what the test says
kubelet assigned. --store FILE: a PodList, read at start, written back
after each PATCH (the test reads the pods there). Each PATCH, applied or
refused, is appended to --patches as a JSON line {path, body, status}.
"""
import argparse
import http.server
import json
import os
import sys
import threading
from concurrent import futures

from kubelet_standin import load_messages


def merge(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge(target.get(k), v)
    return target


def main():
    ap = argparse.ArgumentParser()
    for a in ("--socket", "--proto", "--held", "--store", "--patches", "--port-file"):
        ap.add_argument(a, required=True)
    opt = ap.parse_args()
    import grpc
    pb = load_messages(opt.proto)
    lock = threading.Lock()
    with open(opt.store) as f:
        store = json.load(f)

    def list_(req, ctx):
        with open(opt.held) as f:
            held = json.load(f)
        resp = pb.ListPodResourcesResponse()
        for p in held["pods"]:
            pr = resp.pod_resources.add(name=p["name"], namespace=p["namespace"])
            for c in p["containers"]:
                cr = pr.containers.add(name=c["name"])
                cr.devices.add(resource_name=c["resource"], device_ids=c["ids"])
        return resp.SerializeToString()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(list_)}),))
    server.add_insecure_port("unix:" + opt.socket)
    server.start()

    class H(http.server.BaseHTTPRequestHandler):
        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def node(self):
            name = self.path.split("?")[0].split("/")[4]
            return {"kind": "Node", "metadata": {"name": name, "resourceVersion": "1", "annotations": {},
                                                 "labels": {}}}

        def do_GET(self):
            if "watch=" in self.path:
                return self.reply(404, {"kind": "Status", "code": 404})
            if self.path.startswith("/api/v1/nodes/"):
                return self.reply(200, self.node())
            if self.path.startswith("/api/v1/pods"):
                with lock:
                    return self.reply(200, store)
            self.reply(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

        def do_PATCH(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            if self.path.startswith("/api/v1/nodes/"):
                return self.reply(200, self.node())
            parts = self.path.split("?")[0].split("/")  # /api/v1/namespaces/NS/pods/NAME
            with lock:
                pod = next((p for p in store["items"] if len(parts) == 7 and
                            p["metadata"]["namespace"] == parts[4] and p["metadata"]["name"] == parts[6]), None)
                md = body.get("metadata", {})
                if pod is None:
                    code, obj = 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
                elif ("resourceVersion" in md and md["resourceVersion"] != pod["metadata"]["resourceVersion"]) or \
                        ("uid" in md and md["uid"] != pod["metadata"]["uid"]):
                    code, obj = 409, {"kind": "Status", "code": 409, "reason": "Conflict",
                                      "message": "the object has been modified"}
                else:
                    change = json.loads(json.dumps(body))
                    change.get("metadata", {}).pop("resourceVersion", None)
                    merge(pod, change)
                    pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
                    code, obj = 200, pod
                    tmp = opt.store + ".tmp"
                    with open(tmp, "w") as f:
                        json.dump(store, f)
                    os.rename(tmp, opt.store)
                with open(opt.patches, "a") as f:
                    f.write(json.dumps({"path": self.path, "body": body, "status": code}) + "\n")
            self.reply(code, obj)

        def log_message(self, fmt, *a):
            sys.stderr.write((fmt % a) + "\n")

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    with open(opt.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(opt.port_file + ".tmp", opt.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
