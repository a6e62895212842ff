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
COPY --chown=tollgate tollgate.yaml /app/tollgate.yaml
COPY --chown=tollgate policies /app/policies
USER tollgate
ENV TOLLGATE_CONFIG=/app/tollgate.yaml PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"
ENTRYPOINT ["tollgate"]
CMD ["serve", "--host", "0.0.0.0"]
