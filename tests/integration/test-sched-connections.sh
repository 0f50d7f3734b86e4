#!/usr/bin/env bash
# The extender's connection limits never lock out the scheduler or the
# probes (issue 27, finding 3): 300 idle connections from 127.0.0.1 (over the
# per-client limit of 256; 127.0.0.1 is kube-scheduler's address in the
# shipped pod) and then a full total limit from other addresses, and
# /healthz, /metrics and /filter still answer at once; a connection that was
# served (kube-scheduler's keep-alive one) outlives a flood of idle ones from
# its own address; the limit is said once, not once per connection. Bounded:
# loopback only, a few hundred sockets, every wait with a deadline.
set -euo pipefail
: "${MIGKIT_BIN:?}"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-sched-connections.XXXXXX" 2>/dev/null || mktemp -d)
# shellcheck source=tests/integration/stub-apiserver.sh
. "$(dirname "$0")/stub-apiserver.sh"
stub_api_pid=
trap '[ -z "$stub_api_pid" ] || kill "$stub_api_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
stub_apiserver_start "$tmp" || exit 1
MIGKIT_BIN=$MIGKIT_BIN timeout 120 python3 -u - "$tmp" <<'EOF'
import json, os, resource, socket, subprocess, sys, time
tmp = sys.argv[1]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
TOTAL = 400
srv = subprocess.Popen([os.environ["MIGKIT_BIN"], "scheduler", "serve", "--kubeconfig", tmp + "/kubeconfig",
                        "--port", "0", "--max-connections", str(TOTAL), "--request-timeout", "60s"],
                       stdout=subprocess.PIPE, stderr=open(tmp + "/serve.err", "w"), text=True)
held = []
def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    srv.kill()
    print(open(tmp + "/serve.err").read()[-3000:], file=sys.stderr)
    sys.exit(1)
line = srv.stdout.readline()
if not line.startswith("listening on port "):
    fail("serve printed no port")
port = int(line.split()[-1])

def send(s, method, path, body=b"", close=True):
    h = "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Type: application/json\r\n%s\r\n" % (
        method, path, len(body), "Connection: close\r\n" if close else "")
    s.sendall(h.encode() + body)

def read_reply(s):
    data = b""
    while b"\r\n\r\n" not in data:
        b = s.recv(65536)
        if not b:
            return 0, ""
        data += b
    head, rest = data.split(b"\r\n\r\n", 1)
    n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
    while len(rest) < n:
        b = s.recv(65536)
        if not b:
            break
        rest += b
    return int(head.split(b" ", 2)[1]), rest.decode(errors="replace")

def request(method, path, body=b"", src="127.0.0.1"):
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(src, 0))
        send(s, method, path, body)
        st, text = read_reply(s)
        s.close()
    except (ConnectionResetError, BrokenPipeError, socket.timeout) as e:
        st, text = 0, str(e)
    return st, text, time.monotonic() - t0

FILTER = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "d", "uid": "u"},
                             "spec": {"containers": [{"name": "c"}]}}, "NodeNames": ["n1", "n2"]}).encode()

def probes(what, src="127.0.0.1"):
    for method, path, body in (("GET", "/healthz", b""), ("GET", "/metrics", b""), ("POST", "/filter", FILTER)):
        st, text, dt = request(method, path, body, src)
        if st != 200 or dt > 3:
            fail("%s %s from %s with %s: status %d after %.2fs %s" % (method, path, src, what, st, dt, text[:200]))
    print("%s: /healthz, /metrics and /filter from %s answered" % (what, src))

def open_idle(n, src):
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        held.append(s)

def server_fds():
    return len(os.listdir("/proc/%d/fd" % srv.pid))

def wait_accepted(n):
    # accepted by the server (then counted, evicted or not), not only in the backlog
    t0 = time.monotonic()
    base = server_fds()
    while time.monotonic() - t0 < 10:
        time.sleep(0.2)
        now = server_fds()
        if now == base:
            return
        base = now

def metric(name):
    st, text, _ = request("GET", "/metrics")
    for l in text.splitlines():
        if l.startswith(name + " "):
            return float(l.split()[1])
    fail("no metric " + name)

probes("no load")
# kube-scheduler's keep-alive connection, served once already.
ka = socket.create_connection(("127.0.0.1", port), timeout=5)
send(ka, "POST", "/filter", FILTER, close=False)
if read_reply(ka)[0] != 200:
    fail("the keep-alive connection's first filter")

# 1. 300 idle connections from 127.0.0.1: over the per-client limit (256).
open_idle(300, "127.0.0.1")
wait_accepted(300)
probes("300 idle connections from 127.0.0.1")
send(ka, "POST", "/filter", FILTER, close=False)
if read_reply(ka)[0] != 200:
    fail("kube-scheduler's keep-alive connection was closed by the flood from its address")
if metric("migkit_http_connections") > 256 + 1:
    fail("more than the per-client limit counted")

# 2. The total limit full: 100 more from each of 127.0.0.2..5 (TOTAL is 400).
for i in range(2, 6):
    open_idle(100, "127.0.0.%d" % i)
wait_accepted(400)
probes("the total limit (%d) full" % TOTAL, "127.0.0.9")
probes("the total limit (%d) full" % TOTAL)
n = metric("migkit_http_connections")
ev = metric("migkit_http_connections_evicted_total")
print("open connections counted %d (limit %d), evicted %d" % (n, TOTAL, ev))
if n > TOTAL or ev < 300 + 400 - TOTAL - 10:
    fail("counted %d, evicted %d" % (n, ev))
send(ka, "POST", "/filter", FILTER, close=False)
if read_reply(ka)[0] != 200:
    fail("kube-scheduler's keep-alive connection was closed with the total limit full")
# The idlest were closed: the first idle ones from 127.0.0.1 see the end.
held[0].settimeout(2)
try:
    if held[0].recv(1) != b"":
        fail("data on an idle connection")
except ConnectionResetError:
    pass
except socket.timeout:
    fail("the idlest connection was not the one closed")
for s in held:
    s.close()
ka.close()
srv.terminate()
srv.wait(timeout=20)
log = open(tmp + "/serve.err").read()
said = log.count("Connection limits reached")
mhd = log.count("reached connection limit")
print("limit messages: %d of ours, %d of libmicrohttpd" % (said, mhd))
if said != 1 or mhd > 1:
    fail("the limit was said %d times (and libmicrohttpd's %d), not once" % (said, mhd))
print("ok")
EOF
