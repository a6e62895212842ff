# Tollgate gateway: slim, non-root, with a health check.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY adapters ./adapters
COPY telemetry ./telemetry
COPY simulator ./simulator
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

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
