"""Verifiers' NeMo Gym taskset with its tools kept on Gym's HTTP contract (``POST /<tool>``).

Runs in the Verifiers environment (``.cache/verifiers-env``), imported by Verifiers' loader as
taskset id ``verifiers_gym_http`` (the module must be on ``PYTHONPATH``).

verifiers 0.4.0's ``NeMoGymTask.setup`` switches to MCP whenever the ``/seed_session`` answer
has an ``mcp`` block, and the bridge's answer always has one: there is no setting that keeps the
HTTP path. This subclass runs the same ``setup`` and then forgets the MCP endpoint it found, so
``NeMoGymToolset.call_tool`` takes its other branch: ``POST <resources_url>/<tool>`` with the seed
answer's cookies (the tools offered are the row's ``responses_create_params.tools``). Nothing
else differs from ``--env.taskset.id nemo-gym`` (same reward function, same ``/verify``).
"""

from collections.abc import Iterator

from verifiers.v1.runtimes import Runtime
from verifiers.v1.taskset import Taskset
from verifiers.v1.tasksets.nemo_gym import NeMoGymConfig, NeMoGymEnv, NeMoGymTask, NeMoGymTaskset
from verifiers.v1.trace import Trace


class NeMoGymHTTPTask(NeMoGymTask):
    async def setup(self, trace: Trace, runtime: Runtime) -> None:
        await super().setup(trace, runtime)
        trace.info["seed_mcp_url"] = trace.state.mcp_url  # what Verifiers would have used
        trace.state.mcp_url = None
        trace.state.mcp_headers = {}


class NeMoGymHTTPTaskset(NeMoGymTaskset, Taskset[NeMoGymHTTPTask, NeMoGymConfig]):
    def load(self) -> Iterator[NeMoGymHTTPTask]:  # type: ignore[override]
        for task in super().load():
            yield NeMoGymHTTPTask(task.data, task.config)


__all__ = ["NeMoGymEnv", "NeMoGymHTTPTaskset"]
