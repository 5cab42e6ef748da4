#!/bin/sh
# Geryon QoS intent 'minimal' for Cumulus Linux (NVUE); geryon render-switch --os cumulus
set -e

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

# review with `nv config diff`, then `nv config apply`
