# Sourced by integration tests: a stub kube-apiserver on a free loopback
# port, and the kubeconfig that points at it. Watches hang (an answer that is
# no event would fail the informers); every other GET answers an empty list
# unless an option below says otherwise; a PATCH answers the Node (a node's
# path) or {}.
#
# stub_apiserver_start DIR [--pods FILE] [--node NAME] [--patches FILE]:
# starts it (its port in DIR/api.port, its log in DIR/api.log), sets
# stub_api_pid and writes DIR/kubeconfig; returns 1 when it did not start.
#   --pods FILE     GET /api/v1/pods... answers FILE (a PodList), read again
#                   at each request
#   --node NAME     GET /api/v1/nodes/NAME answers that Node (no labels, no
#                   annotations); a PATCH of a node answers it too
#   --patches FILE  each PATCH appended to FILE as a JSON line {path, body}
stub_apiserver_start() {
  local dir=$1
  shift
  rm -f "$dir/api.port"
  python3 -u - "$@" >"$dir/api.port" 2>"$dir/api.log" <<'PY' &
import argparse, http.server, json, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("--pods")
ap.add_argument("--node", default="stub")
ap.add_argument("--patches")
opt = ap.parse_args()
NODE = {"kind": "Node", "metadata": {"name": opt.node, "resourceVersion": "1", "annotations": {}, "labels": {}}}
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if "watch=" in self.path:
            time.sleep(600)
        if opt.pods and self.path.startswith("/api/v1/pods"):
            with open(opt.pods) as f:
                return self.reply(json.load(f))
        if self.path.split("?")[0] == "/api/v1/nodes/" + opt.node:
            return self.reply(NODE)
        self.reply({"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []})
    def do_PATCH(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if opt.patches:
            with open(opt.patches, "a") as f:
                f.write(json.dumps({"path": self.path, "body": json.loads(body)}) + "\n")
        self.reply(NODE if self.path.startswith("/api/v1/nodes/") else {})
    def log_message(self, fmt, *a):
        sys.stderr.write((fmt % a) + "\n")
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1])
srv.serve_forever()
PY
  stub_api_pid=$!
  for ((i = 0; i < 100; i++)); do [ -s "$dir/api.port" ] && break; sleep 0.1; done
  [ -s "$dir/api.port" ] || { echo "the stub apiserver did not start: $(cat "$dir/api.log")" >&2; return 1; }
  write_kubeconfig "$dir/kubeconfig" "http://127.0.0.1:$(cat "$dir/api.port")"
}

# write_kubeconfig FILE SERVER: a kubeconfig for SERVER with a token user.
write_kubeconfig() {
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$2"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
KC
}
