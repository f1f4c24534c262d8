#!/usr/bin/env bash
# Run-to-run spread over N separate `cpulab run -w sha256 -v O2 -v O3`: each run's medians,
# its O3/O2 ratio with interval and verdict, and the CV of each over the runs.
# Usage: bash bench/run_to_run.sh [N]
set -euo pipefail
n=${1:-5}
db=$(mktemp -d)/r.sqlite
for i in $(seq "$n"); do
  cpulab run -w sha256 -v O2 -v O3 --db "$db" --json > "${db%.sqlite}-$i.json"
done
python3 - "$db" "$n" <<'PY'
import json, statistics, sys
db, n = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(db.replace(".sqlite", f"-{i}.json"))) for i in range(1, n + 1)]
cv = lambda xs: 100 * statistics.stdev(xs) / statistics.mean(xs)
print(f"core/TSC per run: {[round(d['timing']['core_per_tsc'], 3) for d in docs]}; "
      f"TSC {docs[0]['timing']['tsc_hz'] / 1e9:.3f} GHz; wall per run {[round(d['wall_s'], 1) for d in docs]} s")
for v in ("O2", "O3"):
    rs = [next(r for r in d["results"] if r["variant"] == v) for d in docs]
    med, cpb = [r["median"] for r in rs], [r["cycles_per_unit"] for r in rs]
    print(f"{v}: MB/s per run {[round(m, 1) for m in med]}, CV {cv(med):.2f}%; "
          f"cycles/byte {[round(c, 2) for c in cpb]}, CV {cv(cpb):.2f}%")
cs = [next(c for c in d["comparisons"] if c["variant"] == "O3") for d in docs]
ratios = [c["ratio"] for c in cs]
for c in cs:
    print(f"O3/O2: {c['ratio']:.4f} [{c['ci'][0]:.4f}, {c['ci'][1]:.4f}] {c['verdict']} ({c['rounds']} rounds)")
print(f"O3/O2 run-to-run CV {cv(ratios):.2f}%")
PY
