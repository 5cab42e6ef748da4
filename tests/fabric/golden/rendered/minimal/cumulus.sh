#!/bin/sh
# Geryon QoS intent 'minimal' for Cumulus Linux (NVUE); geryon render-switch --os cumulus
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
nv set qos mapping geryon dscp 0-63 switch-priority 0

# switch priority -> egress queue (NVUE supports only the default-global profile here)
nv set qos egress-queue-mapping default-global switch-priority 0 traffic-class 0

# egress scheduling: strict queues first, DWRR shares of what they leave
nv set qos egress-scheduler geryon traffic-class 0 mode strict

# the selected ports (2)
nv set interface swp1-swp2 qos mapping profile geryon
nv set interface swp1-swp2 qos egress-scheduler profile geryon

# staged only; the rollout: nv config diff; nv config apply --confirm 300s -y; check;
# nv config apply --confirm-yes; nv config save (unconfirmed, NVUE rolls back after 300 s)
