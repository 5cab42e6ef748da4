"""The fabric: one vendor-neutral QoS intent (geryon.fabric.intent) and its renderers for switch OSes
(geryon.fabric.render: SONiC, Cumulus NVUE, Arista EOS and the Linux software switch of the testbed).

The intent schema is documented in geryon/fabric/schema.md; rendered examples live in switch-configs/.
"""
