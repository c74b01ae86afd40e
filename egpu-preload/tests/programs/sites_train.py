"""A small PyTorch training loop under torch.profiler(with_stack=True), for sites_check.py: every
kernel it launches comes from a function of this file (through torch's own frames) or from
autograd's threads, and the profiler says which, for each kernel.

    python3 sites_train.py OUT.json [STEPS]

Everything this process does on the GPU happens inside the profiler, started before the first
CUDA call and stopped after a synchronisation, so the profiler's kernels are all the kernels the
process launched. Writes OUT.json: `kernels_total` (the profiler's kernels: device events that
are not copies or sets), `kernels` (one per kernel its op launched: the kernel, the op, its
thread, the op's Python stack innermost first (kept by the profiler with `with_stack` and its
experimental config's `verbose`), and `frame`, the innermost frame outside torch/
as [file, function], or null when the op has no Python stack, as autograd's ops have none) and
`unlinked` (kernels the profiler tied to no op).
"""

import json
import re
import sys

import torch
from torch.profiler import ProfilerActivity, profile

# `path/file.py(LINE): function`, as the profiler names a Python frame (C functions and modules
# are named otherwise).
FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 10)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.fc2(h)


def batch():
    return torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")


def loss_of(model, data, target):
    return torch.nn.functional.cross_entropy(model(data), target)


def sgd_step(parameters, lr):
    with torch.no_grad():
        for p in parameters:
            p.add_(p.grad, alpha=-lr)
            p.grad = None


def train(steps):
    torch.manual_seed(0)
    model = Net().cuda()
    data, target = batch()
    losses = []
    for _ in range(steps):
        loss = loss_of(model, data, target)
        loss.backward()
        sgd_step(list(model.parameters()), 0.1)
        losses.append(loss.item())
    torch.cuda.synchronize()
    return losses


def in_torch(path):
    """Whether a frame's file is torch's: the profiler names torch's files from the package
    (`torch/nn/modules/linear.py`), others by their base name."""
    return path.startswith("torch/") or "/torch/" in path


def innermost_outside_torch(stack):
    """The innermost Python frame of `stack` (the profiler's, innermost first) whose file is not
    in torch/: [file, function], or None."""
    for entry in stack:
        m = FRAME.match(entry)
        if m and not in_torch(m.group(1)):
            # The function as its code names it (co_name), were the profiler to qualify it.
            return [m.group(1), m.group(3).rsplit(".", 1)[-1]]
    return None


def op_stack(event):
    """The Python stack of `event`'s op, or of the nearest op around it that has one."""
    while event is not None:
        if event.stack:
            return list(event.stack)
        event = event.cpu_parent
    return []


# Events of the CUDA runtime, not ops, that the profiler lists a kernel under.
RUNTIME_EVENTS = ("Lazy Function Loading", "Runtime Triggered Module Loading",
                  "Activity Buffer Request")


def is_kernel(name):
    return not name.startswith(("Memcpy", "Memset"))


def main():
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if not torch.cuda.is_available():
        print("skipped: no CUDA device", flush=True)
        return 77
    # The ops' Python stacks are kept only with `verbose` (KinetoEvent's python_stack_).
    options = {}
    try:
        from torch._C._profiler import _ExperimentalConfig
        options["experimental_config"] = _ExperimentalConfig(verbose=True)
    except (ImportError, TypeError) as e:
        print(f"warning: no verbose experimental config ({e!r}); stacks may be empty",
              flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 **options) as prof:
        losses = train(steps)
    events = prof.events()
    total = [e.name for e in events
             if e.device_type == torch.autograd.DeviceType.CUDA and is_kernel(e.name)]
    # The thread that runs Python: the first op's (the profiler starts on it). Autograd's engine
    # runs the backward ops on threads of its own, which run no Python code: their kernels have
    # no Python frame, though the profiler gives their ops the stack of the forward op they
    # differentiate.
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    python_thread = min(cpu, key=lambda e: e.time_range.start).thread if cpu else None
    kernels = []
    for e in events:
        # The CUDA runtime's loading of a module around a kernel's first launch lists that
        # kernel again, beside the op that launched it.
        if e.device_type != torch.autograd.DeviceType.CPU or e.name in RUNTIME_EVENTS:
            continue
        for k in e.kernels:
            if not is_kernel(k.name):
                continue
            stack = op_stack(e) if e.thread == python_thread else []
            kernels.append({"name": k.name, "op": e.name, "thread": e.thread,
                            "frame": innermost_outside_torch(stack), "stack": stack[:40]})
    linked = {}
    for k in kernels:
        linked[k["name"]] = linked.get(k["name"], 0) + 1
    unlinked = []
    for name in total:
        if linked.get(name, 0) > 0:
            linked[name] -= 1
        else:
            unlinked.append(name)
    with open(out, "w") as f:
        json.dump({"kernels_total": len(total), "kernels": kernels, "unlinked": unlinked,
                   "python_thread": python_thread,
                   "losses": losses, "torch": torch.__version__,
                   "python": sys.version.split()[0]}, f, indent=1)
    print(f"profiler: {len(total)} kernels, {len(kernels)} tied to an op, losses {losses}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
