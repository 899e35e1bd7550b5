# gym-mcp-bridge: the bridge and one NeMo Gym resources server (managed mode) in one image.
#
#   docker build -t gym-mcp-bridge .                       # nemo-gym 0.4.0 (Python 3.12)
#   docker build --build-arg NEMO_GYM_VERSION=0.7.0 --build-arg GYM_PYTHON_IMAGE=python:3.13-slim \
#     --build-arg NEMO_GYM_LOCK_SHA256=$(sha256sum scripts/gym-env/nemo-gym-0.7.0.lock.txt | cut -c1-64) \
#     -t gym-mcp-bridge:gym-0.7.0 .                        # nemo-gym 0.7.0 (Python 3.13 upstream)
#   docker run -d --name gmb -p 8000:8000 -v gym-mcp-bridge-state:/var/lib/gym-mcp-bridge gym-mcp-bridge
#   docker exec gmb gym-mcp-bridge show-config          # the MCP URL and the REST API key
#
# Stages: `uv` (uv from PyPI, pinned by hash), `bridge-env` (the bridge's venv from uv.lock, no dev
# group), `gym-env` (the Gym venv: nemo-gym + the resource-server import slice from a hashed lock, on
# GYM_PYTHON_IMAGE's Python), final (non-root, no compilers, both venvs, and the Gym venv's
# interpreter when it is not the base's). Each venv is built at the path it has in the final stage,
# so the absolute paths uv writes into scripts and pyvenv.cfg stay valid. Builds for two
# NEMO_GYM_VERSIONs share the `uv` and `bridge-env` stages and the runtime's first layers through the
# build cache.
# No secret is baked in: the signing key and the REST API key come from GYM_MCP_BRIDGE_SECRET_FILE /
# GYM_MCP_BRIDGE_API_KEY_FILE at run time, or are generated on first start into
# GYM_MCP_BRIDGE_STATE_DIR (/var/lib/gym-mcp-bridge: a volume keeps them).

# The base image, pinned by digest (the python:3.12-slim multi-arch index; re-resolve with
# `docker buildx imagetools inspect python:3.12-slim` when bumping). A mirror or a local stand-in:
#   docker build --build-arg PYTHON_BASE=registry.internal/python:3.12-slim .
ARG PYTHON_BASE=python:3.12-slim@sha256:78387bc3881b8273120a12ebe6c1ab22b018ccc2c9adf565ae1ac9b536e184ea
# The Gym environment's base: the same image for nemo-gym <= 0.4 (Python 3.12); nemo-gym 0.5 and
# later need Python 3.13 (declared >= 3.13.14): GYM_PYTHON_IMAGE=python:3.13-slim (pin it by digest
# the same way). The bridge keeps PYTHON_BASE's Python; the Gym venv's interpreter is copied beside it.
ARG GYM_PYTHON_IMAGE=${PYTHON_BASE}
# The sha256 of the Gym environment's lock, scripts/gym-env/nemo-gym-<NEMO_GYM_VERSION>.lock.txt: the
# image's io.nemo-gym.lock label, checked against the lock when the Gym stage is built. The default
# is the default version's lock (`make gym-lock` keeps it current); another version's build passes
# its own: --build-arg NEMO_GYM_LOCK_SHA256=$(sha256sum scripts/gym-env/nemo-gym-0.7.0.lock.txt | cut -c1-64)
ARG NEMO_GYM_LOCK_SHA256=375111f1c5ef0d6d509d27cfa727a54646ed4f7bcd1cb6755511f584f2254430

FROM ${PYTHON_BASE} AS uv
# uv pinned by hash (scripts/uv-requirements.txt: a hash for every platform's wheel; `make uv-lock
# UV_VERSION=...` bumps it), wheels only. --target keeps the uv binary at a fixed path whatever the
# interpreter's install prefix is.
COPY scripts/uv-requirements.txt /tmp/uv-requirements.txt
RUN PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    pip install --no-cache-dir --require-hashes --only-binary :all: --target /opt/uv \
      -r /tmp/uv-requirements.txt
ENV PATH=/opt/uv/bin:$PATH \
    UV_PYTHON=/usr/local/bin/python3 \
    UV_PYTHON_DOWNLOADS=never \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1 \
    UV_NO_CACHE=1

# --- the bridge's environment, from the lock file ---------------------------------------------
FROM uv AS bridge-env
ENV UV_PROJECT_ENVIRONMENT=/opt/bridge
WORKDIR /src
# Dependencies first (layer cached until uv.lock or pyproject.toml change), then the project.
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --extra container --no-install-project
COPY bridge ./bridge
RUN uv sync --frozen --no-dev --extra container --no-editable \
    && /opt/bridge/bin/gym-mcp-bridge --help >/dev/null

# --- the Gym environment the upstream runs in ---------------------------------------------------
FROM ${GYM_PYTHON_IMAGE} AS gym-env
COPY --from=uv /opt/uv /opt/uv
ENV PATH=/opt/uv/bin:$PATH \
    UV_PYTHON_DOWNLOADS=never \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1 \
    UV_NO_CACHE=1
COPY scripts/setup-gym-env.sh scripts/find-python.sh /opt/gym-setup/
ARG NEMO_GYM_VERSION=0.4.0
# The hashed lock of NEMO_GYM_VERSION alone, with its build backend's (relocking another version
# changes no layer here); the README keeps the COPY from coming up empty when there is no lock:
# setup-gym-env.sh then says how to make one. Each file is checked against the lock's hashes.
COPY scripts/gym-env/README.md scripts/gym-env/nemo-gym-${NEMO_GYM_VERSION}.lock.tx[t] \
     scripts/gym-env/nemo-gym-${NEMO_GYM_VERSION}.build.tx[t] /opt/gym-setup/gym-env/
ARG NEMO_GYM_LOCK_SHA256
# The lock must be the one NEMO_GYM_LOCK_SHA256 names: that is the image's io.nemo-gym.lock label.
# setup-gym-env.sh states how it handles the interpreter (a 3.13 older than 3.13.14 is installed
# over, and says so). The venv is made on the interpreter's real path, which the final stage keeps
# (python3 there is the bridge's).
RUN python=$(readlink -f /usr/local/bin/python3) \
    && lock="/opt/gym-setup/gym-env/nemo-gym-${NEMO_GYM_VERSION}.lock.txt" \
    && if [ -f "$lock" ] && sum=$(sha256sum "$lock") && [ "${sum%% *}" != "${NEMO_GYM_LOCK_SHA256}" ]; then \
         echo "the lock of nemo-gym ${NEMO_GYM_VERSION} (scripts/gym-env/) has sha256 ${sum%% *}, not" \
              "NEMO_GYM_LOCK_SHA256=${NEMO_GYM_LOCK_SHA256} (the io.nemo-gym.lock label): build with" \
              "--build-arg NEMO_GYM_LOCK_SHA256=${sum%% *} (docs/gym-versions.md)" >&2; exit 1; fi \
    && { NEMO_GYM_VERSION="${NEMO_GYM_VERSION}" /opt/gym-setup/setup-gym-env.sh /opt/gym-env "$python" \
         || { [ ! -f "$lock" ] || echo "nemo-gym ${NEMO_GYM_VERSION} on $python failed; nemo-gym 0.5" \
              "and later need --build-arg GYM_PYTHON_IMAGE=python:3.13-slim (docs/gym-versions.md)" >&2; \
              exit 1; }; }
COPY scripts/copy-python.sh /opt/gym-setup/
ARG PYTHON_BASE
ARG GYM_PYTHON_IMAGE
# Never an empty folder: Docker's legacy builder fails the next COPY after one that adds nothing
# ("failed to get layer ... layer does not exist"), so a one-line note of the interpreter goes in too.
RUN if [ "${GYM_PYTHON_IMAGE}" != "${PYTHON_BASE}" ]; then \
      /opt/gym-setup/copy-python.sh /opt/gym-env/bin/python /opt/gym-python; fi \
    && mkdir -p /opt/gym-python/opt \
    && /opt/gym-env/bin/python -c "import sys; print(sys.version.split()[0], sys._base_executable)" \
       > /opt/gym-python/opt/gym-env-python.txt

# --- runtime ------------------------------------------------------------------------------------
FROM ${PYTHON_BASE}
LABEL org.opencontainers.image.title="gym-mcp-bridge" \
      org.opencontainers.image.description="NeMo Gym resources server behind MCP (streamable HTTP) and Gym's HTTP contract" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 gym \
    && useradd --system --uid 10001 --gid gym --home-dir /home/gym --create-home --shell /usr/sbin/nologin gym
# The Gym venv's interpreter (nothing when it is the base's; ldconfig finds a /usr/local libpython),
# then the venv, checked to import nemo-gym on the interpreter it was built on. Before the bridge, so
# a change of the bridge's code copies its 71 MB again, not the Gym venv's 400-700 MB.
COPY --from=gym-env /opt/gym-python/ /
COPY --from=gym-env /opt/gym-env /opt/gym-env
RUN ldconfig && /opt/gym-env/bin/python -c "import nemo_gym"
COPY --from=bridge-env /opt/bridge /opt/bridge
# A stable path for the upstream boot script, for the sidecar layout (Gym in its own container):
#   /opt/gym-env/bin/python /opt/upstream_boot.py --server NAME --host 0.0.0.0 --port 9000
RUN ln -s /opt/bridge/lib/python3.12/site-packages/bridge/upstream/boot.py /opt/upstream_boot.py
# The quickstart client, for `docker compose run --rm quickstart` (it runs on the bridge's venv).
COPY examples/quickstart.py /opt/quickstart.py
# Where the keys generated on first start are kept (GYM_MCP_BRIDGE_STATE_DIR, set below, so the image
# alone requires an API key as compose does; mount a volume there to keep them). Compose keeps the API
# key apart (GYM_MCP_BRIDGE_API_KEY_DIR), in a volume its quickstart client mounts without the
# signing key. A new named volume takes its directory's owner and mode: only uid 10001 reads them.
RUN install -d -o 10001 -g 10001 -m 0700 /var/lib/gym-mcp-bridge /var/lib/gym-mcp-bridge-api
ARG NEMO_GYM_VERSION=0.4.0
ARG NEMO_GYM_LOCK_SHA256
LABEL io.nemo-gym.version="${NEMO_GYM_VERSION}" io.nemo-gym.lock="${NEMO_GYM_LOCK_SHA256}"
ENV PATH=/opt/bridge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GYM_MCP_BRIDGE_HOST=0.0.0.0 \
    GYM_MCP_BRIDGE_PORT=8000 \
    GYM_MCP_BRIDGE_GYM_PYTHON=/opt/gym-env/bin/python \
    GYM_MCP_BRIDGE_STATE_DIR=/var/lib/gym-mcp-bridge
USER 10001:10001
WORKDIR /home/gym
EXPOSE 8000
# Liveness only (/healthz answers while the upstream is still starting); readiness is /readyz.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GYM_MCP_BRIDGE_PORT', '8000') + '/healthz', timeout=4)"]
STOPSIGNAL SIGTERM
# Open files: an image cannot set its rlimits; the container gets the engine's (Docker >= 25 and
# containerd >= 2.0: soft 1024, hard 524288 from systemd; older engines: 1048576). The bridge raises
# its soft limit to the hard one at start and logs it, and the managed Gym server inherits that. Set
# both where the engine's is low: docker run --ulimit nofile=65536:65536, up to the engine's own
# hard limit (Kubernetes has no per-pod setting: docs/deployment.md, "Large runs").
# dumb-init (PyPI, hashed in uv.lock) is PID 1: it reaps orphaned processes and passes signals to
# the bridge alone (--single-child), which drains its calls and then stops its upstream itself.
ENTRYPOINT ["dumb-init", "--single-child", "--", "gym-mcp-bridge"]
CMD ["serve"]
