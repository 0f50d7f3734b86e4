#!/usr/bin/python3
"""Interop peer for tests/unit/test-grpc.c: python3-grpcio (a real gRPC
implementation, as kubelet's grpc-go is one) as server or client of
src/grpc/ over a unix socket. Messages are raw bytes: the handlers use
no (de)serialisers, so bytes pass through unchanged.

  grpc_peer.py serve SOCKET          serve /test.Svc/{Echo,Watch,Fail,Callback,Quit}
                                     until Quit (or 60 s)
  grpc_peer.py client SOCKET         call a grpc/ server (the test's methods);
                                     exit 0 when every check passed
  grpc_peer.py stream-forever SOCKET follow /test.Svc/Watch, print each message
                                     (killed by `client` mid-stream)
"""
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "test.Svc"
# As kubelet dials plugin sockets: the authority is "localhost", not the path.
OPTIONS = [("grpc.default_authority", "localhost")]
TIMEOUT = 10


def channel(sock):
    return grpc.insecure_channel("unix:" + sock, options=OPTIONS)


def serve(sock):
    done = threading.Event()

    def echo(req, ctx):
        return req

    def watch(req, ctx):
        for m in (b"p1", b"p2", b"p3"):
            yield m

    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, "python says no")

    def callback(req, ctx):
        # kubelet's Register: dial the caller's own server back and call it
        # before answering; the request carries that server's socket path.
        with channel(req.decode()) as ch:
            reply = ch.unary_unary("/test.Svc/Echo")(b"from python", timeout=TIMEOUT)
        return b"callback:" + reply

    def quit_(req, ctx):
        done.set()
        return b"bye"

    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Watch": grpc.unary_stream_rpc_method_handler(watch),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Callback": grpc.unary_unary_rpc_method_handler(callback),
        "Quit": grpc.unary_unary_rpc_method_handler(quit_),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_insecure_port("unix:" + sock)
    server.start()
    print("serving", flush=True)
    ok = done.wait(60)
    server.stop(1).wait()
    return 0 if ok else 1


failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def expect_error(fn, code, text, what):
    try:
        fn()
    except grpc.RpcError as e:
        check(e.code() == code and text in (e.details() or ""),
              "%s: %s '%s' (want %s '%s')" % (what, e.code(), e.details(), code, text))
        return
    check(False, "%s: succeeded, want %s" % (what, code))


def wait_streams(ch, n):
    streams = ch.unary_unary("/test.Svc/Streams")
    deadline = time.monotonic() + TIMEOUT
    got = None
    while time.monotonic() < deadline:
        got = int(streams(b"", timeout=TIMEOUT))
        if got == n:
            break
        time.sleep(0.05)
    check(got == n, "server counts %s open streams (want %d)" % (got, n))


def client(sock):
    ch = channel(sock)
    echo = ch.unary_unary("/test.Svc/Echo")
    check(echo(b"hi", timeout=TIMEOUT) == b"hi", "Echo")
    check(echo(b"", timeout=TIMEOUT) == b"", "Echo of an empty message")
    check(echo(bytes(range(256)), timeout=TIMEOUT) == bytes(range(256)), "Echo of every byte value")
    expect_error(lambda: ch.unary_unary("/test.Svc/Nope")(b"x", timeout=TIMEOUT),
                 grpc.StatusCode.UNIMPLEMENTED, "unknown method '/test.Svc/Nope'", "unknown method")
    expect_error(lambda: ch.unary_unary("/test.Svc/Fail")(b"enoent", timeout=TIMEOUT),
                 grpc.StatusCode.NOT_FOUND, "device 'GPU-x' unknown", "handler error")
    expect_error(lambda: echo(b"x" * 2000, timeout=TIMEOUT),
                 grpc.StatusCode.RESOURCE_EXHAUSTED, "", "request over the server's cap")
    # The server takes no compressed messages (no inflating past the cap).
    try:
        echo(b"z" * 100, timeout=TIMEOUT, compression=grpc.Compression.Gzip)
        check(False, "gzip request accepted")
    except grpc.RpcError as e:
        check(e.code() != grpc.StatusCode.OK, "gzip request refused: %s '%s'" % (e.code(), e.details()))
    check(echo(b"still", timeout=TIMEOUT) == b"still", "Echo after the refusals")

    publish = ch.unary_unary("/test.Svc/Publish")
    watch = ch.unary_stream("/test.Svc/Watch")
    publish(b"list-1", timeout=TIMEOUT)
    it = watch(b"", timeout=60)
    check(next(it) == b"list-1", "stream: first message")
    publish(b"list-2", timeout=TIMEOUT)
    check(next(it) == b"list-2", "stream: update")
    wait_streams(ch, 1)
    it.cancel()
    wait_streams(ch, 0)

    # A peer killed in the middle of a stream.
    p = subprocess.Popen([sys.executable, __file__, "stream-forever", sock], stdout=subprocess.PIPE)
    line = p.stdout.readline().strip()
    check(line == b"list-2", "killed peer got '%s'" % line.decode(errors="replace"))
    wait_streams(ch, 1)
    p.kill()
    p.wait()
    p.stdout.close()
    wait_streams(ch, 0)
    check(echo(b"after", timeout=TIMEOUT) == b"after", "Echo after a killed stream peer")
    ch.close()
    return 1 if failures else 0


def stream_forever(sock):
    ch = channel(sock)
    for m in ch.unary_stream("/test.Svc/Watch")(b""):
        print(m.decode(errors="replace"), flush=True)
    return 0


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    mode, sock = sys.argv[1], sys.argv[2]
    if mode == "serve":
        return serve(sock)
    if mode == "client":
        return client(sock)
    if mode == "stream-forever":
        return stream_forever(sock)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
