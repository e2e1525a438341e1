#!/usr/bin/env python3
"""psr verify's statistics as a user reads and sees them: p-values against
independent formulas, the JSON fields and their types, the SVG plots
(parsed: bars, bands, headings, finite values), unwritable plots, and
controls that must fail. Usage: stats_cli_test.py PSR [--keep DIR]."""
import json
import math
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

PSR = sys.argv[1]
KEEP = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
SVG = "{http://www.w3.org/2000/svg}"
THRESHOLD_P = 1e-6
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def run(*args):
    return subprocess.run([PSR, *args], capture_output=True, text=True, timeout=600)


def start(*args):
    """A run in the background: building kernels is single-threaded, so
    runs that build different ones overlap on a small machine."""
    return subprocess.Popen([PSR, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def close(a, b, rel=1e-9, tiny=1e-300):
    return abs(a - b) <= rel * max(abs(a), abs(b)) or max(abs(a), abs(b)) < tiny


# ---- independent formulas ----

def chi2_sf(x, df):
    """Q(df/2, x/2) in closed form: a finite sum for even df, erfc plus a
    finite sum for odd df."""
    h = x / 2
    if df % 2 == 0:
        return math.exp(-h) * math.fsum(h ** i / math.factorial(i) for i in range(df // 2))
    terms = (h ** (i - 0.5) / math.gamma(i + 0.5) for i in range(1, (df - 1) // 2 + 1))
    return math.erfc(math.sqrt(h)) + math.exp(-h) * math.fsum(terms)


def poisson_two_sided(k, mean):
    pmf = lambda i: math.exp(i * math.log(mean) - mean - math.lgamma(i + 1))
    lower = math.fsum(pmf(i) for i in range(k + 1))
    upper = math.fsum(pmf(i) for i in range(k, k + 20 * int(mean + 10)))
    return min(1.0, 2 * min(lower, upper))


def binomial_two_sided(n, q):
    """Every count's two-sided p-value under binomial(n, q), by summing its
    probabilities (positive terms only, so nothing cancels)."""
    pmf = [math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(n + 1)]
    return [min(1.0, 2 * min(math.fsum(pmf[:k + 1]), math.fsum(pmf[k:]))) for k in range(n + 1)]


def p_value(*args):
    r = run("verify", "p-value", *args, "--json")
    return json.loads(r.stdout) if r.returncode == 0 else {}


def p_value_checks():
    """psr verify p-value against the formulas above; no device needed."""
    table = [(2, x, math.exp(-x / 2)) for x in (0.1, 1, 5, 20, 60)]
    table += [(1, x, math.erfc(math.sqrt(x / 2))) for x in (0.5, 3.84, 23.9)]
    table += [(4, x, math.exp(-x / 2) * (1 + x / 2)) for x in (2, 9.49, 40)]
    table += [(df, x, chi2_sf(x, df)) for df in (15, 31, 100) for x in (df / 2, df, 2 * df, 4 * df)]
    bad = [(df, x, want, p_value("--chi2", str(x), "--df", str(df)).get("p_value")) for df, x, want in table]
    bad = [b for b in bad if not (isinstance(b[3], float) and close(b[3], b[2], 1e-10))]
    check(not bad, f"p-value: chi2 survival function at {len(table)} (df, x) against closed forms {bad[:3]}")
    for df in (1, 2, 15, 31):
        out = p_value("--chi2", "1", "--df", str(df))
        t = out.get("threshold", 0)
        check(out.get("threshold_p") == THRESHOLD_P and close(chi2_sf(t, df), THRESHOLD_P, 1e-8),
              f"p-value: df {df}'s threshold {t:.4f} has p = 1e-6")
    for k, mean in ((35, 32.76), (23, 32.76), (0, 9.9), (13, 9.9), (0, 16.0), (60, 16.0), (4135, 4096.0)):
        out = p_value("--poisson", str(k), "--mean", str(mean))
        check(out.get("test") == "poisson" and out.get("df", 0) is None and out.get("statistic") == k
              and close(out.get("p_value", -1), poisson_two_sided(k, mean), 1e-9),
              f"p-value: Poisson({mean}) two-sided at {k}")
    for k, n, q in ((198, 200, 0.98), (180, 200, 0.98), (0, 100, 0.03), (40, 60, 0.5), (60, 60, 0.5)):
        out = p_value("--binomial", str(k), "--trials", str(n), "--prob", str(q))
        low, high = out.get("allowed_low", -1), out.get("allowed_high", -1)
        want = binomial_two_sided(n, q)
        inside = [p >= THRESHOLD_P for p in want]
        check(close(out.get("p_value", -1), want[k], 1e-9)
              and inside == [low <= i <= high for i in range(n + 1)]
              and out.get("passed") is (low <= k <= high),
              f"p-value: binomial({n}, {q}) at {k}, and the counts allowed ({low}..{high})")
    r = run("verify", "p-value", "--chi2", "3", "--df", "2")
    check(r.returncode == 0 and "p = 0.223" in r.stdout, "p-value: text output")
    for args in ([], ["--chi2", "3"], ["--chi2", "3", "--df", "0"], ["--binomial", "5", "--trials", "4"],
                 ["--poisson", "x"], ["--bogus", "1"]):
        check(run("verify", "p-value", *args).returncode == 2, f"p-value {' '.join(args)}: a usage error")


# ---- runs on the device ----

def numbers(node, names):
    return [float(node.get(n, "nan")) for n in names]


def svg_panels(path):
    root = ET.parse(path).getroot()
    check(root.tag == SVG + "svg" and root.find(SVG + "title") is not None
          and not root.findall(".//" + SVG + "script") and "href" not in open(path).read(),
          f"{os.path.basename(path)}: one self-contained SVG with a title")
    shapes = [e for e in root.iter() if e.tag in (SVG + "rect", SVG + "line")]
    keys = ("x", "y", "x1", "x2", "y1", "y2", "width", "height")
    geometry = [(k, float(v)) for e in shapes for k, v in e.attrib.items() if k in keys and not v.endswith("%")]
    check(geometry and all(math.isfinite(v) and (v >= 0 or k not in ("width", "height")) for k, v in geometry),
          f"{os.path.basename(path)}: every coordinate finite, sizes non-negative")
    return root, root.findall(SVG + "g[@class='panel']")


def panel_parts(panel):
    heading = panel.find(SVG + "text[@class='heading']").text
    bars = panel.findall(SVG + "rect[@class='bar']")
    bands = panel.findall(SVG + "rect[@class='band']")
    ticks = panel.findall(SVG + "line[@class='expected']")
    return heading, bars, bands, ticks


def check_fit_panel(panel, test, what):
    """A panel of per-token bars against the JSON of the same test."""
    heading, bars, bands, ticks = panel_parts(panel)
    n = len(test["observed"])
    check(len(bars) == n and len(bands) == n and len(ticks) == n, f"{what}: {n} bars, bands and expected ticks")
    want_p = "p < 1e-300" if test["p_value"] < 1e-300 else f"p = {test['p_value']:.3g}"
    check(want_p in heading and f"df {test['df']}" in heading and ("PASS" if test["passed"] else "FAIL") in heading,
          f"{what}: the heading states df, the p-value and the verdict ({heading})")
    values = [numbers(b, ("data-observed", "data-expected", "data-low", "data-high")) for b in bars]
    check(all(math.isfinite(v) for row in values for v in row)
          and [v[0] for v in values] == test["observed"]
          and all(close(v[1], e, 1e-12) for v, e in zip(values, test["expected"]))
          and [v[2] for v in values] == test["allowed_low"] and [v[3] for v in values] == test["allowed_high"],
          f"{what}: each bar carries the JSON's observed, expected and band")
    red = [b.get("fill") == "#c62828" for b in bars]
    outside = [not (lo <= o <= hi) for o, _, lo, hi in values]
    check(red == outside, f"{what}: bars outside their band, and only those, are red")


def check_fit_json(test, what):
    fields = {"test": str, "samples": int, "statistic": float, "df": int, "p_value": (float, int),
              "threshold_p": float, "threshold": float, "passed": bool, "observed": list, "expected": list,
              "allowed_low": list, "allowed_high": list}
    check(all(isinstance(test.get(k), t) for k, t in fields.items()), f"{what}: JSON fields and types")
    n, df, x = test["samples"], test["df"], test["statistic"]
    check(sum(test["observed"]) == n and close(sum(test["expected"]), n, 1e-9)
          and all(lo <= e <= hi for lo, e, hi in zip(test["allowed_low"], test["expected"], test["allowed_high"])),
          f"{what}: counts sum to the samples and each band holds its expectation")
    check(close(test["p_value"], chi2_sf(x, df), 1e-9) and test["threshold_p"] == THRESHOLD_P
          and close(chi2_sf(test["threshold"], df), THRESHOLD_P, 1e-8)
          and test["passed"] is (test["p_value"] >= THRESHOLD_P),
          f"{what}: p = {test['p_value']:.4g} is Q(df/2, chi2/2) and the verdict follows from it")


def unbiased_checks(d, proc):
    svg = os.path.join(d, "verify-unbiased.svg")
    r = finish(proc)
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    salted, control = out.get("positions", []), out.get("control", {}).get("positions", [])
    check(len(salted) == 2 and len(control) == 2 and out.get("passed") is True and out.get("threshold_p") == THRESHOLD_P,
          "verify unbiased --control: passes, two positions each")
    for i, t in enumerate(salted + control):
        check_fit_json(t, f"unbiased {'control ' if i > 1 else ''}position {i % 2}")
    check(all(t["passed"] for t in salted) and control and control[0]["passed"] is False
          and control[0]["p_value"] < THRESHOLD_P and out["control"].get("failed") is True,
          "verify unbiased: the control (no draft salt) fails at position 0 with the p-value threshold")
    root, panels = svg_panels(svg)
    check(len(panels) == 4 and "PASS" in root.find(SVG + "title").text, "unbiased plot: four panels, title PASS")
    for i, (panel, t) in enumerate(zip(panels, salted + control)):
        check_fit_panel(panel, t, f"unbiased plot panel {i}")
    legend = " ".join(e.text or "" for e in root.iter(SVG + "text"))
    check("allowed" in legend and "1e-06" in legend and "expected" in legend and "token" in legend
          and "count" in legend, "unbiased plot: legend and axis labels")
    r = run("verify", "unbiased", "--k", "1", "--trials", "2000", "--plot", os.path.join(d, "no", "such", "dir.svg"))
    check(r.returncode == 1 and "cannot write the plot" in r.stderr, "an unwritable --plot path exits 1, saying why")
    if os.path.exists("/dev/full"):
        r = run("verify", "unbiased", "--k", "1", "--trials", "2000", "--plot", "/dev/full")
        check(r.returncode == 1 and "cannot write the plot" in r.stderr, "a failed write to the plot exits 1")


def tail_checks(d, proc):
    svg = os.path.join(d, "verify-tail.svg")
    r = finish(proc)
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    q = 1000 * math.exp(-3) / (1 + 1000 * math.exp(-3))
    k = out.get("observed", -1)
    check(out.get("test") == "binomial" and out.get("statistic") == k and out.get("df", 0) is None
          and close(out.get("expected", 0), 200 * q, 1e-6) and out.get("passed") is True
          and 0 <= k <= 200 and close(out.get("p_value", -1), binomial_two_sided(200, q)[k], 1e-6)
          and out.get("allowed_low", 999) <= k <= out.get("allowed_high", -1),
          f"verify tail --json: binomial({200}, {q:.4f}) two-sided p-value of {k} hits")
    root, panels = svg_panels(svg)
    heading, bars, bands, ticks = panel_parts(panels[0]) if len(panels) == 1 else ("", [], [], [])
    notes = " ".join(t.text or "" for t in panels[0].iter(SVG + "text")) if panels else ""
    check(len(bars) == 1 and len(bands) == 1 and len(ticks) == 1 and "wide" in notes
          and f"p = {out.get('p_value', 0):.3g}" in notes and "PASS" in heading,
          "tail plot: the hits against their expectation and band, with the p-value")


def lower_tail_checks(d, proc):
    svg = os.path.join(d, "verify-lower-tail.svg")
    r = finish(proc)
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    tests = {t.get("name"): t for t in out.get("tests", [])}
    top = tests.get("top_slice_below_2^-32", {})
    check(out.get("passed") is True and top.get("control") is True and top.get("passed") is False
          and top.get("p_value") == 0 and top.get("statistic") == 0,
          "verify lower-tail --noise fp32: the top slice is the control and fails")
    b24 = tests.get("below_2^-24", {})
    check(b24.get("judged") is True and close(b24.get("p_value", -1), poisson_two_sided(b24.get("statistic", 0),
                                                                                        b24.get("expected", 1)), 1e-9),
          "verify lower-tail: the count below 2^-24 has its two-sided Poisson p-value")
    root, panels = svg_panels(svg)
    check(len(panels) == 3 and all(len(panel_parts(p)[1]) == 1 for p in panels)
          and panel_parts(panels[2])[1][0].get("fill") == "#c62828",
          "lower-tail plot: three panels, the failing control drawn red")


def main():
    p_value_checks()
    info = run("info", "--json")
    if info.returncode != 0 or not json.loads(info.stdout).get("devices"):
        print("no OpenCL device: the device checks are skipped")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            d = KEEP or tmp
            runs = [start("verify", "unbiased", "--k", "1", "--trials", "20000", "--control", "--json", "--plot",
                          os.path.join(d, "verify-unbiased.svg")),
                    start("verify", "tail", "--noise", "wide", "--trials", "200", "--tail-tokens", "1000", "--gap",
                          "3", "--json", "--plot", os.path.join(d, "verify-tail.svg")),
                    start("verify", "lower-tail", "--noise", "fp32", "--draws", "1e6", "--json", "--plot",
                          os.path.join(d, "verify-lower-tail.svg"))]
            for checks, proc in zip((unbiased_checks, tail_checks, lower_tail_checks), runs):
                checks(d, proc)
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
