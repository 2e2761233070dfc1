#!/usr/bin/env python3
"""An OTLP/HTTP sink for benchmarks: answers every POST /v1/traces with an empty (valid)
ExportTraceServiceResponse, and counts requests and bytes. It decodes nothing, so the figures
measure the exporter, not a collector.

    python3 scripts/lib/otlp-sink.py PORT      # prints "listening PORT", then serves until killed
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

received = {"requests": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        received["requests"] += 1
        received["bytes"] += length
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        body = f'{{"requests":{received["requests"]},"bytes":{received["bytes"]}}}'.encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
