#!/bin/sh
# Geryon QoS intent 'geryon-jobs-4class' for Cumulus Linux (NVUE); geryon render-switch --os cumulus
set -e

# needs Cumulus Linux 5.4 or later (per-interface QoS profiles); older: exit 2, nothing staged
release="${GERYON_OS_RELEASE:-/etc/os-release}"
version=$(sed -n 's/^VERSION_ID="\{0,1\}\([0-9]*\.[0-9]*\).*/\1/p' "$release" 2>/dev/null)
major=${version%%.*}; minor=${version#*.}
if [ -z "$version" ] || [ "$major" -lt 5 ] || { [ "$major" -eq 5 ] && [ "$minor" -lt 4 ]; }; then
    echo "geryon: needs Cumulus Linux 5.4 or later (per-interface QoS profiles); this switch runs ${version:-an unknown release}; nothing staged" >&2
    exit 2
fi
# a command failing part-way: drop the pending revision instead of leaving it half-staged
trap 'rc=$?; [ $rc -eq 0 ] || nv config detach; exit $rc' EXIT

# DSCP -> switch priority (trust DSCP)
nv set qos mapping geryon trust l3
nv set qos mapping geryon dscp 0-17,19-25,27-45,47,49-63 switch-priority 2
nv set qos mapping geryon dscp 18 switch-priority 3
nv set qos mapping geryon dscp 26 switch-priority 4
nv set qos mapping geryon dscp 46 switch-priority 5
nv set qos mapping geryon dscp 48 switch-priority 6

# switch priority -> egress queue (NVUE supports only the default-global profile here)
nv set qos egress-queue-mapping default-global switch-priority 2 traffic-class 2
nv set qos egress-queue-mapping default-global switch-priority 3 traffic-class 3
nv set qos egress-queue-mapping default-global switch-priority 4 traffic-class 4
nv set qos egress-queue-mapping default-global switch-priority 5 traffic-class 5
nv set qos egress-queue-mapping default-global switch-priority 6 traffic-class 6

# egress scheduling: strict queues first, DWRR shares of what they leave
nv set qos egress-scheduler geryon traffic-class 6 mode strict
nv set qos egress-scheduler geryon traffic-class 5 mode strict
nv set qos egress-scheduler geryon traffic-class 4 mode strict
nv set qos egress-scheduler geryon traffic-class 3 mode dwrr
nv set qos egress-scheduler geryon traffic-class 3 bw-percent 75
nv set qos egress-scheduler geryon traffic-class 2 mode dwrr
nv set qos egress-scheduler geryon traffic-class 2 bw-percent 25

# the selected ports (32)
nv set interface swp1-swp32 qos mapping profile geryon
nv set interface swp1-swp32 qos egress-scheduler profile geryon

# staged only; the rollout: nv config diff; nv config apply --confirm 300s -y; check;
# nv config apply --confirm-yes; nv config save (unconfirmed, NVUE rolls back after 300 s)
