"""hadar on Slurm: hadar decides what runs where each round, Slurm runs the jobs (``SlurmExecutor``).

The cluster comes from ``sinfo`` (typed GPU GRES, one type per node), each lease is a Slurm batch job
that hadar writes, submits held, pins to its node and releases (``hadar.slurm.executor``); the job side
is ``python -m hadar.slurm.lease``. Nothing here imports Ray. See docs/slurm.md.
"""
