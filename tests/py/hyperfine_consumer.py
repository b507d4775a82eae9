"""A consumer of hyperfine's JSON export, written to hyperfine's documented format (what its
scripts read: results[] with command, mean, stddev, median, user, system, min, max in
seconds, times[], exit_codes[], and parameters{} and memory_usage_byte[] when present).
Reads FILE as advanced_statistics.py and welch_ttest.py do, with the standard library only,
and checks that every summary figure is the one its times give.

Usage: hyperfine_consumer.py FILE  Prints the statistics; exits non-zero on any mismatch."""
import json
import math
import statistics
import sys


def close(a, b, what):
    assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{what}: {a} != {b}"


def percentile(xs, p):
    # numpy's default (linear interpolation between closest ranks), as the scripts use.
    s = sorted(xs)
    k = (len(s) - 1) * p / 100
    f = math.floor(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def check(b):
    cmd, ts = b["command"], b["times"]
    assert isinstance(cmd, str) and cmd, f"command: {cmd!r}"
    assert ts and all(isinstance(t, (int, float)) and t >= 0 for t in ts), f"times: {ts}"
    n = len(ts)
    close(b["mean"], statistics.fmean(ts), f"{cmd}: mean")
    close(b["median"], statistics.median(ts), f"{cmd}: median")
    close(b["min"], min(ts), f"{cmd}: min")
    close(b["max"], max(ts), f"{cmd}: max")
    if n > 1:
        close(b["stddev"], statistics.stdev(ts), f"{cmd}: stddev")
    else:
        assert b["stddev"] is None, f"{cmd}: stddev of one run"
    for k in ("user", "system"):
        assert isinstance(b[k], (int, float)) and b[k] >= 0, f"{cmd}: {k}"
    assert len(b["exit_codes"]) == n, f"{cmd}: exit_codes"
    assert all(c is None or isinstance(c, int) for c in b["exit_codes"]), f"{cmd}: exit_codes"
    if "memory_usage_byte" in b:
        m = b["memory_usage_byte"]
        assert len(m) == n and all(isinstance(v, int) and v > 0 for v in m), f"{cmd}: memory"
    if "parameters" in b:
        p = b["parameters"]
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in p.items()), p
    print(f"Command '{cmd}'")
    print(f"  runs:   {n:8d}")
    for name, v in (("mean", b["mean"]), ("median", b["median"])):
        print(f"  {name + ':':7} {v:8.3f} s")
    print(f"  P_05 .. P_95:    {percentile(ts, 5):.3f} s .. {percentile(ts, 95):.3f} s")


def welch(x, y):
    vx, vy = statistics.variance(x) / len(x), statistics.variance(y) / len(y)
    return (statistics.fmean(x) - statistics.fmean(y)) / math.sqrt(vx + vy)


def main():
    results = json.load(open(sys.argv[1]))["results"]
    assert results, "no results"
    for b in results:
        check(b)
    if len(results) == 2 and all(len(b["times"]) > 1 for b in results):
        x, y = (b["times"] for b in results)
        if statistics.variance(x) + statistics.variance(y) > 0:
            print(f"t = {welch(x, y):.3}")


main()
