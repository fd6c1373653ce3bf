"""A throwaway CA made with openssl, a server certificate it signs for one address, and git's smart HTTP over TLS: what
a homelab's Gitea behind its private CA looks like to a step. Shared by the trust tests (tests/test_trust.py, on
127.0.0.1) and the node's cron scenario (tests/test_node.py, on the pod bridge's address)."""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PrivateCA:
    """A CA's certificate and a server certificate (and key) it signed."""

    ca: Path  # what a client must trust
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def make_ca(folder: Path, host: str) -> PrivateCA:
    """A CA valid for a day in `folder` (made here), and a certificate for `host` (an IP address or a name) it
    signed."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        san = f"IP:{ipaddress.ip_address(host)}"
    except ValueError:
        san = f"DNS:{host}"
    for args in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
         "-subj", "/CN=distillery test CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={host}"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
         "server.crt", "-days", "1", "-extfile", "/dev/stdin"],
    ):  # fmt: skip
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60,
                       input=f"subjectAltName={san}".encode())  # fmt: skip
    return PrivateCA(folder / "ca.crt", folder / "server.crt", folder / "server.key")


class _GitHttp(http.server.BaseHTTPRequestHandler):
    """git's smart HTTP: each request handed to `git http-backend` (CGI), as a web server in front of a git host
    does; `root` is the folder of bare repositories."""

    root: Path

    def _backend(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Transfer-Encoding") == "chunked":  # git sends large requests chunked
            while size := int(self.rfile.readline().strip(), 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "REMOTE_ADDR": self.client_address[0],
               **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in self.headers.items()}}  # fmt: skip
        env.pop("HTTP_TRANSFER_ENCODING", None)
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=120)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        fields = [line.split(":", 1) for line in head.decode().splitlines() if ":" in line]
        status = next((int(v.split()[0]) for k, v in fields if k.lower() == "status"), 200)
        self.send_response(status)
        for k, v in fields:
            if k.lower() != "status":
                self.send_header(k, v.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _backend

    def log_message(self, *_: object) -> None:  # quiet: pytest shows failures
        pass


@contextlib.contextmanager
def https_git(folder: Path, host: str, port: int, ca: PrivateCA) -> Iterator[str]:
    """The bare repositories in `folder` over https on `host`:`port`, presenting `ca`'s server certificate, until the
    block ends. Yields the base URL (`https://host:port`)."""
    handler = type("GitHttp", (_GitHttp,), {"root": folder})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.socket = ca.server_context().wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
