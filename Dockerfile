# Berth's image: one image, every service (`berth <service> run`). The default (last) stage is the
# product alone; the `dev` stage adds the development tooling (berth-dev: the cluster simulator
# and the binder's backend for it), which docker-compose.yml's simulated cluster runs on.
FROM python:3.11-slim AS installed
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY berth ./berth
COPY schemas ./schemas
COPY services ./services
COPY migrations ./migrations
RUN pip install --no-cache-dir . && useradd --system --uid 10001 berth

FROM installed AS dev
COPY dev ./dev
RUN pip install --no-cache-dir --no-deps ./dev
USER 10001
ENTRYPOINT ["berth"]

FROM installed AS product
USER 10001
ENTRYPOINT ["berth"]
