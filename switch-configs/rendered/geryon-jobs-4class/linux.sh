#!/bin/sh
# Geryon switch-port queues (geryon render-switch --os linux)
set -e

# s-ps0
tc qdisc del dev s-ps0 root 2>/dev/null || true
tc qdisc add dev s-ps0 root handle 1: htb default 13
tc class add dev s-ps0 parent 1: classid 1:1 htb rate 100000000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc class add dev s-ps0 parent 1:1 classid 1:10 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc qdisc add dev s-ps0 parent 1:10 handle 10: bfifo limit 262144
tc class add dev s-ps0 parent 1:1 classid 1:11 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 1 quantum 6056
tc qdisc add dev s-ps0 parent 1:11 handle 11: bfifo limit 262144
tc class add dev s-ps0 parent 1:1 classid 1:12 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 2 quantum 196608
tc qdisc add dev s-ps0 parent 1:12 handle 12: bfifo limit 262144
tc class add dev s-ps0 parent 1:1 classid 1:13 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 2 quantum 65536
tc qdisc add dev s-ps0 parent 1:13 handle 13: bfifo limit 262144
tc filter add dev s-ps0 parent 1: protocol ip prio 1 u32 match ip dsfield 0x28 0xfc flowid 1:13
tc filter add dev s-ps0 parent 1: protocol ip prio 1 u32 match ip dsfield 0x48 0xfc flowid 1:12
tc filter add dev s-ps0 parent 1: protocol ip prio 1 u32 match ip dsfield 0x68 0xfc flowid 1:11
tc filter add dev s-ps0 parent 1: protocol ip prio 1 u32 match ip dsfield 0xb8 0xfc flowid 1:10
tc filter add dev s-ps0 parent 1: protocol ip prio 1 u32 match ip dsfield 0xc0 0xfc flowid 1:10
tc filter add dev s-ps0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x28 0xfc flowid 1:13
tc filter add dev s-ps0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x48 0xfc flowid 1:12
tc filter add dev s-ps0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x68 0xfc flowid 1:11
tc filter add dev s-ps0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xb8 0xfc flowid 1:10
tc filter add dev s-ps0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xc0 0xfc flowid 1:10

# s-ps1
tc qdisc del dev s-ps1 root 2>/dev/null || true
tc qdisc add dev s-ps1 root handle 1: htb default 13
tc class add dev s-ps1 parent 1: classid 1:1 htb rate 100000000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc class add dev s-ps1 parent 1:1 classid 1:10 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc qdisc add dev s-ps1 parent 1:10 handle 10: bfifo limit 262144
tc class add dev s-ps1 parent 1:1 classid 1:11 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 1 quantum 6056
tc qdisc add dev s-ps1 parent 1:11 handle 11: bfifo limit 262144
tc class add dev s-ps1 parent 1:1 classid 1:12 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 2 quantum 196608
tc qdisc add dev s-ps1 parent 1:12 handle 12: bfifo limit 262144
tc class add dev s-ps1 parent 1:1 classid 1:13 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 2 quantum 65536
tc qdisc add dev s-ps1 parent 1:13 handle 13: bfifo limit 262144
tc filter add dev s-ps1 parent 1: protocol ip prio 1 u32 match ip dsfield 0x28 0xfc flowid 1:13
tc filter add dev s-ps1 parent 1: protocol ip prio 1 u32 match ip dsfield 0x48 0xfc flowid 1:12
tc filter add dev s-ps1 parent 1: protocol ip prio 1 u32 match ip dsfield 0x68 0xfc flowid 1:11
tc filter add dev s-ps1 parent 1: protocol ip prio 1 u32 match ip dsfield 0xb8 0xfc flowid 1:10
tc filter add dev s-ps1 parent 1: protocol ip prio 1 u32 match ip dsfield 0xc0 0xfc flowid 1:10
tc filter add dev s-ps1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x28 0xfc flowid 1:13
tc filter add dev s-ps1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x48 0xfc flowid 1:12
tc filter add dev s-ps1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x68 0xfc flowid 1:11
tc filter add dev s-ps1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xb8 0xfc flowid 1:10
tc filter add dev s-ps1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xc0 0xfc flowid 1:10

# s-wk0
tc qdisc del dev s-wk0 root 2>/dev/null || true
tc qdisc add dev s-wk0 root handle 1: htb default 13
tc class add dev s-wk0 parent 1: classid 1:1 htb rate 100000000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc class add dev s-wk0 parent 1:1 classid 1:10 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc qdisc add dev s-wk0 parent 1:10 handle 10: bfifo limit 262144
tc class add dev s-wk0 parent 1:1 classid 1:11 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 1 quantum 6056
tc qdisc add dev s-wk0 parent 1:11 handle 11: bfifo limit 262144
tc class add dev s-wk0 parent 1:1 classid 1:12 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 2 quantum 196608
tc qdisc add dev s-wk0 parent 1:12 handle 12: bfifo limit 262144
tc class add dev s-wk0 parent 1:1 classid 1:13 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 2 quantum 65536
tc qdisc add dev s-wk0 parent 1:13 handle 13: bfifo limit 262144
tc filter add dev s-wk0 parent 1: protocol ip prio 1 u32 match ip dsfield 0x28 0xfc flowid 1:13
tc filter add dev s-wk0 parent 1: protocol ip prio 1 u32 match ip dsfield 0x48 0xfc flowid 1:12
tc filter add dev s-wk0 parent 1: protocol ip prio 1 u32 match ip dsfield 0x68 0xfc flowid 1:11
tc filter add dev s-wk0 parent 1: protocol ip prio 1 u32 match ip dsfield 0xb8 0xfc flowid 1:10
tc filter add dev s-wk0 parent 1: protocol ip prio 1 u32 match ip dsfield 0xc0 0xfc flowid 1:10
tc filter add dev s-wk0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x28 0xfc flowid 1:13
tc filter add dev s-wk0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x48 0xfc flowid 1:12
tc filter add dev s-wk0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x68 0xfc flowid 1:11
tc filter add dev s-wk0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xb8 0xfc flowid 1:10
tc filter add dev s-wk0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xc0 0xfc flowid 1:10

# s-wk1
tc qdisc del dev s-wk1 root 2>/dev/null || true
tc qdisc add dev s-wk1 root handle 1: htb default 13
tc class add dev s-wk1 parent 1: classid 1:1 htb rate 100000000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc class add dev s-wk1 parent 1:1 classid 1:10 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 0 quantum 6056
tc qdisc add dev s-wk1 parent 1:10 handle 10: bfifo limit 262144
tc class add dev s-wk1 parent 1:1 classid 1:11 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 1 quantum 6056
tc qdisc add dev s-wk1 parent 1:11 handle 11: bfifo limit 262144
tc class add dev s-wk1 parent 1:1 classid 1:12 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 2 quantum 196608
tc qdisc add dev s-wk1 parent 1:12 handle 12: bfifo limit 262144
tc class add dev s-wk1 parent 1:1 classid 1:13 htb rate 8000bit ceil 100000000bit burst 65536 cburst 65536 prio 2 quantum 65536
tc qdisc add dev s-wk1 parent 1:13 handle 13: bfifo limit 262144
tc filter add dev s-wk1 parent 1: protocol ip prio 1 u32 match ip dsfield 0x28 0xfc flowid 1:13
tc filter add dev s-wk1 parent 1: protocol ip prio 1 u32 match ip dsfield 0x48 0xfc flowid 1:12
tc filter add dev s-wk1 parent 1: protocol ip prio 1 u32 match ip dsfield 0x68 0xfc flowid 1:11
tc filter add dev s-wk1 parent 1: protocol ip prio 1 u32 match ip dsfield 0xb8 0xfc flowid 1:10
tc filter add dev s-wk1 parent 1: protocol ip prio 1 u32 match ip dsfield 0xc0 0xfc flowid 1:10
tc filter add dev s-wk1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x28 0xfc flowid 1:13
tc filter add dev s-wk1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x48 0xfc flowid 1:12
tc filter add dev s-wk1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x68 0xfc flowid 1:11
tc filter add dev s-wk1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xb8 0xfc flowid 1:10
tc filter add dev s-wk1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xc0 0xfc flowid 1:10
