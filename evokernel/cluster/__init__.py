"""Stage: evaluation on a Dask cluster (issue 16), beside the local engine (evokernel.engine).

    connect.py    the cluster: a local one for this host's GPUs, or a scheduler's address;
                  ``require_distributed`` names the ``dask`` extra when it is missing
    tasks.py      what runs on the Dask workers: builds on CPU workers, and on each GPU
                  worker a ``GpuSlot`` that holds the engine's own WorkerHandle
    evaluator.py  ``DaskEvaluator``: the Evaluator protocol over the cluster, made by
                  evokernel.engine.factory.make_evaluator

dask.distributed is imported lazily (only when a Dask evaluator is made), so the local engine,
the CPU tests and ``import evokernel`` never need it. The run store and every LLM call stay in
the driver; Dask workers never run candidate code themselves: a GPU worker's candidates run in
the engine's contained worker process (evokernel.engine.handle, evokernel.sandbox), a build in
the builder's contained subprocess (evokernel.build.builder).
"""
