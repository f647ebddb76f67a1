import json, glob, statistics, sys
from collections import defaultdict
d = defaultdict(list)
for v in ("before", "after"):
    for f in sorted(glob.glob(f"{v}_*.json")):
        for r in json.load(open(f)):
            d[(r["algorithm"], r["bytes"], r["inplace"], v)].append(r["time_us"])
keys = sorted({(a, b, i) for a, b, i, v in d})
print(f"{'algo':20} {'bytes':>8} inpl  before_med  after_med  after/before  (before runs | after runs)")
for a, b, i in keys:
    bb, aa = d[(a, b, i, "before")], d[(a, b, i, "after")]
    mb, ma = statistics.median(bb), statistics.median(aa)
    print(f"{a:20} {b:>8} {int(i):>4} {mb:10.2f} {ma:10.2f} {ma/mb:8.2f}   ({min(bb):.2f}-{max(bb):.2f} | {min(aa):.2f}-{max(aa):.2f})")
