# Tollgate gateway: slim, non-root, with a health check.
FROM python:3.11-slim AS build
# A C compiler: the request path is compiled with mypyc (setup.py, TOLLGATE_COMPILE=1).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY gateway ./gateway
COPY adapters ./adapters
COPY telemetry ./telemetry
COPY simulator ./simulator
# mypyc type-checks what it compiles, so it builds beside the dependencies (no isolation).
RUN pip install --no-cache-dir '.[compile]' \
    && TOLLGATE_COMPILE=1 pip wheel --no-cache-dir --no-build-isolation --wheel-dir /wheels . \
    && python -c 'import sys, zipfile, glob; names = zipfile.ZipFile(glob.glob("/wheels/tollgate-*.whl")[0]).namelist(); sys.exit(not any(n.startswith("gateway/_native__mypyc") for n in names))'

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /app tollgate
WORKDIR /app
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# The built-in config (deploy/container/tollgate.yaml): one upstream from TOLLGATE_UPSTREAM_URL,
# state, decision log and keys in /data. Mount your own and set TOLLGATE_CONFIG for more.
COPY deploy/container/tollgate.yaml /app/tollgate.yaml
COPY policies /app/policies
RUN mkdir /data && chown tollgate /data
VOLUME /data
USER tollgate
# TOLLGATE_CACHE_DIR: passed policy checks are remembered on the volume, so a restart skips them.
ENV TOLLGATE_CONFIG=/app/tollgate.yaml TOLLGATE_CACHE_DIR=/data/cache PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"
ENTRYPOINT ["tollgate"]
# --first-key: with no key yet, mint one into /data/keys.yaml and print it once (docker logs).
CMD ["serve", "--host", "0.0.0.0", "--first-key"]
