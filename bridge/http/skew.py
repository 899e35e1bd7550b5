"""Version skew, said in one line: an upstream on an older nemo-gym refusing fields a newer Gym sends.

Gym's request models forbid unknown keys (``responses_create_params`` is ``extra="forbid"``), so a
Gym 0.7 agent's ``/verify`` against a nemo-gym 0.4.0 upstream gets 422 ``extra_forbidden`` for the
fields 0.7 added, each ``null``, and the reason (two Gym versions) is nowhere in the answer.
``annotate`` keeps the upstream's answer as it came (status, body, headers) and, when every refused
field is one a later nemo-gym added, adds ``_bridge.version_skew``: one line naming the upstream's
version, the fields, and how to run a matching upstream.

``NEWER_GYM_FIELDS`` was measured from the wheels: ``model_fields`` of
``NeMoGymResponseCreateParamsNonStreaming`` in nemo-gym 0.7.0 minus those in 0.4.0.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from bridge import exactjson
from bridge.http.responses import add_cookies, upstream_response
from bridge.upstream import UpstreamResponse

NEWER_GYM_FIELDS: dict[str, frozenset[str]] = {
    "responses_create_params": frozenset(
        {
            "context_management",
            "conversation",
            "moderation",
            "prompt_cache_key",
            "prompt_cache_retention",
            "safety_identifier",
            "stream_options",
        }
    ),
}
HOW_TO = (
    "run the upstream on the client's nemo-gym (make gym-env NEMO_GYM_VERSION=0.7.0, then "
    "serve --gym-python .gym-env-0.7.0/bin/python; docs/gym-versions.md)"
)


def newer_fields(payload: Any) -> list[str]:
    """The refused fields of a FastAPI 422 body, as ``parent.field``, when every refusal is an
    ``extra_forbidden`` of a field a newer nemo-gym added; else [] (a genuine bad request)."""
    detail = payload.get("detail") if isinstance(payload, dict) else None
    if not isinstance(detail, list) or not detail:
        return []
    found: list[str] = []
    for item in detail:
        if not isinstance(item, dict):
            return []
        loc = item.get("loc")
        if item.get("type") != "extra_forbidden" or not isinstance(loc, list) or len(loc) < 2:
            return []
        parent, field = loc[-2], loc[-1]
        if field not in NEWER_GYM_FIELDS.get(str(parent), ()):
            return []
        found.append(f"{parent}.{field}")
    return found


def note(fields: list[str], gym_version: str | None) -> str:
    upstream = f"nemo-gym {gym_version}" if gym_version else "nemo-gym (version unknown: external upstream)"
    return (
        f"upstream {upstream} refused fields that only a newer Gym's client sends "
        f"({', '.join(fields)}): the client runs a newer nemo-gym than the upstream; {HOW_TO}"
    )


def annotate(response: UpstreamResponse, gym_version: str | None) -> Response:
    """The upstream's answer as it came, plus ``_bridge.version_skew`` for a version-skew 422."""
    if response.status_code != 422 or "json" not in (response.content_type or ""):
        return upstream_response(response)
    try:
        payload = response.json()
    except ValueError:
        return upstream_response(response)
    fields = newer_fields(payload)
    if not fields:
        return upstream_response(response)
    payload["_bridge"] = {"version_skew": note(fields, gym_version)}
    out = Response(exactjson.dumps(payload), status_code=422, media_type=response.content_type)
    return add_cookies(out, response.header_list("set-cookie"))
