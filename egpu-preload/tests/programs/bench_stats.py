"""The statistics of the zero-code benchmark's training section (bench_preload.py): rounds in
rotated order, the ratios of a variant's rate to bare's paired by round, the median of those
ratios with a distribution-free interval from order statistics, the verdict against the target,
and the table; with their self-test on fabricated rounds (no GPU)."""

import math
import statistics

TRAIN_TARGET = 0.99


def median(xs):
    return statistics.median(xs) if xs else None


def rotated(variants, i):
    """Round i's order (i from 0): the variants rotated by i, so that each goes first in turn
    (ABC, BCA, CAB, ABC, ...)."""
    k = i % len(variants)
    return list(variants[k:]) + list(variants[:k])


def binomial_below(n, k):
    """P(Binomial(n, 1/2) < k)."""
    return sum(math.comb(n, j) for j in range(k)) / 2 ** n


def median_interval(xs, confidence=0.95):
    """(median, lo, hi, coverage), or None for no values: the median of xs and an interval for
    the median of what they sample from, from order statistics (distribution-free, for
    independent values): the k-th smallest and the k-th largest of the n values, k the largest
    with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2; it covers that median with probability
    coverage = 1 - 2 P(Binomial(n, 1/2) < k). For 95% and 12 values: the 3rd and 10th, 96.1%.
    With fewer than 6 values no k reaches 95%: the min and the max, with their lower coverage."""
    if not xs:
        return None
    s, n = sorted(xs), len(xs)
    k = 1
    while k < (n + 1) // 2 and binomial_below(n, k + 1) <= (1 - confidence) / 2:
        k += 1
    return statistics.median(s), s[k - 1], s[n - k], 1 - 2 * binomial_below(n, k)


def judge(med, lo, hi, target=TRAIN_TARGET):
    """(PASS or MISS on the median, and what the interval says: clear pass, clear miss or
    within noise)."""
    mark = "PASS" if med >= target else "MISS"
    noise = ("clear pass" if lo >= target else "clear miss" if hi < target
             else "within noise")
    return mark, noise


def run_rate(fields):
    """A run's rate from bench_train.py's line: the median of its blocks, or (a line without
    blocks) the whole run's."""
    return float(fields.get("block_median_steps_per_s", fields["steps_per_s"]))


def paired_ratios(rounds, name, base="bare"):
    """[(round, NAME's rate / BASE's rate)] of the rounds where both ran."""
    out = []
    for rd in rounds:
        runs = rd["runs"]
        if name in runs and base in runs and runs[base]["rate"] > 0:
            out.append((rd["round"], runs[name]["rate"] / runs[base]["rate"]))
    return out


def train_table(rounds, names, title):
    """The training table's lines and, per variant, its figures (for the JSON)."""
    fmt = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    base = median([rd["runs"][names[0]]["rate"] for rd in rounds if names[0] in rd["runs"]])
    lines = ["", title, "",
             "| variant | runs | steps/s (median) | spread (min-max) | whole-run steps/s "
             "(median) | ratio of medians | paired ratio (median) | its 95% interval "
             "(coverage) | paired spread | target | | |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = {}
    for name in names:
        rates = [rd["runs"][name]["rate"] for rd in rounds if name in rd["runs"]]
        whole = [rd["runs"][name]["overall"] for rd in rounds if name in rd["runs"]]
        med = median(rates)
        of_medians = med / base if med is not None and base else None
        s = {"rates": rates, "overall": whole, "median": med, "ratio_of_medians": of_medians}
        cells = [name, str(len(rates)), fmt(med, ".1f"),
                 f"{min(rates):.1f}-{max(rates):.1f}" if rates else "-",
                 fmt(median(whole), ".1f"),
                 "-" if of_medians is None else f"{of_medians:.4f}x"]
        ratios = paired_ratios(rounds, name, names[0]) if name != names[0] else []
        got = median_interval([x for _, x in ratios])
        if got is None:
            cells += ["-", "-", "-", "" if name == names[0] else f">= {TRAIN_TARGET}x", "-", ""]
        else:
            pm, lo, hi, cover = got
            mark, noise = judge(pm, lo, hi)
            xs = [x for _, x in ratios]
            cells += [f"{pm:.4f}x", f"{lo:.4f}-{hi:.4f} ({100 * cover:.1f}%)",
                      f"{min(xs):.4f}-{max(xs):.4f}", f">= {TRAIN_TARGET}x", mark, noise]
            s.update({"paired": dict(ratios), "paired_median": pm, "interval": [lo, hi],
                      "coverage": cover, "mark": mark, "noise": noise})
        lines.append("| " + " | ".join(cells) + " |")
        summary[name] = s
    return lines, summary


def fabricated_rounds():
    """Twelve rounds of made-up rates, the same every time: bare drifts from 560 to 640 steps/s
    over the rounds (each round's runs alike), `egpu run` is bare within 0.4% and `--metrics`
    3% slower within 0.4%; bare of round 5 failed."""
    rounds = []
    for i in range(12):
        bare = 560 + 80 * ((7 * i) % 12) / 11  # a permutation of 12 levels
        wobble = ((5 * i) % 12 - 5.5) / 5.5 * 0.004  # within +-0.4%, median 0
        rates = {"bare": bare, "egpu run": bare * (1 + wobble),
                 "egpu run --metrics": bare * (0.97 - wobble)}
        runs = {k: {"rate": v, "overall": v * 0.98} for k, v in rates.items()
                if not (i == 4 and k == "bare")}
        rounds.append({"round": i + 1, "order": [], "runs": runs})
    return rounds


def train_self_test():
    """The training statistics on fabricated numbers (deterministic)."""
    assert ["".join(rotated("ABC", i)) for i in range(4)] == ["ABC", "BCA", "CAB", "ABC"]
    assert binomial_below(12, 3) == 79 / 4096
    xs = [(7 * i) % 12 + 1 for i in range(12)]  # 1..12, shuffled
    assert median_interval(xs) == (6.5, 3, 10, 1 - 2 * 79 / 4096)
    assert median_interval(xs[:6]) == (6.5, 1, 12, 1 - 2 / 64)  # 1 3 5 8 10 12: k = 1
    assert median_interval([3, 1, 2, 5, 4]) == (3, 1, 5, 1 - 2 / 32)  # fewer than 6: 93.8%
    assert median_interval([2.0]) == (2.0, 2.0, 2.0, 0.0) and median_interval([]) is None
    assert median_interval(list(range(100)))[1:3] == (39, 60)  # k = 40 for 100 values
    assert judge(0.995, 0.991, 1.0) == ("PASS", "clear pass")
    assert judge(0.995, 0.98, 1.01) == ("PASS", "within noise")
    assert judge(0.985, 0.97, 0.995) == ("MISS", "within noise")
    assert judge(0.985, 0.97, 0.989) == ("MISS", "clear miss")
    assert judge(0.99, 0.99, 1.0) == ("PASS", "clear pass")
    rounds = fabricated_rounds()
    names = ["bare", "egpu run", "egpu run --metrics"]
    assert [r for r, _ in paired_ratios(rounds, "egpu run")] == [1, 2, 3, 4] + list(range(6, 13))
    lines, summary = train_table(rounds, names, "### t")
    bare, plain, metrics = (summary[n] for n in names)
    assert len(bare["rates"]) == 11 and len(plain["paired"]) == 11 and "paired" not in bare
    assert abs(plain["paired_median"] - 1.0) < 0.0005 and plain["noise"] == "clear pass"
    assert abs(metrics["paired_median"] - 0.97) < 0.0005, metrics
    assert (metrics["mark"], metrics["noise"]) == ("MISS", "clear miss")
    assert abs(metrics["coverage"] - (1 - 2 * binomial_below(11, 2))) < 1e-12  # k = 2 of 11
    assert max(metrics["interval"]) < 0.975 < 0.99 <= min(plain["interval"])
    assert lines[3].startswith("| variant | runs |") and len(lines) == 8, lines
    assert lines[5].startswith("| bare | 11 | ") and lines[5].endswith(" |  | - |  |"), lines[5]
    assert lines[7].endswith("| >= 0.99x | MISS | clear miss |"), lines[7]
    assert "(98.8%)" in lines[7], lines[7]
    # A round that lost bare, a variant with no pair at all.
    lines, summary = train_table([{"round": 1, "order": [], "runs": {"egpu run": {
        "rate": 1.0, "overall": 1.0}}}], names, "### t")
    assert "paired" not in summary["egpu run"], summary
    assert lines[5] == "| bare | 0 | - | - | - | - | - | - | - |  | - |  |", lines[5]
    assert lines[6] == "| egpu run | 1 | 1.0 | 1.0-1.0 | 1.0 | - | - | - | - | >= 0.99x | - |  |"
    print("bench_preload training statistics self-test: ok")
