"""Egress recorder: latency added per request, keep-alive, against going straight to the server.

A local HTTP/1.1 server (Python's http.server with keep-alive and ``disable_nagle_algorithm``,
without which delayed ACKs add ~40 ms to every reply) runs in its own process; so does the
client, which holds one connection open and times each of REQUESTS small GET requests with
``perf_counter``, after WARMUP untimed ones:

- ours: through the egress recorder (the host is allowed: recorded, then passed through);
- direct: the same client straight to the server.

Both clients run in the same benchmark, one after the other; the recorder runs as it does in a
sandbox (its own mitmproxy process). "Added" is the difference of the medians.
"""

from __future__ import annotations

import cProfile
import json
import subprocess
import sys
import textwrap

from common import Result, Timing, repeats_of, result, sized

from oracle.proxies.egress import EgressPolicy, EgressRecorder

NAME = "egress recorder: added latency per keep-alive request"
GOAL = "≤ 4 ms added per request (median)"
REQUESTS = 400
QUICK_REQUESTS = 50
WARMUP = 30
QUICK_WARMUP = 10
ROUNDS = 2

SERVER = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        def do_GET(self):
            body = b"ok " + self.path.encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass

    s = ThreadingHTTPServer(("127.0.0.1", 0), H)
    print(s.server_address[1], flush=True)
    s.serve_forever()
    """
)

CLIENT = textwrap.dedent(
    """
    import http.client, json, sys, time
    host, port, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    n, warm = int(sys.argv[4]), int(sys.argv[5])
    conn = http.client.HTTPConnection(host, port, timeout=30)
    samples = []
    for i in range(n + warm):
        t0 = time.perf_counter()
        conn.request("GET", f"{target}/r{i}")
        resp = conn.getresponse()
        body = resp.read()
        dt = time.perf_counter() - t0
        assert resp.status == 200 and body.startswith(b"ok "), (resp.status, body)
        if i >= warm:
            samples.append(dt)
    print(json.dumps(samples))
    """
)


def _client(host: str, port: int, target: str, requests: int, warmup: int) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, host, str(port), target, str(requests), str(warmup)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    samples: list[float] = json.loads(out.stdout)
    return samples


def run(profiler: cProfile.Profile | None = None) -> Result:
    requests, warmup = sized(REQUESTS, QUICK_REQUESTS), sized(WARMUP, QUICK_WARMUP)
    rounds = repeats_of(ROUNDS)
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        origin = f"http://127.0.0.1:{port}"
        policy = EgressPolicy(allow=[f"127.0.0.1:{port}"])
        direct, proxied = Timing(), Timing()
        with EgressRecorder(policy, name="bench") as rec:
            for _ in range(rounds):
                rec.reset()
                direct.samples += _client("127.0.0.1", port, "", requests, warmup)
                proxied.samples += _client("127.0.0.1", rec.port, origin, requests, warmup)
                recorded = rec.requests()
                assert len(recorded) == requests + warmup, len(recorded)
                assert all(r.answer == "passed" and r.status == 200 for r in recorded)
    finally:
        server.terminate()
        server.wait(timeout=10)
    added = proxied.median - direct.median
    return result(
        NAME,
        goal=GOAL,
        ours=proxied,
        baselines={"direct": direct},
        checks={"added ≤ 4 ms": added <= 0.004},
        params={
            "requests_per_round": requests,
            "rounds": rounds,
            "warmup": warmup,
            "added_ms": round(added * 1000, 3),
        },
        notes=(
            "ours = per-request latency through the recorder (allowed host: recorded and "
            "passed through); direct = the same client to the server; added = difference of "
            "medians. Plain HTTP, one keep-alive connection, client and server in their own "
            "processes."
        ),
    )
