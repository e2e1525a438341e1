#!/usr/bin/env python3
"""Compares two `psr bench` logs written by tools/compare_trees.sh: for each
call (bench, shape, variant) the best figure of each tree and their ratio,
sorted; ratios above 1.03 are marked. Usage: compare_benches.py BASE NEW"""
import collections
import re
import sys

SHAPE = re.compile(r"\d+x\d+")


def parse(path):
    """{(bench, shape, variant): [us, ...]} from one tree's log."""
    rows = collections.defaultdict(list)
    bench, host_column = None, False
    for line in open(path, encoding="utf-8"):
        header = re.match(r"== \w+ round \d bench (\w+)", line)
        if header:
            bench = header.group(1)
            continue
        parts = line.split()
        if parts and parts[0] == "shape":  # the header: newer trees add the host's time
            host_column = any(p.startswith("host_") for p in parts)
            continue
        if not parts or bench is None or not SHAPE.match(parts[0]):
            continue
        if bench in ("sample", "verify"):
            rows[(bench, parts[0], parts[1])].append(float(parts[2]))
        elif bench == "filters":  # name words, then us, x plain, device us, x plain[, host us]
            n = 5 if host_column else 4
            name, times = " ".join(parts[1:-n]), parts[-n:]
            rows[(bench, parts[0], name)].append(float(times[0]))
            rows[(bench, parts[0], name + " device")].append(float(times[2]))
            if host_column:
                rows[(bench, parts[0], name + " host")].append(float(times[4]))
        elif bench == "logprobs":  # sample_us logprobs_us ratio dev_sample dev_logp dev_ratio[ host_samp host_logp]
            rows[(bench, parts[0], "top-N")].append(float(parts[2]))
            rows[(bench, parts[0], "top-N device")].append(float(parts[5]))
            if host_column:
                rows[(bench, parts[0], "top-N host")].append(float(parts[8]))
    return rows


def main():
    base, new = parse(sys.argv[1]), parse(sys.argv[2])
    ratios = sorted((min(new[k]) / min(base[k]), k) for k in base if k in new)
    for ratio, (bench, shape, variant) in ratios:
        mark = "  <<<" if ratio > 1.03 else ""
        print(f"{ratio:6.3f}  {bench:8s} {shape:14s} {variant:28s} base {base[(bench, shape, variant)]} "
              f"new {new[(bench, shape, variant)]}{mark}")


if __name__ == "__main__":
    main()
