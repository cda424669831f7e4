#!/usr/bin/env bash
# The unit tests and nbval over every notebook under a numeric profile other than this
# machine's: the committed outputs are one CPU's rounding, and a reader's laptop is another
# CPU. What a profile may change, a notebook must either not print at that precision or
# print in a `# NBVAL_IGNORE_OUTPUT` cell with its property asserted next to it
# (docs/CONVENTIONS.md, "Outputs on another CPU").
#
#   bash tools/book/nbval_profiles.sh other-cpu                      # tests/ and notebooks/
#   bash tools/book/nbval_profiles.sh busy notebooks/11_decoding.ipynb   # some notebooks
#   bash tools/book/nbval_profiles.sh all                            # (a) to (d), one by one
#
# The profiles:
#   default    (a) as tools/test.sh runs it.
#   other-cpu  (b) another CPU's rounding: ATen's AVX2 kernels instead of AVX-512
#              (ATEN_CPU_CAPABILITY=avx2: softmax, reductions, elementwise ops) and MKL's
#              reproducible "compatible" matrix-multiply path (MKL_CBWR=COMPATIBLE: a GEMM
#              that sums in another order, as MKL on another processor does; on an AMD EPYC
#              MKL_ENABLE_INSTRUCTIONS alone changes no bit), on one OpenMP/MKL thread.
#   threads4   (c) 4 OpenMP, MKL and Rayon (tokenizers) threads.
#   busy       (d) the default while one CPU-burning process per core runs beside it.
# Extra arguments go to pytest (default: tests notebooks). Exits non-zero if any failed.
set -uo pipefail
PROFILE="${1:?usage: bash tools/book/nbval_profiles.sh default|other-cpu|threads4|busy|all [pytest args]}"
shift
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
[ "$#" -gt 0 ] || set -- tests notebooks
export PYTHONHASHSEED=0

run_pytest() {
    "$PY" -m pytest -p no:cacheprovider -q -n 2 --dist loadscope --nbval --nbval-current-env \
        --nbval-sanitize-with tools/book/nbval_sanitize.cfg "$@"
}

run_profile() {
    local name="$1"
    shift
    echo "=== profile $name"
    case "$name" in
    default) run_pytest "$@" ;;
    other-cpu)
        ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
            run_pytest "$@"
        ;;
    threads4)
        OMP_NUM_THREADS=4 MKL_NUM_THREADS=4 RAYON_NUM_THREADS=4 run_pytest "$@"
        ;;
    busy)
        local burners=() n rc
        for ((n = 0; n < $(nproc); n++)); do
            "$PY" -c "while True: pass" &
            burners+=("$!")
        done
        run_pytest "$@"
        rc=$?
        kill "${burners[@]}" 2>/dev/null
        wait "${burners[@]}" 2>/dev/null
        return "$rc"
        ;;
    *)
        echo "unknown profile: $name (default, other-cpu, threads4, busy or all)"
        return 2
        ;;
    esac
}

if [ "$PROFILE" = "all" ]; then
    status=0
    for p in default other-cpu threads4 busy; do
        run_profile "$p" "$@" || status=1
    done
    exit "$status"
fi
run_profile "$PROFILE" "$@"
