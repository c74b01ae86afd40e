"""A small HTTP inference server whose requests are tagged for egpu (issue 28, part 5).

Each request is handled on a thread of its own (the standard library's ThreadingHTTPServer);
the handler sets that thread's egpu tags from the request, the request number as the tag id and
the W3C trace context of its `traceparent` header, then runs the model on the same thread. Under
`egpu run --otlp`, every kernel it launches becomes a span of the request's trace, parented by
the request's span; without egpu the tags do nothing and the server runs the same.

    python3 server.py --backend torch                 # a small MLP on CUDA (PyTorch)
    python3 server.py --backend stand-in --driver DIR/libcuda.so.1
                                                      # kernels launched through ctypes into
                                                      # egpu-preload's stand-in driver (CI)

It prints `listening PORT` once it serves (`--port 0`: any free port). Requests:

- `POST /infer`, headers `traceparent` (optional), body JSON `{"request": N, "input": [...]}`:
  runs the model; the answer, JSON, says what this request launched (`kernels`, in order, as
  the backend knows them), its tags as the thread had them (`tags`: tag id, trace id and span id
  in hexadecimal), the thread and the time it took.
- `POST /quit`: answers, then the server stops and exits 0.

`--untagged` serves without setting any tags: the kernels run the same, and egpu has nothing to
attribute them to (what check.py must then find wrong).

What each backend says it launched:

- `stand-in`: the kernels it launched itself, through `cuLaunchKernel` of the driver given (a
  request launches 2 to 5 kernels, chosen by its number, a millisecond apart, so that
  concurrent requests interleave).
- `torch`: the kernels of one inference, from PyTorch's profiler: at start-up the model runs
  twice on a thread of its own (kernels loaded, cuBLAS handles made), then once more under
  `torch.profiler` (CUDA activity), on a fresh thread as a request would be. With fixed shapes
  the kernels of an inference do not change from one to the next, so every request launches
  those (`--batch`, `--width` set the shapes).
"""

import argparse
import ctypes
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import egpu_tags  # noqa: E402


class StandIn:
    """Launches the stand-in driver's kernels through ctypes, as a CUDA program would."""

    KERNELS = ["_Z5kernAPf", "_Z5kernBPf", "kernC"]

    def __init__(self, driver):
        # CDLL: each call releases the GIL, so requests' launches run concurrently.
        self.cuda = ctypes.CDLL(driver)
        self.cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p] * 3
        self.cuda.cuLaunchKernel.restype = ctypes.c_int
        if self.cuda.cuInit(0) != 0:
            raise RuntimeError("cuInit failed")
        self.functions = {}
        for name in self.KERNELS:
            f = ctypes.c_void_p()
            if self.cuda.cuModuleGetFunction(ctypes.byref(f), None, name.encode()) != 0:
                raise RuntimeError(f"no kernel {name} in {driver}")
            self.functions[name] = f

    def plan(self, request):
        """The kernels request `request` launches: 2 to 5, by its number."""
        n = 2 + request % 4
        return [self.KERNELS[(request + i) % len(self.KERNELS)] for i in range(n)]

    def infer(self, request, inputs):
        launched = []
        for name in self.plan(request):
            r = self.cuda.cuLaunchKernel(self.functions[name], 1, 1, 1, 32, 1, 1, 0, None, None,
                                         None)
            if r != 0:
                raise RuntimeError(f"cuLaunchKernel({name}) = {r}")
            launched.append(name)
            time.sleep(0.001)
        return launched, sum(inputs)


class Torch:
    """A small MLP with random weights on CUDA: two matmuls, a bias, ReLU, layer norm, softmax."""

    def __init__(self, batch, width):
        import torch
        self.torch = torch
        self.batch, self.width = batch, width
        g = torch.Generator().manual_seed(0)
        dev = "cuda"
        self.w1 = (torch.randn(width, 4 * width, generator=g) / width**0.5).to(dev)
        self.b1 = torch.zeros(4 * width).to(dev)
        self.w2 = (torch.randn(4 * width, 16, generator=g) / (4 * width)**0.5).to(dev)
        self.kernels = self._profile()

    def _model(self, inputs):
        torch = self.torch
        with torch.inference_mode():
            x = torch.tensor(inputs, dtype=torch.float32).to("cuda", non_blocking=False)
            x = x.view(self.batch, self.width)
            h = torch.relu(x @ self.w1 + self.b1)
            h = torch.nn.functional.layer_norm(h, (h.shape[-1],))
            p = torch.softmax(h @ self.w2, dim=-1)
            return p.argmax(dim=-1).tolist()

    def sample(self):
        return [float(i % 7) for i in range(self.batch * self.width)]

    def _on_a_thread(self, function):
        out = []
        t = threading.Thread(target=lambda: out.append(function()))
        t.start()
        t.join()
        return out[0]

    def _profile(self):
        """The kernels of one inference, in order, as PyTorch's profiler names them."""
        from torch.profiler import ProfilerActivity, profile
        for _ in range(2):
            self._on_a_thread(lambda: self._model(self.sample()))
        self.torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            self._on_a_thread(lambda: self._model(self.sample()))
            self.torch.cuda.synchronize()
        events = [e for e in prof.events()
                  if e.device_type == self.torch.autograd.DeviceType.CUDA
                  and not e.name.startswith(("Memcpy", "Memset"))]
        events.sort(key=lambda e: e.time_range.start)
        return [e.name for e in events]

    def plan(self, request):
        return list(self.kernels)

    def infer(self, request, inputs):
        if len(inputs) != self.batch * self.width:
            inputs = self.sample()
        return list(self.kernels), self._model(inputs)


class Handler(BaseHTTPRequestHandler):
    backend = None
    untagged = False
    lock = threading.Lock()
    in_flight = 0
    most_in_flight = 0

    def log_message(self, *args):
        pass

    def _answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/quit":
            self._answer(200, {"most_in_flight": Handler.most_in_flight})
            threading.Thread(target=self.server.shutdown).start()
            return
        if self.path != "/infer":
            self._answer(404, {"error": f"no {self.path}"})
            return
        request = int(body.get("request", 0))
        header = self.headers.get("traceparent")
        with Handler.lock:
            Handler.in_flight += 1
            Handler.most_in_flight = max(Handler.most_in_flight, Handler.in_flight)
        start = time.monotonic()
        try:
            if Handler.untagged:
                kernels, output = self.backend.infer(request, body.get("input") or [])
                self._answer(200, {"request": request, "kernels": kernels, "output": output,
                                   "tags": [request, header.split("-")[1], header.split("-")[2]],
                                   "thread": threading.get_ident()})
                return
            with egpu_tags.tag(request):
                trace = egpu_tags.traceparent(header) if header else egpu_tags.trace(0, 0)
                with trace:
                    tag_id, trace_id, span_id = egpu_tags.current()
                    kernels, output = self.backend.infer(request, body.get("input") or [])
        except ValueError as e:  # a malformed traceparent
            self._answer(400, {"error": str(e)})
            return
        finally:
            with Handler.lock:
                Handler.in_flight -= 1
        self._answer(200, {
            "request": request,
            "kernels": kernels,
            "output": output,
            "tags": [tag_id, f"{trace_id:032x}", f"{span_id:016x}"],
            "thread": threading.get_ident(),
            "seconds": time.monotonic() - start,
        })


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["torch", "stand-in"], default="torch")
    parser.add_argument("--driver", help="the stand-in driver (libcuda.so.1) for --backend "
                        "stand-in")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--untagged", action="store_true", help="set no tags (a fault)")
    args = parser.parse_args()
    Handler.untagged = args.untagged
    if args.backend == "stand-in":
        if not args.driver:
            parser.error("--backend stand-in needs --driver")
        Handler.backend = StandIn(args.driver)
    else:
        Handler.backend = Torch(args.batch, args.width)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"egpu tags {'on' if egpu_tags.available() else 'off (not under egpu)'}", flush=True)
    if args.backend == "torch":
        print(f"kernels per request ({len(Handler.backend.kernels)}): "
              + ", ".join(Handler.backend.kernels), flush=True)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()
    server.server_close()
    print(f"stopped; most requests in flight at once: {Handler.most_in_flight}", flush=True)


if __name__ == "__main__":
    main()
