"""The stand-ins of bench_preload.py --fake: a torch module and an `egpu` program that check the
harness's training section without a GPU, PyTorch or egpu (see bench_preload.py)."""

import os
import sys

FAKE_TORCH = '''"""A stand-in for torch (bench_preload.py --fake): a step spins for 1/600 s times a
factor of the process (+-1%), a drift of the machine (+-4% over about a minute) and
EGPU_FAKE_FACTOR (the fake egpu's); one step in 500 stalls for 10 ms."""
import math, os, random, time
_rng = random.Random()
_SPEED = 600 * _rng.gauss(1, 0.01) * float(os.environ.get("EGPU_FAKE_FACTOR", "1"))
class _T:
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return self
    def cuda(self): return self
    def parameters(self): return []
    def detach(self): return self
    def item(self): return 0.5
    def zero_grad(self, **k): pass
    def step(self): pass
    def backward(self):
        s = 1 / (_SPEED * (1 + 0.04 * math.sin(time.time() / 10)))
        end = time.perf_counter() + s + (0.01 if _rng.random() < 0.002 else 0)
        while time.perf_counter() < end: pass
class nn:
    Linear = ReLU = Sequential = _T
    class functional:
        mse_loss = _T()
class optim:
    SGD = _T
class cuda:
    synchronize = staticmethod(lambda: None)
def manual_seed(seed): pass
def randn(*a, **k): return _T()
'''

FAKE_EGPU = '''import os, sys
args = sys.argv[1:]
assert args[0] == "run" and "--" in args, args
os.environ["EGPU_FAKE_FACTOR"] = "0.97" if "--metrics" in args else "1"
cmd = args[args.index("--") + 1:]
os.execvp(cmd[0], cmd)
'''


def setup_fake(args):
    """--fake: writes WORK/fake/torch.py and WORK/fake/egpu (above), points --egpu at the
    latter, and leaves the training section alone to run; the directory for PYTHONPATH."""
    fake = os.path.join(os.path.abspath(args.work), "fake")
    os.makedirs(fake, exist_ok=True)
    with open(os.path.join(fake, "torch.py"), "w") as f:
        f.write(FAKE_TORCH)
    args.egpu, args.pack = os.path.join(fake, "egpu"), os.path.join(fake, "no-pack")
    with open(args.egpu, "w") as f:
        f.write(f"#!{sys.executable or '/usr/bin/env python3'}\n" + FAKE_EGPU)
    os.chmod(args.egpu, 0o755)
    args.skip_kernels = args.skip_latency = True
    print(f"=== --fake: a stand-in torch and egpu in {fake}; training only", flush=True)
    return fake
