#!/bin/sh
# Geryon QoS intent 'roce-ecn' for Cumulus Linux (NVUE); geryon render-switch --os cumulus
set -e

# needs Cumulus Linux 5.6 or later (PFC watchdog); older: exit 2, nothing staged
release="${GERYON_OS_RELEASE:-/etc/os-release}"
version=$(sed -n 's/^VERSION_ID="\{0,1\}\([0-9]*\.[0-9]*\).*/\1/p' "$release" 2>/dev/null)
major=${version%%.*}; minor=${version#*.}
if [ -z "$version" ] || [ "$major" -lt 5 ] || { [ "$major" -eq 5 ] && [ "$minor" -lt 6 ]; }; then
    echo "geryon: needs Cumulus Linux 5.6 or later (PFC watchdog); this switch runs ${version:-an unknown release}; nothing staged" >&2
    exit 2
fi
# a command failing part-way: drop the pending revision instead of leaving it half-staged
trap 'rc=$?; [ $rc -eq 0 ] || nv config detach; exit $rc' EXIT

# DSCP -> switch priority (trust DSCP)
nv set qos mapping geryon trust l3
nv set qos mapping geryon dscp 0-23,25,27-45,47,49-63 switch-priority 0
nv set qos mapping geryon dscp 24,26 switch-priority 3
nv set qos mapping geryon dscp 46 switch-priority 5
nv set qos mapping geryon dscp 48 switch-priority 6

# switch priority -> egress queue (NVUE supports only the default-global profile here)
nv set qos egress-queue-mapping default-global switch-priority 0 traffic-class 0
nv set qos egress-queue-mapping default-global switch-priority 3 traffic-class 3
nv set qos egress-queue-mapping default-global switch-priority 5 traffic-class 5
nv set qos egress-queue-mapping default-global switch-priority 6 traffic-class 6

# egress scheduling: strict queues first, DWRR shares of what they leave
nv set qos egress-scheduler geryon traffic-class 6 mode strict
nv set qos egress-scheduler geryon traffic-class 5 mode strict
nv set qos egress-scheduler geryon traffic-class 3 mode dwrr
nv set qos egress-scheduler geryon traffic-class 3 bw-percent 60
nv set qos egress-scheduler geryon traffic-class 0 mode dwrr
nv set qos egress-scheduler geryon traffic-class 0 bw-percent 40

# a lossless buffer pool for the lossless priorities first (by default all of it is lossy)
nv set qos traffic-pool default-lossy memory-percent 50
nv set qos traffic-pool default-lossless memory-percent 50
nv set qos traffic-pool default-lossless switch-priority 3,5

# PFC on the lossless switch priorities
nv set qos pfc geryon switch-priority 3,5
nv set qos pfc geryon tx enable
nv set qos pfc geryon rx enable
nv set qos pfc geryon cable-length 5

# ECN marking (mark) or random early drop (drop) per queue
nv set qos congestion-control geryon traffic-class 5 ecn enable
nv set qos congestion-control geryon traffic-class 5 red disable
nv set qos congestion-control geryon traffic-class 5 min-threshold 150000
nv set qos congestion-control geryon traffic-class 5 max-threshold 1500000
nv set qos congestion-control geryon traffic-class 5 probability 100
nv set qos congestion-control geryon traffic-class 3 ecn enable
nv set qos congestion-control geryon traffic-class 3 red disable
nv set qos congestion-control geryon traffic-class 3 min-threshold 150000
nv set qos congestion-control geryon traffic-class 3 max-threshold 1500000
nv set qos congestion-control geryon traffic-class 3 probability 100
nv set qos congestion-control geryon traffic-class 0 ecn disable
nv set qos congestion-control geryon traffic-class 0 red enable
nv set qos congestion-control geryon traffic-class 0 min-threshold 200000
nv set qos congestion-control geryon traffic-class 0 max-threshold 2000000
nv set qos congestion-control geryon traffic-class 0 probability 20

# PFC watchdog: acts after 4 polls of 100 ms (400 ms);
# NVUE restores after a quiet poll (restoration_time 2000 ms is not settable)
nv set qos pfc-watchdog polling-interval 100
nv set qos pfc-watchdog robustness 4

# the selected ports (18)
nv set interface swp1-swp16,swp31-swp32 qos mapping profile geryon
nv set interface swp1-swp16,swp31-swp32 qos egress-scheduler profile geryon
nv set interface swp1-swp16,swp31-swp32 qos pfc profile geryon
nv set interface swp1-swp16,swp31-swp32 qos congestion-control profile geryon
nv set interface swp1-swp16,swp31-swp32 qos pfc-watchdog state enable

# staged only; the rollout: nv config diff; nv config apply --confirm 300s -y; check;
# nv config apply --confirm-yes; nv config save (unconfirmed, NVUE rolls back after 300 s)
