#!/usr/bin/env bash
# Record the repository's synchronous-PS and 2-PS truth (tests/data/ps-sync, tests/data/ps-traces)
# on the namespace testbed, one run at a time (each run's load average is stored with it).
#
#   sudo bash scripts/record_ps_truth.sh [REPEATS...]     # default: r1 r2
#   sudo bash scripts/record_ps_truth.sh placements       # the W = 3 placement runs only (15 min)
#   sudo bash scripts/record_ps_truth.sh sync-2ps [REPEATS...]  # synchronous, 2 PS (default: r1)
#   sudo bash scripts/record_ps_truth.sh sync-2ps-round-robin [REPEATS...]  # the same, TF's default placement
#   sudo bash scripts/record_ps_truth.sh heterogeneous [REPEATS...]  # every second worker at half speed
#   sudo bash scripts/record_ps_truth.sh heterogeneous-sync [REPEATS...]  # the same, synchronous
#   sudo bash scripts/record_ps_truth.sh heterogeneous-nic [REPEATS...]  # every second worker's link at 50 Mbit/s
#   sudo bash scripts/record_ps_truth.sh flow-shares     # W = 2, 4, 8 with worker 0 tracing its transfers, and W = 8 with every worker tracing (15 min)
#   sudo bash scripts/record_ps_truth.sh sync-held-out [trace | r1 r2 ...]  # a synchronous program none of the constants saw (15 min a repeat)
#   sudo bash scripts/record_ps_truth.sh flow-shares-tcp # W = 8, every worker tracing: slow start after idle off, then ss samples (15 min)
#   sudo bash scripts/record_ps_truth.sh one-gradient [REPEATS...]  # W = 1, 2 with one backup worker, three configurations (5 min a repeat)
#
# Needs root (namespaces, tc) and a venv with tensorflow-cpu and advisor:
#   python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install -e '.[test,tensorflow]'
# About 55 minutes a repeat on a quiet 2-core machine.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-/tmp/tfvenv/bin/python}
REC="$PY scripts/record_ps_traces.py"
SYNC=tests/data/ps-sync
PS2=tests/data/ps-traces
ALL=1,2,3,4,5,6,7,8
step() { echo "== $(date +%T) $*"; "$@" || echo "!! failed: $*"; }

# W = 3 with the small variables moved between the PS, two repeats (tests/data/ps-traces/w3-placements)
if [ "${1:-}" = placements ]; then
  for r in r1 r2; do
    step $REC --ps 1 --measure 3 --out $PS2/w3-placements/one-ps.$r.measured.json.gz
    for placement in round-robin step-apart biases-apart last-ps; do
      step $REC --ps 2 --placement $placement --measure 3 --out $PS2/w3-placements/$placement.$r.measured.json.gz
    done
  done
  exit 0
fi

# synchronous jobs with 2 PS, greedy placement by bytes (sync-2ps) or TF's default round-robin
# (sync-2ps-round-robin) (tests/data/ps-sync/two-ps): their own one-worker profiles, then W = 1..8
# per repeat (about 20 minutes a repeat)
if [ "${1:-}" = sync-2ps ] || [ "${1:-}" = sync-2ps-round-robin ]; then
  if [ "$1" = sync-2ps ]; then placement=greedy; tag=ps2greedy; else placement=round-robin; tag=ps2; fi
  shift
  TWO=$SYNC/two-ps
  for model in mlp cnn; do
    [ -e $TWO/${model}_${tag}_bw100.trace.json.gz ] ||
      step $REC --sync --ps 2 --placement $placement --model $model --out $TWO/${model}_${tag}_bw100.trace.json.gz
  done
  for r in "${@:-r1}"; do
    for model in mlp cnn; do
      step $REC --sync --ps 2 --placement $placement --model $model --measure $ALL --measure-steps 60 --skip 10 \
        --out $TWO/${model}_${tag}_bw100.$r.measured.json.gz
    done
  done
  exit 0
fi

# heterogeneous workers: every second worker's emulated compute at half speed, 1 PS
# (tests/data/ps-traces/heterogeneous; the profiles are the one-PS traces one folder up)
if [ "${1:-}" = heterogeneous ]; then
  shift
  for r in "${@:-r1}"; do
    for model in cnn mlp; do
      step $REC --ps 1 --model $model --worker-speeds 1,0.5 --measure $ALL --measure-steps 60 --skip 10 \
        --out $PS2/heterogeneous/${model}_ps1_bw100_half.$r.measured.json.gz
    done
  done
  exit 0
fi

# heterogeneous NICs: every second worker's own link shaped to 50 Mbit/s both ways, the others
# unshaped, 1 PS at 100 Mbit/s (tests/data/ps-traces/heterogeneous-nic; the profiles are the one-PS
# traces one folder up)
if [ "${1:-}" = heterogeneous-nic ]; then
  shift
  for r in "${@:-r1}"; do
    for model in cnn mlp; do
      step $REC --ps 1 --model $model --worker-mbits 0,50 --measure $ALL --measure-steps 60 --skip 10 \
        --out $PS2/heterogeneous-nic/${model}_ps1_bw100_nic50.$r.measured.json.gz
    done
  done
  exit 0
fi

# how the flows share the link: the one-PS MLP and CNN, synchronous and asynchronous, W = 2, 4, 8,
# worker 0 tracing 20 of its steps (tests/data/flow-shares; python -m benchmarks.flow_shares)
if [ "${1:-}" = flow-shares ]; then
  for model in mlp cnn; do
    for mode in sync async; do
      step $REC $([ $mode = sync ] && echo --sync) --model $model --mbit 100 --measure 2,4,8 --measure-steps 60 \
        --skip 10 --trace-steps 20 --out tests/data/flow-shares/${model}_${mode}_bw100.traced.measured.json.gz
    done
  done
  for model in cnn mlp; do  # one barrier round seen across all workers
    step $REC --sync --model $model --mbit 100 --measure 8 --measure-steps 60 --skip 10 --trace-steps 20 \
      --trace-workers 8 --out tests/data/flow-shares/${model}_sync_bw100_all8.traced.measured.json.gz
  done
  # the MLP with a 20 ms queue instead of 100 ms, then a second run with each queue
  step $REC --sync --model mlp --mbit 100 --queue-ms 20 --measure 8 --measure-steps 60 --skip 10 --trace-steps 20 \
    --trace-workers 8 --out tests/data/flow-shares/mlp_sync_bw100_q20_all8.traced.measured.json.gz
  for q in 100 20; do
    tag=$([ $q = 20 ] && echo _q20)
    step $REC --sync --model mlp --mbit 100 --queue-ms $q --measure 8 --measure-steps 60 --skip 10 --trace-steps 20 \
      --trace-workers 8 --out tests/data/flow-shares/mlp_sync_bw100${tag}_all8.r2.traced.measured.json.gz
  done
  exit 0
fi

# what holds an early push back (tests/data/flow-shares, *_ssai0_all8 and *_tcp_all8): the same W = 8
# runs with TCP's slow start after idle off in every namespace, then with ss samples of the PS's
# connections (python -m benchmarks.flow_shares --tcp) (about 15 minutes)
if [ "${1:-}" = flow-shares-tcp ]; then
  for spec in "mlp 100" "mlp 20" "cnn 100"; do
    set -- $spec
    tag=$([ $2 = 20 ] && echo _q20)
    step $REC --sync --model $1 --mbit 100 --queue-ms $2 --measure 8 --measure-steps 60 --skip 10 --trace-steps 20 \
      --trace-workers 8 --sysctl net.ipv4.tcp_slow_start_after_idle=0 \
      --out tests/data/flow-shares/$1_sync_bw100${tag}_ssai0_all8.traced.measured.json.gz
  done
  for spec in "mlp 100" "mlp 20" "cnn 100"; do
    set -- $spec
    tag=$([ $2 = 20 ] && echo _q20)
    step $REC --sync --model $1 --mbit 100 --queue-ms $2 --measure 8 --measure-steps 40 --skip 10 --trace-steps 20 \
      --trace-workers 8 --tcp-sample-ms 20 --out tests/data/flow-shares/$1_sync_bw100${tag}_tcp_all8.traced.measured.json.gz
  done
  exit 0
fi

# what tracing costs a step (tests/data/tracing-cost): the CNN at 100 Mbit/s, asynchronous and
# synchronous, per repeat a one-worker profile (the hook times 20 untraced steps after the traced
# ones) and a measured one-worker run, five repeats (about 8 minutes)
if [ "${1:-}" = tracing-cost ]; then
  COST=tests/data/tracing-cost
  for r in r1 r2 r3 r4 r5; do
    for kind in async sync; do
      flag=; [ $kind = sync ] && flag=--sync
      step $REC $flag --model cnn --mbit 100 --out $COST/cnn_$kind.$r.trace.json.gz
      step $REC $flag --model cnn --mbit 100 --measure 1 --out $COST/cnn_$kind.$r.measured.json.gz
    done
  done
  exit 0
fi

# a synchronous program none of the synchronous model's constants saw (tests/data/ps-sync/held-out):
# the mlpmid (the MLP with four times its compute) at 100 Mbit/s, its one-worker profile, then (after
# its predictions are written down: python -m benchmarks.sync_accuracy --held-out --write-predictions)
# W = 1..8 (about 15 minutes)
if [ "${1:-}" = sync-held-out ]; then
  HELD=$SYNC/held-out
  [ -e $HELD/mlpmid_bw100.trace.json.gz ] || step $REC --sync --model mlpmid --mbit 100 --out $HELD/mlpmid_bw100.trace.json.gz
  [ "${2:-}" = trace ] && exit 0
  shift
  for r in "${@:-r1}"; do
    step $REC --sync --model mlpmid --mbit 100 --measure $ALL --measure-steps 60 --skip 10 \
      --out $HELD/mlpmid_bw100.$r.measured.json.gz
  done
  exit 0
fi

# one gradient per update (W = 2 with one backup worker) on three configurations the drifting rule
# was not built on (tests/data/ps-sync/one-gradient): their profiles, then (after their predictions
# are written down: python -m benchmarks.sync_accuracy --one-gradient --write-predictions) W = 1, 2
if [ "${1:-}" = one-gradient ]; then
  shift
  ONE=$SYNC/one-gradient
  CONFIGS="mlpmid:100 cnn:50 mlp:50"
  for c in $CONFIGS; do
    model=${c%:*} mbit=${c#*:}
    [ -e $ONE/${model}_bw${mbit}.trace.json.gz ] ||
      step $REC --sync --model $model --mbit $mbit --out $ONE/${model}_bw${mbit}.trace.json.gz
  done
  [ -e $ONE/predictions-before-measuring.json ] || { echo "write the predictions down first"; exit 1; }
  for r in "${@:-r1}"; do
    for c in $CONFIGS; do
      model=${c%:*} mbit=${c#*:}
      step $REC --sync --backup 1 --model $model --mbit $mbit --measure 1,2 --measure-steps 60 --skip 10 \
        --out $ONE/${model}_bw${mbit}_backup1.$r.measured.json.gz
    done
  done
  exit 0
fi

# heterogeneous workers under a barrier: synchronous, every second worker at half speed, 1 PS
# (tests/data/ps-sync/heterogeneous; the profiles are the synchronous traces one folder up)
if [ "${1:-}" = heterogeneous-sync ]; then
  shift
  for r in "${@:-r1}"; do
    for model in cnn mlp; do
      step $REC --sync --ps 1 --model $model --worker-speeds 1,0.5 --measure $ALL --measure-steps 60 --skip 10 \
        --out $SYNC/heterogeneous/${model}_bw100_half.$r.measured.json.gz
    done
  done
  exit 0
fi

# the one-worker profiles, recorded by the product's hook (what a prediction reads)
for model in mlp cnn; do
  for mbit in 100 50; do
    [ -e $SYNC/${model}_bw${mbit}.trace.json.gz ] ||
      step $REC --sync --model $model --mbit $mbit --out $SYNC/${model}_bw${mbit}.trace.json.gz
  done
done

for r in "${@:-r1 r2}"; do
  for mbit in 100 50; do
    for model in mlp cnn; do
      step $REC --sync --model $model --mbit $mbit --measure $ALL --measure-steps 60 --skip 10 \
        --out $SYNC/${model}_bw${mbit}.$r.measured.json.gz
    done
  done
  for model in mlp cnn; do
    step $REC --sync --backup 1 --model $model --mbit 100 --measure 2,3,4,5,6,7,8 --measure-steps 60 --skip 10 \
      --out $SYNC/${model}_bw100_backup1.$r.measured.json.gz
  done
  step $REC --ps 2 --measure $ALL --measure-steps 60 --skip 10 --out $PS2/mlp_ps2_bw100.$r.measured.json.gz
  step $REC --ps 2 --placement greedy --measure $ALL --measure-steps 60 --skip 10 \
    --out $PS2/mlp_ps2greedy_bw100.$r.measured.json.gz
done
echo "== $(date +%T) done"
