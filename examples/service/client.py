"""Sends R concurrent requests to the example service (server.py), each with a W3C `traceparent`
header of its own (a random trace id and parent span id), and prints one JSON line per request:
its number, trace id, span id and the server's answer (what it launched, the tags it had).

    python3 client.py --url http://127.0.0.1:PORT --requests 16

check.py imports `send` from here; exits 1 when a request fails.
"""

import argparse
import json
import random
import sys
import threading
import urllib.request


def traceparent(rng):
    """A W3C trace context: (header, trace id hex, span id hex), neither id all zeros."""
    trace = f"{rng.getrandbits(128) | 1:032x}"
    span = f"{rng.getrandbits(64) | 1:016x}"
    return f"00-{trace}-{span}-01", trace, span


def send(url, requests, inputs=None, seed=None, timeout=60.0):
    """Sends `requests` requests at once (one thread each, started together); returns, in
    request order, dicts with `request`, `trace_id`, `span_id`, `answer` (the server's JSON) or
    `error`."""
    rng = random.Random(seed)
    results = [None] * requests
    start = threading.Barrier(requests)

    def one(i):
        header, trace, span = traceparent(rng_for[i])
        body = json.dumps({"request": i + 1, "input": inputs or []}).encode()
        req = urllib.request.Request(f"{url}/infer", data=body, method="POST", headers={
            "traceparent": header, "Content-Type": "application/json"})
        result = {"request": i + 1, "trace_id": trace, "span_id": span}
        try:
            start.wait(timeout)
            with urllib.request.urlopen(req, timeout=timeout) as r:
                result["answer"] = json.loads(r.read())
        except Exception as e:  # noqa: BLE001 - reported per request
            result["error"] = repr(e)
        results[i] = result

    rng_for = [random.Random(rng.getrandbits(64)) for _ in range(requests)]
    threads = [threading.Thread(target=one, args=(i,)) for i in range(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return [r or {"request": i + 1, "error": "no answer in time"} for i, r in enumerate(results)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    results = send(args.url.rstrip("/"), args.requests, seed=args.seed)
    for r in results:
        print(json.dumps(r), flush=True)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
