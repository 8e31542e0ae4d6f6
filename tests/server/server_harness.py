"""What the server's scripted tests share: a `freezeframe serve` process on a loopback port the
system picks, requests to it and its metrics, and its stop by SIGTERM. Standard library only."""
import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request


class Server:
    """`freezeframe serve CHECKPOINT --port 0 EXTRA...`, once it says where it listens."""

    def __init__(self, freezeframe, checkpoint, *extra):
        self.proc = subprocess.Popen([freezeframe, "serve", checkpoint, "--port", "0", *extra],
                                     stderr=subprocess.PIPE, text=True)
        for line in self.proc.stderr:
            match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                self.url = "http://127.0.0.1:%d" % self.port
                return
            print(line, end="", file=sys.stderr)
        raise SystemExit("the server did not start (exit %s)" % self.proc.wait())

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return r.status, r.read().decode()

    def post(self, path, body, headers=None, timeout=30):
        """(status, body text) of a whole request; an error status is returned, not raised."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name):
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        raise KeyError(name)

    def stop(self, timeout=20):
        """SIGTERM; the exit code, or None when it did not exit in time (then it is killed)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
