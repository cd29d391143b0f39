"""Your own training jobs: a function ``train(ctx)`` that hadar runs in leases on the cluster's GPUs.

A job file names the function (``entrypoint: FILE.py:FUNCTION`` or
``package.module:FUNCTION``); every lease of the job calls it once on every GPU of
the lease with a ``Context``::

    def train(ctx):
        model = Net().to(ctx.device)
        opt = torch.optim.SGD(model.parameters(), lr=ctx.args.get("lr", 0.1))
        state = ctx.load_state()                    # None at the first start
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
        net = ctx.data_parallel(model)              # DDP on a multi-GPU lease, else the model
        for step in ctx.steps():                    # stops at the lease's end or the job's last step
            loss = train_one_batch(net, opt, step)
        ctx.report(loss=float(loss))
        ctx.save_state({"model": model.state_dict(), "optimizer": opt.state_dict()})

The runtime owns leases, checkpoints, process groups and measurement; the function owns
the model. ``docs/jobs.md`` is the guide. This package imports neither Ray nor torch:
``hadar.job.runner.run_lease`` runs a lease in any process (``python -m hadar.job``
runs one from the command line), and the Ray worker actors call it.
"""

from hadar.job.context import Context
from hadar.job.entrypoint import check as check_entrypoint
from hadar.job.lease import LeaseOutcome, LeaseSpec

__all__ = ["Context", "LeaseOutcome", "LeaseSpec", "check_entrypoint"]
