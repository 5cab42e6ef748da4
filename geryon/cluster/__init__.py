"""The local TensorFlow cluster: what the demo, the threshold profiler and the benches run TF on.

Modules: `task` (one PS or worker process: `python -m geryon.cluster.task SPEC_JSON`), `protocol` (the
lines those processes print: READY, the training loop's MARKER), `models` (the model zoo they train),
`procs` (reading, waiting for and stopping such processes) and `local` (a cluster of task processes on
loopback, for the benches and the in-cluster profiler's tests).
"""
