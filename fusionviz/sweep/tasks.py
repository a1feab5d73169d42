"""Ray remote functions of a sweep (imported only by the Ray engine: this module imports ray).

Rules:

1. Checks and input plans take one CPU each, so ``num_cpus=N`` runs N at a time.
2. A timing task also holds one unit of :data:`BENCH_RESOURCE`: every node has one, so at most
   one benchmark runs per node at a time (the benchmark runner's machine lock queues any other
   benchmark on the machine as well).
3. Every task is retried ``max_retries`` times when its worker process dies (killed, out of
   memory); the driver writes an error row once the retries are spent.
"""

from __future__ import annotations

import logging

import ray

from fusionviz.sweep import work

logger = logging.getLogger(__name__)

#: The custom resource of which each node has one unit; each timing task holds it.
BENCH_RESOURCE = "fusionviz_bench"
#: Retries of a task whose worker died (rule 3).
MAX_RETRIES = 2


@ray.remote(num_cpus=1, max_retries=MAX_RETRIES)
def plan_task(ref, data):
    """:func:`fusionviz.sweep.work.plan_model` in a Ray worker."""
    return work.plan_model(ref, data)


@ray.remote(num_cpus=1, max_retries=MAX_RETRIES)
def check_task(ref, data, plan, variant, backends, crash):
    """:func:`fusionviz.sweep.work.check_cell` in a Ray worker."""
    return work.check_cell(ref, data, plan, variant, backends, crash)


@ray.remote(num_cpus=1, max_retries=MAX_RETRIES, resources={BENCH_RESOURCE: 1})
def time_task(ref, data, plan, variant, backend, min_time_s):
    """:func:`fusionviz.sweep.work.time_cell` in a Ray worker holding the benchmark resource."""
    return work.time_cell(ref, data, plan, variant, backend, min_time_s=min_time_s)
