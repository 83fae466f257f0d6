#!/usr/bin/env bash
# gpu_checks.sh: every check that needs a real GPU, in one run, with everything logged.
#
# Most of gpu-labkit is developed and tested on CPU-only machines. What those
# cannot check (the GPU paths of `labkit doctor` and `labkit bench`, the GPU
# tests) and what they cannot make (the recordings CPU-only learners see,
# labkit/reference/*.json) comes from this script, run on a CUDA machine:
#
#     OUT=/path/to/empty/folder PYTHONPATH=. bash tools/gpu_checks.sh
#
# from the repository root (it cd's there itself). It needs only python3 with
# torch (CuPy optional) and no network. Each step runs under `timeout` and the
# run goes on past a failure; the whole run stays within GPU_CHECKS_BUDGET_S
# seconds (default 580), so later steps are skipped rather than overrun.
# Under $OUT: <step>.out (stdout; .json for JSON steps), <step>.err (stderr),
# summary.txt (one line per step: ok/FAILED/TIMEOUT/skipped and seconds, also
# printed) and reference/ (the recordings made by this run). A runner that brings back only a few
# files (the device tool this project is lent: 8) needs $OUT as one archive: point OUT at a
# scratch folder and tar it into the real $OUT afterwards, and give every command there a
# `timeout -k`, so an archive is still written when a step hangs.
# gpu_notebooks (`make test-gpu`) executes every notebook with the GPU visible and checks its GPU
# cells ($OUT/gpu_notebooks.json, with each notebook's seconds; the executed copies in
# $OUT/executed). It runs before the GPU tests: on the first H200 run (2026-12-04) the tests
# ran first, took 169 s and left it 88 s, too few for the notebooks after 03.
# The last step, notebook_times, executes every notebook (copies, in a
# temporary folder) and writes $OUT/notebook_times.json, the GPU column of
# docs/instructors.md's syllabi; it runs last and gets whatever budget is left
# (the JSON is rewritten after each notebook, so a cut-off run keeps what it timed).
#
# Committing the recordings afterwards (on your own checkout):
#   1. read $OUT/summary.txt and the *.json outputs: record only from a run
#      whose steps were ok on a quiet machine (no fake numbers, ever);
#   2. cp $OUT/reference/*.json labkit/reference/   (not reference/shipped/: those
#      are the recordings the checkout already had, copied for comparison)
#   3. make notebooks   (re-executes the notebooks, whose CPU-only cells now
#      print the recordings), then make test, and commit both together.

set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
PYTHON="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/gpu-checks-out}"
BUDGET_S="${GPU_CHECKS_BUDGET_S:-580}"
mkdir -p "$OUT/reference" || exit 2
OUT="$(cd "$OUT" && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export LABKIT_PROGRESS=0 NO_COLOR=1 PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
START_S=$SECONDS
MARKER="$(mktemp)"  # files newer than this were written by this run
FAILED=0

say() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LIMIT_S KIND COMMAND...   (KIND: text, or json = stdout must parse as JSON)
step() {
    local name=$1 limit=$2 kind=$3
    shift 3
    local left=$((BUDGET_S - (SECONDS - START_S)))
    if ((left < 15)); then
        say "$(printf '%-20s skipped  (out of the %ss budget)' "$name" "$BUDGET_S")"
        FAILED=$((FAILED + 1))
        return
    fi
    ((limit > left)) && limit=$left
    local ext=out
    [[ $kind == json ]] && ext=json
    local t0=$SECONDS rc status
    timeout -k 10 "$limit" "$@" >"$OUT/$name.$ext" 2>"$OUT/$name.err"
    rc=$?
    status=ok
    if ((rc == 124 || rc == 137)); then
        status="TIMEOUT after ${limit}s"
    elif ((rc != 0)); then
        status="FAILED rc=$rc"
    elif [[ $kind == json ]] && ! "$PYTHON" -m json.tool "$OUT/$name.json" >/dev/null 2>&1; then
        if grep -q "needs a CUDA GPU" "$OUT/$name.json"; then
            status="NO-GPU (torch sees no CUDA GPU: nothing measured or recorded)"
        else
            status="FAILED (stdout is not valid JSON)"
        fi
    fi
    local word="${status%% *}"
    say "$(printf '%-20s %-8s %4ss%s' "$name" "$word" "$((SECONDS - t0))" "${status#"$word"}")"
    if [[ $status != ok ]]; then
        FAILED=$((FAILED + 1))
        tail -n 5 "$OUT/$name.err" | sed "s/^/    $name: /"
    fi
}

say "gpu_checks.sh on $(hostname) at $(date -u +%FT%TZ); budget ${BUDGET_S}s; out: $OUT"
{
    command -v nvidia-smi >/dev/null && nvidia-smi 2>&1 || echo "nvidia-smi: not found"
    "$PYTHON" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__,
"cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
} >"$OUT/environment.txt"

step doctor 60 text "$PYTHON" -m labkit doctor
step doctor_json 60 json "$PYTHON" -m labkit doctor --json
# Recordings go to $OUT/reference (labkit.machine.reference honours LABKIT_REFERENCE_DIR).
step bench_timing 90 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench timing --json --record
step bench_bandwidth 150 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench bandwidth --json --record
step bench_parallel 120 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench parallel --json --record
step bench_roofline 120 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench roofline --json --record
# Notebooks 04-06 (torch.compile's first call on a fresh machine is most of accel's time).
step bench_accel 90 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench accel --json --record
step bench_cnn 60 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench cnn --json --record
# Two cold torch.compile first calls (eager and autocast graphs) are most of levers' time.
step bench_levers 150 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench levers --json --record
step bench_rnn 60 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench rnn --json --record
# Notebooks 07-09 (kernels also writes the Kernel Tuner cache next to its recording).
step bench_kernels 150 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench kernels --json --record
step bench_batching 90 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench batching --json --record
step bench_profile 90 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench profile --json --record
# Notebook 11: attention's backends against sequence length, and decode tokens/s by batch.
step bench_attention 60 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench attention --json --record
# Notebook 12: the Triton kernels compiled (first launches and autotune's 15 configs compile).
step bench_triton 120 json env LABKIT_REFERENCE_DIR="$OUT/reference" \
    "$PYTHON" -m labkit bench triton --json --record

# `make test-gpu` (tools/gpu_notebooks.py, issue 13): every notebook with the GPU visible; no cell
# may raise, each GPU cell must run live and print sane values (bandwidth within the card's
# peak, finite ratios, kernels verified). Without nbclient it runs each notebook as a script.
step gpu_notebooks 300 text "$PYTHON" tools/gpu_notebooks.py --json "$OUT/gpu_notebooks.json" \
    --keep "$OUT/executed"

if "$PYTHON" -c "import pytest" >/dev/null 2>&1; then
    # A test module whose top-level imports are missing here (matplotlib,
    # hypothesis, ...) would be a collection error, and -x would stop on it
    # before any GPU test ran; so such modules are left out, and listed.
    mapfile -t IGNORE < <("$PYTHON" - <<'PY'
import ast, importlib.util, pathlib, sys
local = {p.stem for d in ("tests", "tools") for p in pathlib.Path(d).glob("*.py")} | {"labkit"}
for path in sorted(pathlib.Path("tests").glob("test_*.py")):
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    missing = sorted(n for n in names - local - set(sys.stdlib_module_names)
                     if importlib.util.find_spec(n) is None)
    if missing:
        print(f"--ignore={path}")
        print(f"{path}: missing {', '.join(missing)}", file=sys.stderr)
PY
    )
    # (the reasons went to stderr, i.e. to this script's output)
    step pytest_gpu 180 text "$PYTHON" -m pytest -q -p no:cacheprovider tests -x \
        -k "gpu or cuda or timing or bandwidth or transfers or kernels" ${IGNORE[@]+"${IGNORE[@]}"}
    if ((${#IGNORE[@]})); then
        say "    pytest_gpu left out (missing imports): ${IGNORE[*]//--ignore=/}"
    fi
else
    say "$(printf '%-20s skipped  (pytest is not installed)' pytest_gpu)"
fi

# Execution time of each notebook on this machine (tools/time_notebooks.py): last, because
# it needs ~220 s on a 2-core CPU and the steps above use most of the budget. It needs
# nbclient, nbformat and ipykernel; without them it fails with the pip command to run.
step notebook_times 300 text "$PYTHON" tools/time_notebooks.py --json "$OUT/notebook_times.json"

# Recordings in the package: any this run wrote there (it should not, but then they are
# this run's) join the others; those shipped before go to reference/shipped/ to compare.
for f in labkit/reference/*.json; do
    [[ -e $f ]] || continue
    if [[ $f -nt $MARKER ]]; then
        cp -n "$f" "$OUT/reference/"
    else
        mkdir -p "$OUT/reference/shipped" && cp "$f" "$OUT/reference/shipped/"
    fi
done
rm -f "$MARKER"
say "recordings made by this run, in $OUT/reference: $(cd "$OUT/reference" &&
    ls -- *.json 2>/dev/null | tr '\n' ' ')"
say "done in $((SECONDS - START_S))s; $FAILED step(s) not ok"
((FAILED == 0))
