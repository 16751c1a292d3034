#!/usr/bin/env bash
# Published-accuracy check through the full disaggregated pipeline (separate sampler, loader and
# trainer processes): mean test accuracy of 3 seeds, model selected at the best validation epoch.
# Usage: bench/accuracy.sh [DATASET MODEL [extra argosy train flags]]
set -euo pipefail
DATA=${DATASETS:-../shared/datasets}
run() {  # dataset model flags...
  local ds=$1 model=$2; shift 2
  for seed in 0 1 2; do
    argosy train --data "$DATA/$ds.npz" --model "$model" --partition-method grem --parts 4 --seed "$seed" \
      --run-dir "runs/acc-$ds-$model-$seed" --json "$@" 2>/dev/null | tail -1
  done | python -c "
import sys, json, statistics as st
rows = [json.loads(l) for l in sys.stdin]
accs = [100 * r['test_accuracy'] for r in rows]
print(f'$ds $model: test accuracy {st.mean(accs):.2f} (seeds: ' + ', '.join(f'{a:.1f}' for a in accs) + ')')"
}
if [ $# -ge 2 ]; then run "$@"; exit; fi
COMMON="--epochs 200 --batch-size 256 --normalize-features"
run cora gcn $COMMON --fanouts=-1,-1
run citeseer gcn $COMMON --fanouts=-1,-1
run cora sage $COMMON --fanouts=-1,-1 --hidden 64
