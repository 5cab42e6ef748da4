#!/bin/sh
# Geryon switch-port queues (geryon render-switch --os linux)
set -e

# s-a
tc qdisc del dev s-a root 2>/dev/null || true
tc qdisc add dev s-a root handle 1: htb default 10
tc class add dev s-a parent 1: classid 1:1 htb rate 100000000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc class add dev s-a parent 1:1 classid 1:10 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc qdisc add dev s-a parent 1:10 handle 10: bfifo limit 262144
tc filter add dev s-a parent 1: protocol ip prio 1 u32 match ip dsfield 0x00 0xfc flowid 1:10
tc filter add dev s-a parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x00 0xfc flowid 1:10
