# A reverse proxy for tests: it forwards each GET it gets on 0.0.0.0:8080
# to http://localhost:$UPSTREAM_PORT, as a sidecar in front of its pod's app.
import http.server
import os
import urllib.request

UPSTREAM = "http://localhost:" + os.environ["UPSTREAM_PORT"]


class Proxy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        try:
            with urllib.request.urlopen(UPSTREAM + self.path, timeout=5) as up:
                body, status = up.read(), up.status
        except Exception as err:  # the app is not there: a proxy's 502
            body, status = ("upstream: %s\n" % err).encode(), 502
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Proxied-By", "localproxy")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Proxy).serve_forever()
