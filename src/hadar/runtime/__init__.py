"""The real runtime: the same Engine, policies and planners drive real PyTorch
training on a Ray cluster (``hadar run``).

Only the executor (``RayExecutor``) and the clock (``WallClock``) differ from
the simulator. Ray and torch are imported lazily by the modules that need
them, so ``import hadar`` and ``hadar simulate`` never load them.
"""
