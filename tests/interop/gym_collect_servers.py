"""Run inside the Gym environment (``.gym-env/bin/python``): Gym's head server and ``simple_agent``
agent servers, so Gym's own collection command (``ng_collect_rollouts``) can collect rollouts.

usage: gym_collect_servers.py '<JSON plan>'

    {"head": {"host": str, "port": int},
     "model": {"host": str, "port": int},                # the stub model server (Gym's contract)
     "resources": {"<instance>": {"env": str, "host": str, "port": int}},
     "agents": {"<agent>": {"resources": "<instance>", "port": int, "max_steps": int | null}},
     "ready_file": str}

The global config is built as Gym's runner builds it (``GlobalConfigDictParser().parse`` of the
given server blocks, as ``bridge/upstream/boot.py`` does): a ``policy_model`` model server at the
stub's address, one resources-server instance per entry at the host/port given (the bridge's, or
the Gym server's own), and one ``simple_agent`` per agent naming its resources server and
``policy_model``. It is published in ``NEMO_GYM_CONFIG_DICT`` as Gym hands it to its servers.

The head server is Gym's ``HeadServer`` (it serves ``/global_config_dict_yaml``, from which
``ng_collect_rollouts`` finds the agents). Each agent is nemo-gym's own
``responses_api_agents.simple_agent.app.SimpleAgent``, constructed and set up as its
``run_webserver()`` does, except that no Ray cluster is started (``initialize_ray``: simple_agent
does not use Ray) and uvicorn is started here (``gym_serve.py``), all servers on one event loop
(Gym's aiohttp client is one per process). When every server answers, ``ready_file`` receives the global config as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

plan = json.loads(sys.argv[1])

from gym_serve import serve_all  # noqa: E402
from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

MODEL = "policy_model"
initial: dict[str, object] = {
    "head_server": {"host": plan["head"]["host"], "port": plan["head"]["port"]},
    MODEL: {
        "responses_api_models": {
            "stub_model": {
                "entrypoint": "app.py",
                "host": plan["model"]["host"],
                "port": plan["model"]["port"],
            }
        }
    },
}
for instance, spec in plan["resources"].items():
    initial[instance] = {
        "resources_servers": {
            spec["env"]: {
                "entrypoint": "app.py",
                "domain": "other",
                "host": spec["host"],
                "port": spec["port"],
            }
        }
    }
for agent, spec in plan["agents"].items():
    block: dict[str, object] = {
        "entrypoint": "app.py",
        "host": "127.0.0.1",
        "port": spec["port"],
        "resources_server": {"type": "resources_servers", "name": spec["resources"]},
        "model_server": {"type": "responses_api_models", "name": MODEL},
    }
    if spec.get("max_steps"):
        block["max_steps"] = spec["max_steps"]
    initial[agent] = {"responses_api_agents": {"simple_agent": block}}

global_config = GlobalConfigDictParser().parse(
    GlobalConfigDictParserConfig(
        initial_global_config_dict=OmegaConf.create(initial),
        skip_load_from_cli=True,
        skip_load_from_dotenv=True,
    )
)
os.environ["NEMO_GYM_CONFIG_DICT"] = OmegaConf.to_yaml(global_config)

from nemo_gym.config_types import BaseServerConfig  # noqa: E402
from nemo_gym.server_utils import HeadServer, ServerClient  # noqa: E402
from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentConfig  # noqa: E402

head_config = BaseServerConfig.model_validate(OmegaConf.to_container(global_config["head_server"]))
apps = [(HeadServer(config=head_config).setup_webserver(), head_config.host, head_config.port)]
for agent in plan["agents"]:
    block = OmegaConf.to_container(global_config[agent]["responses_api_agents"]["simple_agent"], resolve=True)
    config = SimpleAgentConfig.model_validate({**block, "name": agent})  # type: ignore[dict-item]
    server = SimpleAgent(
        config=config,
        server_client=ServerClient(head_server_config=head_config, global_config_dict=global_config),
    )
    app = server.setup_webserver()
    server.setup_liveness(app)
    server.setup_exception_middleware(app)
    apps.append((app, config.host, config.port))


serve_all(
    apps,
    Path(plan["ready_file"]),
    OmegaConf.to_container(global_config),
    f"gym_collect_servers: head and {len(apps) - 1} simple_agent servers up",
)
