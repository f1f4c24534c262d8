#!/usr/bin/env bash
# Run-to-run spread of the SHA-256 O0/O2/O3 medians over N separate `cpulab run`s.
# Usage: bash bench/run_to_run.sh [N]
set -euo pipefail
n=${1:-5}
db=$(mktemp -d)/r.sqlite
for i in $(seq "$n"); do
  cpulab run -w sha256 -v O0 -v O2 -v O3 --db "$db" --json > "${db%.sqlite}-$i.json"
done
python3 - "$db" "$n" <<'PY'
import json, statistics, sys
db, n = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(db.replace(".sqlite", f"-{i}.json"))) for i in range(1, n + 1)]
print(f"core/TSC per run: {[round(d['timing']['core_per_tsc'], 3) for d in docs]}; "
      f"TSC {docs[0]['timing']['tsc_hz'] / 1e9:.3f} GHz; wall per run {[round(d['wall_s'], 1) for d in docs]} s")
for v in ("O0", "O2", "O3"):
    rs = [next(r for r in d["results"] if r["variant"] == v) for d in docs]
    med = [r["median"] for r in rs]
    cv = statistics.stdev(med) / statistics.mean(med)
    cpb = [r["cycles_per_unit"] for r in rs]
    cv_cpb = statistics.stdev(cpb) / statistics.mean(cpb)
    print(f"{v}: cycles/byte per run {[round(c, 2) for c in cpb]}, run-to-run CV {100 * cv_cpb:.2f}%")
    print(f"{v}: MB/s per run {[round(m, 1) for m in med]}, run-to-run CV {100 * cv:.2f}%; "
          f"last run {rs[-1]['median']:.1f} MB/s [{rs[-1]['ci'][0]:.1f}, {rs[-1]['ci'][1]:.1f}], "
          f"{rs[-1]['cycles_per_unit']:.2f} cycles/byte")
PY
