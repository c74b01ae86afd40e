"""`egpu mem` in real programs: each program runs bare and under `egpu mem run` (the `counts`
and `timing` sets), and what the recordings say is compared with what the program says of
itself. Run on the GPU machine by target/gpu-bundle/run.sh (the `mem-programs` item); it needs
nvcc, PyTorch and Triton there.

    python3 mem_check.py --egpu bin/egpu --work DIR [--keep OUT] [--only NAME]
    python3 mem_check.py --self-test          (no GPU: the parsers and the verdicts)

The programs: mem_timing.cu (saxpy over 2^28 floats, blocks that end at different times, a tiny
kernel launched directly and from a graph, each launch between CUDA events), and the coverage
check's programs (device_check.py: Triton, torch.compile, CUDA C with graphs and every way of
loading a module). Each prints what its kernels move (`expect bytes`) and, mem_timing.cu, each
launch's time by CUDA events (`expect times NAME ms ...`, in launch order). Checked:

- bytes: per kernel and class (load, store, atomic, async copy), the recording's `traffic`
  against the program's figures, exactly; and again, for the programs `--every` names
  (`mem-timing`, the Triton matmul and histogram by default; `all`), with every set at once
  (`counts`, `timing`, `pattern`, `pages`, `timeline`), whose probes must not change the counts;
  and, for the programs `--pages` names (`mem-timing`), under `counts,pages` `--pages-runs`
  times (4), every run exact (a loss there came and went from run to run);
- durations: per launch, egpu's GPU time (`launch` lines, by kernel in `%gridid` order, from
  the program's `first`) within 5% of the events' or within the events' floor (an empty
  kernel's event time, which the program prints: what the events add around any launch);
- bandwidth: per kernel timed, bytes per launch over egpu's mean duration against the same
  bytes over the events' mean, within 5%;
- event durations (a program that prints `expect times`, run again under `--kernel-times`): per
  kernel, the mean GPU time per launch of the CUDA events egpu records around each launch
  (`event_ns` over `event_launches`) within 5% of the program's own events' mean, or the floor;
- pattern (a program that prints `expect pattern NAME load SECTORS`, run again under
  `--sets pattern`): the sectors per warp-level request of the kernel's loads, exactly; and
  (`expect stride NAME load CLASS`) that one of the kernel's load sites mostly has that stride
  class: `unit`, a stride in bytes, or `gather` (no one stride);
- timeline (a program that prints `expect phases NAME`, run again under `--sets
  counts,timeline`: mem_timeline.py): the kernel's windows show its two phases and sum to its
  bytes within the sampling's error.

It prints, over all programs, `bytes exact: K/K kernels`, `bytes exact with every set: K/K
kernels`, `durations within 5%: K/K kernels`,
`bandwidth within 5%: K/K kernels`, `event durations within 5%: K/K kernels` and
`pattern exact: K/K kernels`, `registers as loaded: K/K kernels` (each instrumented kernel's
registers per thread as the driver loaded it, recorded) (and `counts beside pages: K/K runs
exact` and `pages exact: K/K kernels`: each kernel's accesses over its pages are its requests),
and fails when any
is not K/K, K is 0, results differ or a run fails. With --keep, the recordings are copied there (a folder per program).
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import device_check  # noqa: E402 (the coverage check's programs, parsers and verdicts)
import mem_timeline  # noqa: E402 (the timeline set's check)

CLASSES = device_check.CLASSES
# The events' floor when the program does not print one, in microseconds.
FLOOR_US = 5.0


def recordings(folder):
    """The recordings in `folder`: [(header, kernels, launches, sites)]."""
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.egpumem"))):
        header, kernels, launches, sites = None, [], [], []
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                kind = rec.pop("type")
                if kind == "header":
                    header = rec
                elif kind == "kernel":
                    kernels.append(rec)
                elif kind == "launch":
                    launches.append(rec)
                elif kind == "site":
                    sites.append(rec)
        out.append((header, kernels, launches, sites))
    return out


def traffic_maps(recs):
    """The recordings' traffic as device_check's map counts, {(MAP, kernel name): bytes}, so
    that its verdicts apply unchanged."""
    maps = {}
    fields = {"LOADED": "loaded", "STORED": "stored", "ATOMIC": "atomic", "ASYNC": "async",
              "TENSOR_LOADED": "tensor_loaded", "TENSOR_STORED": "tensor_stored"}
    for _, kernels, _, _ in recs:
        for k in kernels:
            t = k.get("traffic")
            if not t:
                continue
            # Under its name, or its id (in decimal, as device_check looks kernels up by either,
            # summing both) when egpu did not learn the name.
            key = k["name"] or str(int(k["id"], 16))
            for m, field in fields.items():
                maps[(m, key)] = maps.get((m, key), 0) + t.get(field, 0)
    return maps


def expected_times(text):
    """({kernel: (first, [ms per launch])}, floor in µs) from `expect times NAME first F ms ...`
    and `expect floor US` lines."""
    out, floor = {}, FLOOR_US
    for line in text.splitlines():
        w = line.split()
        if w[:2] == ["expect", "times"] and len(w) >= 5 and w[3] == "first":
            out[w[2]] = (int(w[4]), [float(v) for v in w[5:]])
        elif w[:2] == ["expect", "floor"] and len(w) == 3:
            floor = float(w[2])
    return out, floor


def expected_patterns(text):
    """{(kernel, access): sectors per request} from `expect pattern NAME ACCESS SECTORS` lines."""
    out = {}
    for line in text.splitlines():
        w = line.split()
        if w[:2] == ["expect", "pattern"] and len(w) == 5:
            out[(w[2], w[3])] = float(w[4])
    return out


def expected_strides(text):
    """{(kernel, access): class} from `expect stride NAME ACCESS CLASS` lines: `unit`,
    `gather`, `one` (one address) or a stride in bytes."""
    out = {}
    for line in text.splitlines():
        w = line.split()
        if w[:2] == ["expect", "stride"] and len(w) == 5:
            out[(w[2], w[3])] = w[4]
    return out


def stride_classes(recs):
    """{(kernel name, access): {class of each site: requests}}: a site's class is the one most
    of its requests had (`unit`, `gather`, `one`, or the mean stride in bytes)."""
    out = {}
    for _, kernels, _, sites in recs:
        names = {k["id"]: k["name"] for k in kernels}
        for s in sites:
            counts = {"one": s.get("broadcast", 0), "unit": s.get("unit", 0),
                      "gather": s.get("gather", 0), "strided": s.get("strided", 0)}
            cls = max(counts, key=counts.get)
            if counts[cls] == 0:
                continue
            if cls == "strided":
                cls = str(round(s.get("stride_bytes", 0) / counts["strided"]))
            key = (names.get(s["kernel"], s["kernel"]), s.get("access", "?"))
            out.setdefault(key, {})
            out[key][cls] = out[key].get(cls, 0) + s["requests"]
    return out


def patterns(recs):
    """{(kernel name, access): sectors per request} over each kernel's sites of that access."""
    sums = {}
    for _, kernels, _, sites in recs:
        names = {k["id"]: k["name"] for k in kernels}
        for s in sites:
            key = (names.get(s["kernel"], s["kernel"]), s.get("access", "?"))
            requests, sectors = sums.get(key, (0, 0))
            sums[key] = (requests + s["requests"], sectors + s["sectors"])
    return {k: sectors / requests for k, (requests, sectors) in sums.items() if requests}


def durations(recs):
    """{kernel name: [ns per launch, in %gridid order]}."""
    out = {}
    for _, kernels, launches, _ in recs:
        names = {k["id"]: k["name"] for k in kernels}
        for l in sorted(launches, key=lambda l: l["grid"]):
            name = names.get(l["kernel"], l["kernel"])
            out.setdefault(name, []).append(l["end_ns"] - l["start_ns"])
    return out


def event_means(recs):
    """{kernel name: mean ns per launch from egpu's CUDA events (`--kernel-times`)}."""
    sums = {}
    for _, kernels, _, _ in recs:
        for k in kernels:
            if k.get("event_launches"):
                n, ns = sums.get(k["name"], (0, 0))
                sums[k["name"]] = (n + k["event_launches"], ns + k["event_ns"])
    return {name: ns / n for name, (n, ns) in sums.items()}


def event_verdicts(times, floor, means):
    """[(kernel, events' mean µs, egpu's events' mean µs, ok)]: within 5% or the floor."""
    out = []
    for name, (_, want) in times.items():
        ev = sum(want) / len(want) * 1000.0 if want else 0.0
        eg = means.get(name)
        ok = eg is not None and abs(eg / 1000.0 - ev) <= max(0.05 * ev, floor)
        out.append((name, ev, None if eg is None else eg / 1000.0, ok))
    return out


def time_verdicts(times, floor, got, expected_bytes):
    """Rows (kernel, what was compared, worst difference, ok, [(events µs, egpu µs)]) and per
    kernel whether every duration is within 5% (or the floor), and whether the bandwidth is
    within 5%."""
    rows, within, bandwidth = [], [], []
    for name, (first, want) in times.items():
        have = got.get(name, [])[first:first + len(want)]
        if len(have) < len(want) or not want:
            rows.append((name, f"{len(have)} timed of {len(want)}", None, False, []))
            within.append(False)
            continue
        worst, ok, pairs = 0.0, True, []
        for ms, ns in zip(want, have):
            ev_us, eg_us = ms * 1000.0, ns / 1000.0
            diff = abs(eg_us - ev_us)
            ok &= diff <= max(0.05 * ev_us, floor)
            worst = max(worst, diff / ev_us if ev_us else float("inf"))
            pairs.append((ev_us, eg_us))
        rows.append((name, f"{len(want)} launches", worst, ok, pairs))
        within.append(ok)
        total = expected_bytes.get(name)
        if total and all(v is not None for v in total.values()) and sum(want) > 50 * floor / 1e3:
            runs = len(got.get(name, []))
            per = sum(v for v in total.values()) / max(runs, 1)
            ev = per / (sum(want) / len(want) / 1e3)
            eg = per / (sum(have) / len(have) / 1e9)
            bandwidth.append((name, ev, eg, abs(eg - ev) <= 0.05 * ev))
    return rows, within, bandwidth


# Every set at once: the counts must not change for what else runs.
EVERY_SET = "counts,timing,pattern,pages,timeline"


def every_set(name, command, args, env, bare, expected, out_dir, totals):
    """The bytes of `command` under every set at once, against `expected`; its failures."""
    every_dir = out_dir + "-every"
    shutil.rmtree(every_dir, ignore_errors=True)
    rc, eout, _ = device_check.run([args.egpu, "mem", "run", "--sets", EVERY_SET, "--out",
                                    every_dir, "--", *command], env)
    erows, eper_class, eexact = device_check.verdicts(
        expected, traffic_maps(recordings(every_dir)) if rc == 0 else {})
    for kernel, cls, want, got in erows:
        if want != got:
            print(f"  with every set, differs: {kernel} {cls} expected {want} observed {got}")
    print(f"  with every set: {device_check.exact_line(eper_class, eexact)}")
    totals["every"] += eexact
    failures = []
    if rc != 0 or not all(eexact):
        failures.append(f"{name}: bytes not exact with every set")
    if device_check.results(eout) != device_check.results(bare):
        failures.append(f"{name}: results differ with every set")
    return failures


def pages_counted(recs):
    """Per instrumented kernel of the recordings, whether the `pages` set's accesses (over all
    its pages) are the `counts` set's requests (loads, stores, atomics and async copies, each
    lane's): every access on one page, none lost to the thread's sums of page counts."""
    verdicts = []
    for _, kernels, _, _ in recs:
        for k in kernels:
            t, p = k.get("traffic"), k.get("pages")
            if not t or not p or t.get("tensor_loads") or t.get("tensor_stores"):
                continue
            want = t["loads"] + t["stores"] + t["atomics"] + t["asyncs"]
            if p["accesses"] != want:
                print(f"  pages: {k['name']} {p['accesses']} accesses, the counts say {want}")
            verdicts.append(p["accesses"] == want)
    return verdicts


def beside_pages(name, command, args, env, expected, out_dir, totals):
    """The bytes of `command` under `counts,pages`, `args.pages_runs` times: a loss there came
    and went from run to run (the `hot` kernel 30 loads short in about half of them, before
    each lane looked its kernel's value up on its own at its exit); its failures."""
    failures = []
    for run in range(args.pages_runs):
        pages_dir = f"{out_dir}-pages{run}"
        shutil.rmtree(pages_dir, ignore_errors=True)
        rc, _, _ = device_check.run([args.egpu, "mem", "run", "--sets", "counts,pages", "--out",
                                     pages_dir, "--", *command], env)
        recs = recordings(pages_dir) if rc == 0 else []
        rows, _, exact = device_check.verdicts(expected, traffic_maps(recs))
        counted = pages_counted(recs)
        totals["pages exact"] += counted
        ok = rc == 0 and all(exact) and all(counted)
        for kernel, cls, want, got in rows:
            if want != got:
                print(f"  beside pages, run {run + 1}, differs: {kernel} {cls} expected {want} "
                      f"observed {got}")
        totals["pages"].append(ok)
        if not ok:
            failures.append(f"{name}: bytes not exact beside pages (run {run + 1})")
    runs = totals["pages"][-args.pages_runs:] if args.pages_runs else []
    print(f"  counts beside pages: {sum(runs)}/{len(runs)} runs exact")
    return failures


def check_program(name, command, args, env, totals):
    env = dict(os.environ, **(env or {}))
    env.pop("LD_PRELOAD", None)
    shown = " ".join([os.path.basename(command[0]), *command[1:]])
    print(f"\n=== {name}: {shown}", flush=True)
    rc, bare, err = device_check.run(command, env)
    if rc != 0:
        print("\n".join(f"  | {l}" for l in (bare + err).splitlines()[-20:]))
        return [f"{name}: exits {rc} bare"]
    out_dir = os.path.join(args.work, f"mem-{name}")
    shutil.rmtree(out_dir, ignore_errors=True)
    prefix = os.path.join(args.work, f"summary-{name}")
    for old in glob.glob(prefix + ".*"):
        os.remove(old)
    env["EGPU_SUMMARY"] = prefix
    wrapped = [args.egpu, "mem", "run", "--out", out_dir, "--", *command]
    rc, out, err = device_check.run(wrapped, env)
    if rc != 0:
        print("\n".join(f"  | {l}" for l in (out + err).splitlines()[-30:]))
        return [f"{name}: exits {rc} under egpu mem"]
    if args.keep:
        shutil.copytree(out_dir, os.path.join(args.keep, name), dirs_exist_ok=True)
    # The tables egpu printed (after the program's own output).
    table = out[out.find("process "):] if "process " in out else ""
    print("\n".join(f"  | {l}" for l in table.splitlines()))
    recs = recordings(out_dir)
    # Each instrumented kernel's registers as the driver loaded it (cuFuncGetAttribute).
    for _, kernels, _, _ in recs:
        for k in (k for k in kernels if k.get("instrumented") and k.get("launches")):
            ok = k.get("registers", 0) > 0
            totals["registers"].append(ok)
            if not ok:
                print(f"  registers {k['name']}: none recorded")
    expected = device_check.expected_bytes(out)
    rows, per_class, exact = device_check.verdicts(expected, traffic_maps(recs))
    for kernel, cls, want, got in rows:
        if want != got:
            print(f"  differs: {kernel} {cls} expected {want} observed {got}")
    failures = []
    print(f"  {device_check.exact_line(per_class, exact)}")
    times, floor = expected_times(out)
    trows, within, bw = time_verdicts(times, floor, durations(recs), expected)
    if times:
        print(f"  events' floor (an empty kernel): {floor:.1f} us")
    for kernel, what, worst, ok, pairs in trows:
        w = f"worst {100 * worst:.2f}%" if worst is not None else ""
        shown = ", ".join(f"{ev:.1f}/{eg:.1f}" for ev, eg in pairs[:6])
        print(f"  duration {kernel}: {what} {w} {'ok' if ok else 'NOT within'} "
              f"(events/egpu us: {shown})")
    for kernel, ev, eg, ok in bw:
        print(f"  bandwidth {kernel}: events {ev / 1e9:.1f} GB/s, egpu {eg / 1e9:.1f} GB/s "
              f"({100 * (eg / ev - 1):+.2f}%) {'ok' if ok else 'NOT within'}")
    if times:
        events_dir = out_dir + "-events"
        shutil.rmtree(events_dir, ignore_errors=True)
        rc, _, _ = device_check.run([args.egpu, "mem", "run", "--kernel-times", "--out",
                                     events_dir, "--", *command], env)
        means = event_means(recordings(events_dir)) if rc == 0 else {}
        for kernel, ev, eg, ok in event_verdicts(times, floor, means):
            shown = "none" if eg is None else f"{eg:.1f}"
            print(f"  event duration {kernel}: program's events {ev:.1f} us, egpu's events "
                  f"{shown} us per launch {'ok' if ok else 'NOT within'}")
            totals["events"].append(ok)
            if not ok:
                failures.append(f"{name}: event duration of {kernel}")
    same = device_check.results(bare) == device_check.results(out) and bool(
        device_check.results(bare))
    print(f"  results identical: {'yes' if same else 'NO'}")
    _, modules, details, _ = device_check.summaries(prefix)
    print(f"  {device_check.modules_line(modules)}")
    want_patterns = expected_patterns(out)
    if want_patterns:
        pattern_dir = out_dir + "-pattern"
        shutil.rmtree(pattern_dir, ignore_errors=True)
        rc, pout, perr = device_check.run(
            [args.egpu, "mem", "run", "--sets", "pattern", "--out", pattern_dir, "--", *command],
            env)
        got = patterns(recordings(pattern_dir)) if rc == 0 else {}
        if args.keep and rc == 0:
            shutil.copytree(pattern_dir, os.path.join(args.keep, name + "-pattern"),
                            dirs_exist_ok=True)
        classes = stride_classes(recordings(pattern_dir)) if rc == 0 else {}
        for (kernel, access), want in sorted(expected_strides(out).items()):
            have = classes.get((kernel, access), {})
            ok = want in have
            totals["stride"].append(ok)
            print(f"  stride {kernel} {access}: sites' classes {have or 'none'}, expected a "
                  f"site of {want} {'ok' if ok else 'NOT found'}")
            if not ok:
                failures.append(f"{name}: stride of {kernel}")
        for (kernel, access), want in sorted(want_patterns.items()):
            have = got.get((kernel, access))
            ok = have == want
            totals["pattern"].append(ok)
            shown = f"{have:.2f}" if have is not None else "none"
            print(f"  pattern {kernel} {access}: {shown} sectors per request, expected {want:g} "
                  f"{'ok' if ok else 'NOT exact'}")
            if not ok:
                failures.append(f"{name}: pattern of {kernel}")
        table = pout[pout.find("process "):] if "process " in pout else ""
        print("\n".join(f"  | {l}" for l in table.splitlines() if "sectors per request" in l))
    # The counts stay exact whatever else runs beside them (every set at once).
    if args.every == "all" or name in args.every.split(","):
        failures += every_set(name, command, args, env, bare, expected, out_dir, totals)
    if name in args.pages.split(","):
        failures += beside_pages(name, command, args, env, expected, out_dir, totals)
    failures += mem_timeline.check(name, command, args, env, out, device_check.run, totals)
    totals["exact"] += exact
    totals["durations"] += within
    totals["bandwidth"] += [ok for *_, ok in bw]
    if not all(exact) or not all(within) or not all(ok for *_, ok in bw):
        failures.append(f"{name}: not exact or not within")
    if not same:
        failures.append(f"{name}: results differ under egpu mem (or none printed)")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--egpu")
    ap.add_argument("--work", default="/tmp/egpu-mem-programs")
    ap.add_argument("--keep", help="copy the recordings here")
    ap.add_argument("--only", default="", help="programs whose name contains this")
    ap.add_argument("--every", default="mem-timing,triton-matmul,triton-histogram",
                    help="programs run again with every set at once (names, comma-separated, "
                         "or `all`: all of them take over 10 minutes)")
    ap.add_argument("--pages", default="mem-timing",
                    help="programs run again under `counts,pages`, --pages-runs times (names, "
                         "comma-separated)")
    ap.add_argument("--pages-runs", type=int, default=4)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.egpu:
        ap.error("--egpu is needed")
    args.egpu = os.path.abspath(args.egpu)
    os.makedirs(args.work, exist_ok=True)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    timing = os.path.join(args.work, "mem_timing")
    b = subprocess.run([nvcc, "-O2", "-arch=sm_90", os.path.join(HERE, "mem_timing.cu"), "-o",
                        timing], capture_output=True, text=True)
    failures = [] if b.returncode == 0 else [f"nvcc mem_timing: {b.stderr.strip()[-400:]}"]
    programs = [("mem-timing", [timing], {})] if b.returncode == 0 else []
    coverage, more = device_check.coverage_programs(args.work)
    programs += coverage
    failures += more
    totals = {"exact": [], "durations": [], "bandwidth": [], "events": [], "pattern": [],
              "timeline": [], "every": [], "stride": [], "pages": [], "pages exact": [],
              "registers": []}
    for name, command, env in programs:
        if args.only and args.only not in name:
            continue
        try:
            failures += check_program(name, command, args, env, totals)
        except subprocess.TimeoutExpired:
            failures.append(f"{name}: timed out")
    print("\n=== egpu mem in programs")
    for what, key in (("bytes exact", "exact"), ("bytes exact with every set", "every"),
                      ("durations within 5%", "durations"),
                      ("bandwidth within 5%", "bandwidth"),
                      ("event durations within 5%", "events"), ("pattern exact", "pattern"),
                      ("stride classes", "stride"),
                      ("timeline's phases", "timeline"), ("registers as loaded", "registers")):
        got = totals[key]
        print(f"  {what}: {sum(got)}/{len(got)} kernels")
        if not got:
            failures.append(f"{what}: no kernel")
    if totals["pages"]:
        print(f"  counts beside pages: {sum(totals['pages'])}/{len(totals['pages'])} runs exact")
        exact = totals["pages exact"]
        print(f"  pages exact: {sum(exact)}/{len(exact)} kernels")
    for f in failures:
        print(f"  failure: {f}")
    return 1 if failures else 0


def self_test():
    out = ("expect times _Z4tinyPf first 0 0.004 0.005\nexpect times _Z5saxpy first 1 1.0 1.0\n"
           "expect floor 2.5\n")
    times, floor = expected_times(out)
    assert times == {"_Z4tinyPf": (0, [0.004, 0.005]), "_Z5saxpy": (1, [1.0, 1.0])}, times
    assert floor == 2.5
    # tiny: 2 µs off is within the floor; saxpy: the two after the first, one 6% off.
    got = {"_Z4tinyPf": [2000, 5200, 9], "_Z5saxpy": [5, 1_000_000, 1_060_000]}
    expected = {"_Z5saxpy": {"load": 2000, "store": 1000, "atomic": 0, "async copy": 0}}
    rows, within, bw = time_verdicts(times, floor, got, expected)
    assert within == [True, False], rows
    name, ev, eg, ok = bw[0]
    assert name == "_Z5saxpy" and abs(ev - 1e6) < 1 and abs(eg - 1e9 / 1030) < 1 and ok, bw
    path = "/tmp/egpu-mem-check-self-test"
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "1.egpumem"), "w") as f:
        f.write('{"type":"header","format":"egpu-mem","version":1}\n'
                '{"type":"kernel","name":"k","id":"0a","launches":2,"instrumented":true,'
                '"traffic":{"loaded":8,"stored":4,"atomic":0,"async":2,"tensor_loaded":1,'
                '"tensor_stored":0},"timed":2,"gpu_ns":30}\n'
                '{"type":"launch","grid":9,"kernel":"0a","start_ns":10,"end_ns":30}\n'
                '{"type":"launch","grid":4,"kernel":"0a","start_ns":0,"end_ns":10}\n'
                '{"type":"site","kernel":"0a","site":0,"class":0,"access":"load","requests":4,'
                '"lanes":128,"sectors":16,"minimum":16,"bytes":512}\n'
                '{"type":"site","kernel":"0a","site":2,"class":0,"access":"load","requests":4,'
                '"lanes":128,"sectors":128,"minimum":16,"bytes":512}\n')
    recs = recordings(path)
    assert durations(recs) == {"k": [10, 20]}, durations(recs)
    assert event_means(recs) == {}, event_means(recs)
    evrecs = [(None, [{"name": "k", "event_launches": 4, "event_ns": 4_000_000}], [], [])]
    assert event_means(evrecs) == {"k": 1_000_000.0}
    verdicts = event_verdicts({"k": (0, [1.02, 1.0]), "j": (0, [1.0])}, 2.5,
                              event_means(evrecs))
    assert [ok for *_, ok in verdicts] == [True, False], verdicts
    maps = traffic_maps(recs)
    assert maps[("LOADED", "k")] == 8 and maps[("ASYNC", "k")] == 2, maps
    assert ("LOADED", "10") not in maps, "counted once, under the name"
    assert device_check.observed(maps, "k", "load") == 8
    assert patterns(recs) == {("k", "load"): 18.0}, patterns(recs)
    assert expected_patterns("expect pattern k load 4\n") == {("k", "load"): 4.0}
    assert expected_strides("expect stride k load gather\nexpect stride j load 128\n") == {
        ("k", "load"): "gather", ("j", "load"): "128"}
    sites = [{"kernel": "10", "access": "load", "requests": 6, "unit": 5, "gather": 1},
             {"kernel": "10", "access": "load", "requests": 4, "strided": 4, "stride_bytes": 512},
             {"kernel": "10", "access": "store", "requests": 2, "broadcast": 2},
             {"kernel": "10", "access": "load", "requests": 3}]
    classes = stride_classes([(None, [{"id": "10", "name": "k"}], [], sites)])
    assert classes == {("k", "load"): {"unit": 6, "128": 4}, ("k", "store"): {"one": 2}}, classes
    shutil.rmtree(path)
    mem_timeline.self_test()
    print("mem_check self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
