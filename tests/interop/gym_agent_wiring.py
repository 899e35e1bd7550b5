"""Run inside the Gym environment (``.gym-env/bin/python``): Gym's own agent code turns a bridge's
``/seed_session`` answer into the MCP entries its harness agents hand to their CLIs.

usage: gym_agent_wiring.py '<JSON: {"seed": {...}, "resources_host": str, "resources_port": int,
                                    "codex_agent_src": str | null, "model_base_url": str,
                                    "row": {...} | null, "codex_bin_dir": str | null}>'

Gym's global config names the resources server at the bridge's host/port, exactly as a Gym
deployment does when its ``resources_server`` is the bridge. Then, with Gym's code unchanged:

* ``responses_api_agents.claude_code_agent`` (installed nemo-gym):
  ``ClaudeCodeAgent._write_rollout_mcp_config(seed, dir)`` -> the ``--mcp-config`` JSON file;
* ``responses_api_agents.codex_agent`` (absent from nemo-gym 0.4.0; its source is taken from a
  later nemo-gym wheel when ``codex_agent_src`` is given): ``CodexAgent._rollout_mcp_servers(seed)``
  and ``_build_config(...)`` rendered by its own ``toml_dumps`` -> the ``config.toml`` text; and,
  given a ``row`` and the Codex CLI's bin dir, ``CodexAgent._create_response(...)``: the agent runs
  ``codex exec --json`` itself with that config (its model provider at ``model_base_url``) and
  converts the events with its own ``parse_exec_jsonl`` into the Responses object it would verify.

Only the CLI installers that the agents' ``model_post_init`` call are stubbed (they would
``npm install -g`` a CLI); nothing that reads the seed metadata is touched. Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from nemo_gym.config_types import BaseServerConfig, ResourcesServerRef
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf

plan = json.loads(sys.argv[1])
seed = plan["seed"]
RESOURCES = "bridge_resources"  # the Gym config's instance name for the resources server
server_client = ServerClient(
    head_server_config=BaseServerConfig(host="127.0.0.1", port=1),
    global_config_dict=OmegaConf.create(
        {
            RESOURCES: {
                "resources_servers": {
                    "example_session_state_mgmt": {
                        "entrypoint": "app.py",
                        "host": plan["resources_host"],
                        "port": plan["resources_port"],
                    }
                }
            }
        }
    ),
)
resources_ref = ResourcesServerRef(type="resources_servers", name=RESOURCES)
out: dict[str, object] = {"nemo_gym_version": __import__("importlib.metadata").metadata.version("nemo-gym")}

# -- claude_code_agent --------------------------------------------------------------------------
import responses_api_agents.claude_code_agent.app as claude_app  # noqa: E402

claude_app.ensure_claude_code = lambda *args, **kwargs: None  # the installer only
claude = claude_app.ClaudeCodeAgent(
    config=claude_app.ClaudeCodeAgentConfig(
        host="127.0.0.1",
        port=2,
        entrypoint="app.py",
        name="claude_code_agent",
        resources_server=resources_ref,
    ),
    server_client=server_client,
)
with tempfile.TemporaryDirectory() as tmp:
    path = claude._write_rollout_mcp_config(seed, Path(tmp))
    out["claude_code_agent"] = {
        "resources_server_base_url": claude._resources_server_base_url(),
        "mcp_config": json.loads(Path(path).read_text()) if path else None,
    }

# -- codex_agent ----------------------------------------------------------------------------------
if plan.get("codex_agent_src"):
    import responses_api_agents  # a namespace package: a later wheel's codex_agent joins it
    from nemo_gym.base_responses_api_agent import SimpleResponsesAPIAgent

    # Compatibility shim, not wiring: later nemo-gym declares the class attribute `ray_enabled` on
    # its server base class; 0.4.0's pydantic base does not know it and would refuse the subclass.
    SimpleResponsesAPIAgent.__class_vars__.add("ray_enabled")

    responses_api_agents.__path__.append(str(Path(plan["codex_agent_src"]) / "responses_api_agents"))
    import responses_api_agents.codex_agent.app as codex_app

    codex_app.ensure_codex = lambda *args, **kwargs: None  # the installer only
    codex = codex_app.CodexAgent(
        config=codex_app.CodexAgentConfig(
            host="127.0.0.1",
            port=3,
            entrypoint="app.py",
            name="codex_agent",
            resources_server=resources_ref,
            codex_version=plan.get("codex_version", "0.171.0"),
            openai_base_url=plan["model_base_url"],
            model="gym-stub-model",
            timeout=180,
        ),
        server_client=server_client,
    )
    mcp_servers = codex._rollout_mcp_servers(seed)
    config = codex._build_config(codex._resolve_call_base_url(None), mcp_servers=mcp_servers)
    out["codex_agent"] = {
        "source": str(Path(codex_app.__file__).resolve()),
        "resources_server_base_url": codex._resources_server_base_url(),
        "mcp_servers": mcp_servers,
        "config": config,
        "config_toml": codex_app.toml_dumps(config),
    }

    if plan.get("row") and plan.get("codex_bin_dir"):
        from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming

        os.environ["PATH"] = plan["codex_bin_dir"] + os.pathsep + os.environ.get("PATH", "")
        params = NeMoGymResponseCreateParamsNonStreaming.model_validate(
            plan["row"]["responses_create_params"]
        )
        response = asyncio.run(codex._create_response(params, mcp_servers=mcp_servers))
        out["codex_agent"]["response"] = response.model_dump(mode="json")  # type: ignore[index]

print(json.dumps(out))
