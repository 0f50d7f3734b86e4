# Sourced by integration tests: a stub kube-apiserver on a free loopback
# port. Every GET answers an empty list, watches hang (an answer that is no
# event would fail the informers), a PATCH answers an empty Node.
# stub_apiserver_start DIR: starts it, sets stub_api_pid and writes the
# kubeconfig DIR/kubeconfig that points at it.
stub_apiserver_start() {
  local dir=$1
  python3 -u - >"$dir/api.port" 2>/dev/null <<'PY' &
import http.server, json, time
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
        self.reply({"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []})
    def do_PATCH(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.reply({"kind": "Node", "metadata": {"name": "stub"}})
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1])
srv.serve_forever()
PY
  stub_api_pid=$!
  for ((i = 0; i < 100; i++)); do [ -s "$dir/api.port" ] && break; sleep 0.1; done
  cat >"$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:$(cat "$dir/api.port")"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
KC
}
