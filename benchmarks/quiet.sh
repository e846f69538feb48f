#!/usr/bin/env bash
# Our engine against PyTorch on W1 (chain) and W2 (fan-in), collector on and off, wall and CPU
# clocks, five interleaved repeats each (benchmarks.run). From anywhere:
#   bash benchmarks/quiet.sh          # full sizes, at most BUDGET (140) s of runs
#   SMALL=1 bash benchmarks/quiet.sh  # small sizes, a few seconds: checks the script works
# Needs python3 with numpy and torch. rich (which benchmarks.run prints with) is used when
# installed; otherwise a small stand-in that prints plain rows is put first on the path.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
OUT=${OUT:-/tmp/quiet_bench}
mkdir -p "$OUT"

if [ -n "${FORCE_STUB:-}" ] || ! "$PY" -c "import rich" 2>/dev/null; then
  STUB="$OUT/richstub"
  mkdir -p "$STUB/rich"
  cat > "$STUB/rich/__init__.py" <<'PYEOF'
"""A stand-in for rich where it is not installed: plain rows, no colours."""
PYEOF
  cat > "$STUB/rich/console.py" <<'PYEOF'
import contextlib, re, sys
class Console:
    def __init__(self, *a, **k): pass
    def print(self, *objs, **k):
        for o in objs:
            print(o.render() if hasattr(o, "render") else re.sub(r"\[/?[a-z ]+\]", "", str(o)))
        sys.stdout.flush()
    @contextlib.contextmanager
    def status(self, *a, **k):
        from rich.status import Status
        yield Status()
PYEOF
  cat > "$STUB/rich/status.py" <<'PYEOF'
class Status:
    def update(self, *a, **k): pass
PYEOF
  cat > "$STUB/rich/table.py" <<'PYEOF'
class Table:
    def __init__(self, title=None, **k):
        self.title, self.columns, self.rows = title, [], []
    def add_column(self, name, **k): self.columns.append(name)
    def add_row(self, *cells, **k): self.rows.append([str(c) for c in cells])
    def add_section(self): self.rows.append(None)
    def render(self):
        rows = [r for r in self.rows if r is not None]
        widths = [max([len(c)] + [len(r[i]) for r in rows if i < len(r)]) for i, c in enumerate(self.columns)]
        fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))
        lines = [self.title or "", fmt(self.columns)]
        lines += ["" if r is None else fmt(r) for r in self.rows]
        return "\n".join(lines)
PYEOF
  cat > "$STUB/rich/progress.py" <<'PYEOF'
class Progress:
    def __init__(self, *a, **k): pass
PYEOF
  export PYTHONPATH="$STUB:$PYTHONPATH"
fi

"$PY" - <<'PYEOF'
import os, platform, numpy, torch
print(f"python {platform.python_version()}, numpy {numpy.__version__}, torch {torch.__version__}, "
      f"{os.cpu_count()} cpus, {platform.machine()}")
PYEOF
git log --oneline -1 2>/dev/null || true

if [ -n "${SMALL:-}" ]; then SIZES=(--sizes 2e2); REPEAT=2; else SIZES=(); REPEAT=5; fi
# CPU time with the collector on and off first; then wall time, each run only if the one
# before it says it fits in the budget (BUDGET seconds in all, default 140).
BUDGET=${BUDGET:-140}
begin=$(date +%s); longest=0
for run in "cpu on" "cpu off" "wall on" "wall off"; do
  set -- $run; clock=$1; gc=$2
  elapsed=$(( $(date +%s) - begin ))
  if [ "$longest" -gt 0 ] && [ $(( elapsed + longest )) -gt "$BUDGET" ]; then
    echo "=== skipped: gc $gc, clock $clock (${elapsed} s spent, a run takes ${longest} s)"
    continue
  fi
  echo "=== W1,W2 ours vs torch, gc $gc, clock $clock, repeat $REPEAT"
  start=$(date +%s)
  "$PY" -m benchmarks.run --workload W1,W2 --peer ours,torch --gc "$gc" --clock "$clock" \
    --repeat "$REPEAT" "${SIZES[@]}" --out "$OUT/run.jsonl"
  took=$(( $(date +%s) - start )); [ "$took" -gt "$longest" ] && longest=$took
  echo "(took ${took} s)"
done
echo "=== total $(( $(date +%s) - begin )) s; JSON lines in $OUT/run.jsonl"
