#!/usr/bin/python3
"""A stand-in kubelet for the device plugin tests, on python3-grpcio.

    kubelet_standin.py serve --dir DIR --out FILE [--proto PROTO]
        Serves /v1beta1.Registration/Register on DIR/kubelet.sock as kubelets
        >= 1.26 do: the Register handler checks the version, dials the plugin
        back on DIR/<endpoint> and calls GetDevicePluginOptions BEFORE it
        answers. Then it follows ListAndWatch of every registered resource.
        Commands come on stdin, one per line, "ID VERB ARGS..." (each call's
        deadline: MIGKIT_STANDIN_RPC_TIMEOUT seconds, default 10):
          allocate RESOURCE ID1,ID2[;ID3,...]   one container per ';' group
          preferred RESOURCE AVAIL1,AVAIL2 MUST1,MUST2|- SIZE
          options RESOURCE
          prestart RESOURCE ID1,...
          restart        as a restarted kubelet: close every connection,
                         stop serving, delete the plugin sockets (every
                         non-directory file but the checkpoint), serve
                         kubelet.sock again
          quit
        Every event is one JSON line in FILE (appended, flushed), with "t" the
        wall-clock time (time.time()):
          {"event":"listening"}            kubelet.sock served
          {"event":"register",...}         one per Register call
          {"event":"devices","resource":R,"devices":[{"id","health","numa"}],"n":K}
                                           each ListAndWatch response (K counts them per resource)
          {"event":"stream_end","resource":R,"code":...}
          {"event":"reply","id":ID,"ok":bool,...}   answer to a command
    kubelet_standin.py wait --out FILE --expr PYEXPR [--timeout S] [--from N]
        Prints the first event line (from line N, 0-based) for which PYEXPR
        (with `e` the event) is true, and its line number on stderr; exit 1
        after S seconds without one.

Messages: the module is generated from proto/deviceplugin.proto with
`protoc --python_out` into a temporary directory at start.
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def load_messages(proto):
    tmp = tempfile.mkdtemp(prefix="kubelet-standin-")
    subprocess.run(["protoc", "--proto_path=" + os.path.dirname(proto), "--python_out=" + tmp,
                    os.path.basename(proto)], check=True)
    sys.path.insert(0, tmp)
    return importlib.import_module(os.path.splitext(os.path.basename(proto))[0] + "_pb2")


class Standin:
    def __init__(self, pb, sockdir, out):
        import grpc
        self.grpc = grpc
        self.pb = pb
        self.dir = sockdir
        self.out = open(out, "a", buffering=1)
        self.lock = threading.Lock()
        self.server = None
        self.plugins = {}    # resource -> {"endpoint", "channel", "stream"}
        self.counts = {}     # resource -> ListAndWatch responses seen
        self.generation = 0

    def emit(self, **ev):
        ev["t"] = time.time()
        with self.lock:
            self.out.write(json.dumps(ev, sort_keys=True) + "\n")
            self.out.flush()

    def channel(self, endpoint):
        return self.grpc.insecure_channel("unix://" + os.path.join(self.dir, endpoint),
                                          options=[("grpc.default_authority", "localhost")])

    # --- Registration service ---
    def register(self, req, ctx):
        ev = {"event": "register", "resource": req.resource_name, "endpoint": req.endpoint,
              "version": req.version,
              "register_options": {"pre_start_required": req.options.pre_start_required,
                                   "get_preferred_allocation_available":
                                       req.options.get_preferred_allocation_available}}
        if req.version != "v1beta1":
            ev.update(accepted=False, error="unsupported version")
            self.emit(**ev)
            ctx.abort(self.grpc.StatusCode.INVALID_ARGUMENT, "unsupported version " + req.version)
        # Current kubelets dial back and ask for the options before answering.
        ch = self.channel(req.endpoint)
        try:
            self.grpc.channel_ready_future(ch).result(timeout=10)
            opts = ch.unary_unary("/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                  request_serializer=self.pb.Empty.SerializeToString,
                                  response_deserializer=self.pb.DevicePluginOptions.FromString)(
                                      self.pb.Empty(), timeout=10)
        except Exception as exc:  # noqa: BLE001 - reported, then the call fails
            ev.update(accepted=False, error="GetDevicePluginOptions: %s" % exc)
            self.emit(**ev)
            ch.close()
            ctx.abort(self.grpc.StatusCode.UNAVAILABLE, "cannot call the plugin back")
        ev.update(accepted=True, plugin_options={
            "pre_start_required": opts.pre_start_required,
            "get_preferred_allocation_available": opts.get_preferred_allocation_available})
        self.emit(**ev)
        with self.lock:
            old = self.plugins.get(req.resource_name)
            self.plugins[req.resource_name] = {"endpoint": req.endpoint, "channel": ch}
        if old:
            old["channel"].close()
        threading.Thread(target=self.follow, args=(req.resource_name, ch), daemon=True).start()
        return self.pb.Empty()

    def follow(self, resource, ch):
        stream = ch.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                 request_serializer=self.pb.Empty.SerializeToString,
                                 response_deserializer=self.pb.ListAndWatchResponse.FromString)(self.pb.Empty())
        code = "OK"
        try:
            for resp in stream:
                with self.lock:
                    self.counts[resource] = self.counts.get(resource, 0) + 1
                    n = self.counts[resource]
                devs = [{"id": d.ID, "health": d.health,
                         "numa": [x.ID for x in d.topology.nodes] if d.HasField("topology") else None}
                        for d in resp.devices]
                self.emit(event="devices", resource=resource, devices=devs, n=n)
        except self.grpc.RpcError as exc:
            code = str(exc.code())
        self.emit(event="stream_end", resource=resource, code=code)

    # --- serving kubelet.sock ---
    def start(self):
        from concurrent import futures
        grpc = self.grpc
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                self.register, request_deserializer=self.pb.RegisterRequest.FromString,
                response_serializer=self.pb.Empty.SerializeToString)})
        server.add_generic_rpc_handlers((handler,))
        sock = os.path.join(self.dir, "kubelet.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        server.add_insecure_port("unix:" + sock)
        server.start()
        self.server = server
        self.emit(event="listening", socket=sock)

    def restart(self):
        with self.lock:
            plugins, self.plugins = self.plugins, {}
        for p in plugins.values():
            p["channel"].close()
        if self.server:
            self.server.stop(0).wait()
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if name != "kubelet_internal_checkpoint" and not os.path.isdir(path):
                os.unlink(path)
        time.sleep(0.2)
        self.start()

    # --- commands ---
    def unary(self, resource, method, req_type, resp_type, req):
        with self.lock:
            p = self.plugins.get(resource)
        if not p:
            raise RuntimeError("resource %s is not registered" % resource)
        return p["channel"].unary_unary("/v1beta1.DevicePlugin/" + method,
                                        request_serializer=req_type.SerializeToString,
                                        response_deserializer=resp_type.FromString)(
                                            req, timeout=float(os.environ.get("MIGKIT_STANDIN_RPC_TIMEOUT", "10")))

    def command(self, line):
        parts = line.split()
        if len(parts) < 2:
            return
        cid, verb, args = parts[0], parts[1], parts[2:]
        pb = self.pb
        try:
            if verb == "allocate":
                req = pb.AllocateRequest()
                for group in args[1].split(";"):
                    req.container_requests.add().devices_ids.extend([x for x in group.split(",") if x])
                resp = self.unary(args[0], "Allocate", pb.AllocateRequest, pb.AllocateResponse, req)
                out = [{"envs": dict(c.envs), "annotations": dict(c.annotations),
                        "mounts": [{"container_path": m.container_path, "host_path": m.host_path,
                                    "read_only": m.read_only} for m in c.mounts],
                        "devices": [{"container_path": d.container_path, "host_path": d.host_path,
                                     "permissions": d.permissions} for d in c.devices],
                        "cdi_devices": [d.name for d in c.cdi_devices]} for c in resp.container_responses]
                self.emit(event="reply", id=cid, ok=True, responses=out)
            elif verb == "preferred":
                req = pb.PreferredAllocationRequest()
                c = req.container_requests.add()
                c.available_deviceIDs.extend([x for x in args[1].split(",") if x])
                if args[2] != "-":
                    c.must_include_deviceIDs.extend([x for x in args[2].split(",") if x])
                c.allocation_size = int(args[3])
                resp = self.unary(args[0], "GetPreferredAllocation", pb.PreferredAllocationRequest,
                                  pb.PreferredAllocationResponse, req)
                self.emit(event="reply", id=cid, ok=True,
                          ids=[list(r.deviceIDs) for r in resp.container_responses])
            elif verb == "options":
                resp = self.unary(args[0], "GetDevicePluginOptions", pb.Empty, pb.DevicePluginOptions, pb.Empty())
                self.emit(event="reply", id=cid, ok=True, pre_start_required=resp.pre_start_required,
                          get_preferred_allocation_available=resp.get_preferred_allocation_available)
            elif verb == "prestart":
                req = pb.PreStartContainerRequest()
                req.devices_ids.extend([x for x in args[1].split(",") if x])
                self.unary(args[0], "PreStartContainer", pb.PreStartContainerRequest,
                           pb.PreStartContainerResponse, req)
                self.emit(event="reply", id=cid, ok=True)
            elif verb == "restart":
                self.restart()
                self.emit(event="reply", id=cid, ok=True)
            elif verb == "quit":
                self.emit(event="reply", id=cid, ok=True)
                return "quit"
            else:
                self.emit(event="reply", id=cid, ok=False, error="unknown command " + verb)
        except self.grpc.RpcError as exc:
            self.emit(event="reply", id=cid, ok=False, code=str(exc.code()), error=exc.details())
        except Exception as exc:  # noqa: BLE001 - a bad command must not kill the stand-in
            self.emit(event="reply", id=cid, ok=False, error="%s: %s" % (type(exc).__name__, exc))
        return None


def serve(args):
    pb = load_messages(args.proto)
    s = Standin(pb, args.dir, args.out)
    s.start()
    for line in sys.stdin:
        if s.command(line.strip()) == "quit":
            break
    with s.lock:
        plugins = list(s.plugins.values())
    for p in plugins:
        p["channel"].close()
    s.server.stop(0).wait()
    sock = os.path.join(args.dir, "kubelet.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    return 0


def wait(args):
    deadline = time.time() + args.timeout
    while True:
        try:
            with open(args.out) as f:
                lines = f.readlines()
        except FileNotFoundError:
            lines = []
        for i, line in enumerate(lines[args.start:], args.start):
            if not line.endswith("\n"):
                break
            e = json.loads(line)
            if eval(args.expr, {}, {"e": e}):  # noqa: S307 - the test's own expression
                print(line, end="")
                print(i, file=sys.stderr)
                return 0
        if time.time() > deadline:
            return 1
        time.sleep(0.02)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--dir", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--proto", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "../../proto/deviceplugin.proto"))
    w = sub.add_parser("wait")
    w.add_argument("--out", required=True)
    w.add_argument("--expr", required=True)
    w.add_argument("--timeout", type=float, default=30)
    w.add_argument("--from", dest="start", type=int, default=0)
    a = p.parse_args()
    return serve(a) if a.cmd == "serve" else wait(a)


if __name__ == "__main__":
    sys.exit(main())
