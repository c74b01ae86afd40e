"""Checks that egpu attributes each request of the example service to exactly its own kernels
(issue 28, part 5): runs server.py under `egpu run --otlp` with a local OTLP receiver (here,
decoding OTLP/HTTP protobuf with a few lines of its own), sends R concurrent requests with
distinct `traceparent` headers (client.py), stops the server, and compares, for each request,
the spans that arrived under its trace id with what the server says the request launched: as
many spans as kernels, the same kernel names (as multisets), each span's parent the request's
span id, each span's `egpu.tag_id` the request's number, every span id distinct; and no span
under a trace id no request had. Prints per request what differs, then

    request attribution exact: R/R requests

and exits 0 only then.

On the GPU machine (PyTorch on CUDA; the lead's release `egpu`, built with `--features otlp`,
and `libegpu_preload.so`):

    EGPU_REQUIRE_GPU=1 python3 examples/service/check.py --backend torch \
        --egpu PATH/egpu --preload PATH/libegpu_preload.so --requests 16 --out DIR

Without a GPU (what tests/cli_service.rs runs): `--backend stand-in --driver DIR/libcuda.so.1`,
egpu-preload's stand-in driver built from egpu-preload/tests/fixture/fake_cuda.c.

With torch, what a request launched is the profiler's list of one inference's kernels
(server.py says how), with their demangled names; egpu names a span by the kernel's symbol as
the driver gives it, mangled and kept to 127 bytes, which no demangler accepts. So names are
compared by their key (`kernel_key`): the qualified name without template arguments and
parameters, anonymous namespaces left out (`at::native::vectorized_layer_norm_kernel`); the
counts are compared either way, and `request attribution by count` says how many requests
match by count alone.
`--out DIR` keeps the server's output, egpu's standard error, every `/v1/traces` body received
(`traces-N.pb`), `expected.json` (per request: trace id, span id, tag, kernels) and `run.json`;
`--from DIR` compares them again without running anything.
"""

import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import client  # noqa: E402

# --- OTLP/HTTP protobuf, decoded by field number (opentelemetry-proto's trace.proto) ---------


def _varint(data, i):
    value, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def fields(data):
    """A protobuf message's fields: {number: [value, ...]}, a value being an int (varint,
    fixed64, fixed32) or bytes (length-delimited)."""
    out = collections.defaultdict(list)
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = int.from_bytes(data[i:i + 8], "little"), i + 8
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = bytes(data[i:i + n]), i + n
        elif wire == 5:
            value, i = int.from_bytes(data[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        out[number].append(value)
    return out


def _attributes(kvs):
    """KeyValue messages: {key: str or int}."""
    attrs = {}
    for kv in kvs:
        f = fields(kv)
        key = f[1][0].decode() if f[1] else ""
        value = fields(f[2][0]) if f[2] else {}
        if 1 in value:
            attrs[key] = value[1][0].decode()
        elif 3 in value:
            v = value[3][0]
            attrs[key] = v - (1 << 64) if v >= 1 << 63 else v
    return attrs


def spans(body):
    """The spans of an ExportTraceServiceRequest, as dicts."""
    out = []
    for rs in fields(body)[1]:
        rsf = fields(rs)
        resource = _attributes(fields(rsf[1][0])[1]) if rsf[1] else {}
        for ss in rsf[2]:
            for s in fields(ss)[2]:
                f = fields(s)
                out.append({
                    "trace_id": f[1][0].hex() if f[1] else "",
                    "span_id": f[2][0].hex() if f[2] else "",
                    "parent": f[4][0].hex() if f[4] else "",
                    "name": f[5][0].decode() if f[5] else "",
                    "start": f[7][0] if f[7] else 0,
                    "end": f[8][0] if f[8] else 0,
                    "attributes": _attributes(f[9]),
                    "pid": resource.get("process.pid"),
                })
    return out


class Receiver:
    """A local OTLP/HTTP receiver: keeps every `/v1/traces` body; answers 200 to all."""

    def __init__(self):
        self.bodies = []
        self.paths = collections.Counter()
        received = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.paths[self.path] += 1
                if self.path == "/v1/traces":
                    received.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self):
        return [s for body in list(self.bodies) for s in spans(body)]


# --- the run ---------------------------------------------------------------------------------


def kernel_key(name):
    """A kernel's qualified name without its template arguments and parameters, anonymous
    namespaces left out: `at::native::vectorized_layer_norm_kernel`. egpu names a kernel as the
    driver does (mangled, kept to its first 127 bytes, which a demangler then refuses), the
    profiler demangled; both give the same key."""
    if name.startswith("_Z"):
        rest = name[2:]
        nested = rest.startswith("N")
        rest = rest[1:] if nested else rest
        parts = []
        while rest[:1].isdigit():
            digits = len(rest) - len(rest.lstrip("0123456789"))
            n = int(rest[:digits])
            parts.append(rest[digits:digits + n])
            rest = rest[digits + n:]
            if not nested:
                break
        parts = [p for p in parts if not p.startswith("_GLOBAL__N")]
        return "::".join(parts) if parts else name
    text = name[5:] if name.startswith("void ") else name
    text = text.replace("(anonymous namespace)::", "")
    cut = min([i for i in (text.find("<"), text.find("(")) if i >= 0] or [len(text)])
    parts = [p for p in text[:cut].split("::") if p]
    return "::".join(parts) if parts else name


def server_port(stdout, lines, timeout):
    """Reads the server's output (through egpu run) until `listening PORT`; keeps every line."""
    port = []

    def read():
        for line in stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("listening ") and not port:
                port.append(int(line.split()[1]))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not port and time.monotonic() < deadline:
        time.sleep(0.05)
    return port[0] if port else None


def compare(expected, got, names_of):
    """Per request, what differs between what it launched and its spans ([] when exact), by
    names and by count; and the spans under no request's trace id."""
    by_trace = collections.defaultdict(list)
    for s in got:
        by_trace[s["trace_id"]].append(s)
    span_ids = collections.Counter(s["span_id"] for s in got)
    results = []
    for e in expected:
        mine = by_trace.pop(e["trace_id"], [])
        wrong = []
        if len(mine) != len(e["kernels"]):
            wrong.append(f"{len(mine)} spans for {len(e['kernels'])} kernels")
        by_count = not wrong
        want = collections.Counter(names_of(k) for k in e["kernels"])
        have = collections.Counter(names_of(s["name"]) for s in mine)
        if want != have:
            wrong.append(f"kernels missing {dict(want - have)}, not its own {dict(have - want)}")
        for s in mine:
            if s["parent"] != e["span_id"]:
                wrong.append(f"span {s['span_id']} parented by {s['parent']}")
            if s["attributes"].get("egpu.tag_id") != e["tag"]:
                wrong.append(f"span {s['span_id']} tag {s['attributes'].get('egpu.tag_id')}")
            if span_ids[s["span_id"]] != 1 or s["span_id"] in ("", "0" * 16):
                wrong.append(f"span id {s['span_id']!r} not its own")
            if not 0 < s["start"] <= s["end"]:
                wrong.append(f"span {s['span_id']} times {s['start']}..{s['end']}")
        results.append((e, wrong, by_count))
    return results, by_trace


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--egpu", help="the egpu binary (built with otlp)")
    parser.add_argument("--preload", help="libegpu_preload.so")
    parser.add_argument("--backend", choices=["torch", "stand-in"], default="torch")
    parser.add_argument("--driver", help="the stand-in driver, for --backend stand-in")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--timeout", type=float, default=240.0,
                        help="seconds for the whole run (start-up, requests, exit)")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="one more argument for server.py (e.g. --untagged)")
    parser.add_argument("--out", help="a folder for what the run received and printed")
    parser.add_argument("--from", dest="again", metavar="DIR",
                        help="compare what an earlier run left in DIR (its --out) again, "
                        "without running anything")
    args = parser.parse_args()
    if args.again:
        return report(args.again)
    if not args.egpu or not args.preload:
        parser.error("--egpu and --preload are needed to run")
    if args.backend == "torch":
        probe = subprocess.run(
            [args.python, "-c", "import torch; print(torch.cuda.is_available())"],
            capture_output=True, text=True, timeout=120)
        if probe.stdout.strip() != "True":
            print(f"skipped: no torch with CUDA for {args.python} "
                  f"({(probe.stdout + probe.stderr).strip()[-200:]})")
            return 1 if os.environ.get("EGPU_REQUIRE_GPU") == "1" else 0
    out = args.out or tempfile.mkdtemp(prefix="egpu-service-")
    os.makedirs(out, exist_ok=True)
    deadline = time.monotonic() + args.timeout

    receiver = Receiver()
    command = [args.egpu, "run", "--library", args.preload, "--otlp", receiver.url,
               "--otlp-every", "0.5", "--", args.python, os.path.join(HERE, "server.py"),
               "--backend", args.backend]
    env = dict(os.environ)
    if args.backend == "stand-in":
        if not args.driver:
            parser.error("--backend stand-in needs --driver")
        command += ["--driver", args.driver]
        env["LD_LIBRARY_PATH"] = os.path.dirname(os.path.abspath(args.driver)) + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    command += args.server_arg
    print("running:", " ".join(command), flush=True)
    stderr = open(os.path.join(out, "egpu-run.stderr"), "w")
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    lines = []
    failures = []
    results = []
    try:
        port = server_port(server.stdout, lines, max(1.0, deadline - time.monotonic()))
        if port is None:
            failures.append("the server did not say `listening PORT` in time")
        else:
            url = f"http://127.0.0.1:{port}"
            results = client.send(url, args.requests,
                                  timeout=max(5.0, min(120.0, deadline - time.monotonic())))
            for r in results:
                if "error" in r:
                    failures.append(f"request {r['request']}: {r['error']}")
            try:
                req = urllib.request.Request(f"{url}/quit", data=b"{}", method="POST")
                with urllib.request.urlopen(req, timeout=30) as r:
                    print("server:", r.read().decode(), flush=True)
            except Exception as e:  # noqa: BLE001
                failures.append(f"/quit: {e!r}")
        try:
            code = server.wait(timeout=max(1.0, deadline - time.monotonic()))
            if code != 0:
                failures.append(f"egpu run exited {code}")
        except subprocess.TimeoutExpired:
            failures.append("egpu run did not end in time; killed")
            server.kill()
            server.wait()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        stderr.close()
        receiver.server.shutdown()
    time.sleep(0.2)

    with open(os.path.join(out, "server.out"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for i, body in enumerate(receiver.bodies):
        with open(os.path.join(out, f"traces-{i}.pb"), "wb") as f:
            f.write(body)
    expected = [{"request": r["request"], "trace_id": r["trace_id"], "span_id": r["span_id"],
                 "tag": r["request"], "kernels": r["answer"]["kernels"],
                 "tags_seen": r["answer"]["tags"], "thread": r["answer"]["thread"]}
                for r in results if "answer" in r]
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    with open(os.path.join(out, "run.json"), "w") as f:
        json.dump({"backend": args.backend, "requests": args.requests,
                   "posts": dict(receiver.paths), "failures": failures}, f, indent=1)
    return report(out)


def report(out):
    """Compares what a run left in `out` (its expected.json, traces-N.pb, run.json, server.out
    and egpu-run.stderr) and prints the result: 0 when every request is exact."""
    with open(os.path.join(out, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(out, "expected.json")) as f:
        expected = json.load(f)
    got = []
    for path in sorted(glob.glob(os.path.join(out, "traces-*.pb"))):
        with open(path, "rb") as f:
            got += spans(f.read())
    with open(os.path.join(out, "server.out")) as f:
        lines = f.read().splitlines()
    with open(os.path.join(out, "egpu-run.stderr")) as f:
        err = f.read().strip()
    requests, failures = run["requests"], list(run["failures"])
    # With torch, the server's kernels are the profiler's names, the spans' the driver's.
    key = kernel_key if run["backend"] == "torch" else (lambda n: n)
    compared, strays = compare(expected, got, key)
    print(f"server output ({len(lines)} lines):")
    for line in lines[-20:]:
        print("  " + line)
    print(f"OTLP posts: {run['posts']}; spans received: {len(got)}; "
          f"kernels the requests launched: {sum(len(e['kernels']) for e in expected)}")
    if err:
        print("egpu run's standard error (last lines):")
        for line in err.splitlines()[-15:]:
            print("  " + line)
    exact = by_count = 0
    for e, wrong, counted in compared:
        by_count += counted
        seen = e["tags_seen"]
        if [seen[1], seen[2], seen[0]] != [e["trace_id"], e["span_id"], e["tag"]]:
            wrong.append(f"the server's thread had tags {seen}")
        if wrong:
            print(f"request {e['request']} (trace {e['trace_id']}): " + "; ".join(wrong[:6]))
        else:
            exact += 1
    for trace, stray in strays.items():
        print(f"{len(stray)} spans under trace {trace!r}, no request's: "
              f"{[s['name'] for s in stray[:5]]}")
        failures.append(f"spans under no request's trace id ({trace})")
    for f in failures:
        print("failure:", f)
    threads = len({e["thread"] for e in expected})
    print(f"requests: {requests} sent, {len(expected)} answered, on {threads} threads")
    if run["backend"] == "torch":
        print(f"request attribution by count: {by_count}/{requests} requests")
    print(f"request attribution exact: {exact}/{requests} requests")
    print(f"(files in {out})")
    return 0 if exact == requests and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
