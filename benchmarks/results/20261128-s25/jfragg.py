"""Aggregate JFR execution samples: self time by method and by package prefix, and inclusive
time for frames matching given substrings. Usage: jfragg.py rec.jfr [substr...]"""
import collections, json, subprocess, sys
path = sys.argv[1]
out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "200", "--events",
                      "jdk.ExecutionSample", path], capture_output=True, text=True).stdout
events = json.loads(out)["recording"]["events"]
selfc = collections.Counter(); pkg = collections.Counter(); incl = collections.Counter()
threads = collections.Counter()
for e in events:
    frames = e["values"]["stackTrace"]["frames"] if e["values"].get("stackTrace") else []
    threads[(e["values"].get("sampledThread") or {}).get("javaName", "?")[:40]] += 1
    if not frames:
        continue
    names = [f["method"]["type"]["name"] + "." + f["method"]["name"] for f in frames]
    selfc[names[0]] += 1
    pkg[".".join(names[0].split(".")[:3])] += 1
    seen = set()
    for n in names:
        short = n
        if short not in seen:
            seen.add(short); incl[short] += 1
n = len(events)
print("samples", n)
print("-- threads"); [print(f"{c*100/n:5.1f}% {t}") for t, c in threads.most_common(15)]
print("-- self by package"); [print(f"{c*100/n:5.1f}% {t}") for t, c in pkg.most_common(20)]
print("-- self by method"); [print(f"{c*100/n:5.1f}% {t}") for t, c in selfc.most_common(25)]
print("-- inclusive"); [print(f"{c*100/n:5.1f}% {t}") for t, c in incl.most_common(60)]
