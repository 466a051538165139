# loadgen in a container: `docker build -t loadgen .` then
#   docker run --rm loadgen run quickstart                      (the built-in simulator)
#   docker run --rm -e OPENAI_API_KEY -v "$PWD/reports:/reports" loadgen \
#       run chat --url http://vllm:8000 --out /reports
# A slim Python base, loadgen and its shipped profiles installed into a virtual environment in a
# build stage, run as a non-root user. Checked in CI: built when a container builder is on the
# machine, otherwise linted with hadolint (tests/unit/test_deploy_files.py).
FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m venv /opt/loadgen
COPY pyproject.toml README.md ./
COPY loadgen ./loadgen
COPY profiles ./profiles
COPY experiments ./experiments
COPY data ./data
COPY traces ./traces
# EXTRAS: optional extras, e.g. --build-arg EXTRAS=ray for --ray (examples/kubernetes/ray-job.yaml)
ARG EXTRAS=""
RUN /opt/loadgen/bin/pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}"

FROM python:3.11-slim
LABEL org.opencontainers.image.title="loadgen" \
      org.opencontainers.image.description="Load-testing and benchmarking for LLM inference servers"
RUN useradd --create-home --uid 10001 loadgen && mkdir /reports && chown loadgen /reports
COPY --from=build /opt/loadgen /opt/loadgen
ENV PATH=/opt/loadgen/bin:$PATH \
    PYTHONUNBUFFERED=1
USER 10001
WORKDIR /reports
ENTRYPOINT ["loadgen"]
CMD ["run", "quickstart", "--out", "/reports"]
