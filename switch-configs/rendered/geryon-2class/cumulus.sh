#!/bin/sh
# Geryon QoS intent 'geryon-2class' for Cumulus Linux (NVUE); geryon render-switch --os cumulus
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
nv set qos mapping geryon dscp 0-45,47,49-63 switch-priority 3
nv set qos mapping geryon dscp 46 switch-priority 5
nv set qos mapping geryon dscp 48 switch-priority 6

# switch priority -> egress queue (NVUE supports only the default-global profile here)
nv set qos egress-queue-mapping default-global switch-priority 3 traffic-class 3
nv set qos egress-queue-mapping default-global switch-priority 5 traffic-class 5
nv set qos egress-queue-mapping default-global switch-priority 6 traffic-class 6

# egress scheduling: strict queues first, DWRR shares of what they leave
nv set qos egress-scheduler geryon traffic-class 6 mode strict
nv set qos egress-scheduler geryon traffic-class 5 mode strict
nv set qos egress-scheduler geryon traffic-class 3 mode dwrr
nv set qos egress-scheduler geryon traffic-class 3 bw-percent 100

# a lossless buffer pool for the lossless priorities first (by default all of it is lossy)
nv set qos traffic-pool default-lossy memory-percent 50
nv set qos traffic-pool default-lossless memory-percent 50
nv set qos traffic-pool default-lossless switch-priority 3,5

# PFC on the lossless switch priorities
nv set qos pfc geryon switch-priority 3,5
nv set qos pfc geryon tx enable
nv set qos pfc geryon rx enable

# PFC watchdog: acts after 1 polls of 200 ms (200 ms);
# NVUE restores after a quiet poll (restoration_time 200 ms is not settable)
nv set qos pfc-watchdog polling-interval 200
nv set qos pfc-watchdog robustness 1

# the selected ports (32)
nv set interface swp1-swp32 qos mapping profile geryon
nv set interface swp1-swp32 qos egress-scheduler profile geryon
nv set interface swp1-swp32 qos pfc profile geryon
nv set interface swp1-swp32 qos pfc-watchdog state enable

# staged only; the rollout: nv config diff; nv config apply --confirm 300s -y; check;
# nv config apply --confirm-yes; nv config save (unconfirmed, NVUE rolls back after 300 s)
