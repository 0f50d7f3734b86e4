#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 (tests/integration/test-device-plugin.sh).

Usage: tcp_proxy.py PORT TARGET_PORT
  Listens on 127.0.0.1:PORT (0: a free port) and forwards each connection to
  127.0.0.1:TARGET_PORT, bytes as they come (TLS passes through untouched).
  Prints the port it listens on once it accepts connections.

Killing it takes the target away for its clients: the connections it carries
close and new ones are refused, as when the target stops; started again on
the same PORT (the listener sets SO_REUSEADDR) the target is back, without
restarting it.
"""
import socket
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(conn, target):
    try:
        up = socket.create_connection(("127.0.0.1", target))
    except OSError:
        conn.close()
        return
    threading.Thread(target=pump, args=(up, conn), daemon=True).start()
    pump(conn, up)


def main(argv):
    if len(argv) != 3:
        raise SystemExit(__doc__)
    port, target = int(argv[1]), int(argv[2])
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    print(ls.getsockname()[1], flush=True)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(conn, target), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv)
