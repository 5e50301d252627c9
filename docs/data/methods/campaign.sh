#!/bin/sh
# Both calibration methods on all three mechanisms, alternating, one locked calibration at a time
# (2026-11-25 afternoon). Run from the repository root: sh docs/data/methods/campaign.sh
# Appends to docs/data/methods/campaign.log: each command, when it got the lock (UTC), the 1-min
# load average then, its wall time and exit status.
out=docs/data/methods
log=$out/campaign.log
calibrate() {  # method mechanism seed
    name=$1-$2-s$3
    cmd=".venv/bin/cosample calibrate --testbed --prefix ag --method $1 --mechanisms $2 \
--target-ci 0.1 --max-time 120 --warmup 3 --seed $3 --no-progress -d $out/$name.csv -o $out/$name.json"
    flock /tmp/cosample-ovs.lock sh -c '
        start=$(date -u +%s); load=$(cut -d" " -f1 /proc/loadavg)
        printf "%s start %s load %s\n  %s\n" "$1" "$(date -u -d @$start +%H:%M:%S)" "$load" "$2" >> "$3"
        $2 > "$4.out" 2>&1; rc=$?
        printf "%s end %s wall %ss exit %s\n" "$1" "$(date -u +%H:%M:%S)" "$(( $(date -u +%s) - start ))" "$rc" >> "$3"
    ' - "$name" "$cmd" "$log" "$out/$name"
}
seed=300
for round in 1 2; do
    for mechanism in sflow mirror mirror_vxlan; do
        if [ $round = 1 ]; then order="throughput cpu"; else order="cpu throughput"; fi
        for method in $order; do
            calibrate $method $mechanism $seed
            seed=$((seed + 1))
            sleep 5  # let the other helper and the lead take the lock between calibrations
        done
    done
done
echo "campaign done $(date -u +%H:%M:%S)" >> $log
