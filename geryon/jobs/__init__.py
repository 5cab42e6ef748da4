"""Network priority across jobs: a cluster view of training jobs in etcd, and each job's band of classes.

A job's chief registers its tasks, hosts and measured intensity (registration, chief) under a lease it
keeps alive; a stateless controller (controller, elected through an etcd lease) ranks the jobs and
shares the fabric's k queues out as bands (bands: pure), written back in one transaction; agents and
tasks follow their host's key (watch). docs/jobs.md has the key layout and the policy.
"""
