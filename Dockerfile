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
# The `berth` user and group, uid and gid 10001: what the Helm chart runs as (podSecurityContext).
RUN pip install --no-cache-dir . && groupadd --system --gid 10001 berth \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin berth

FROM installed AS dev
COPY dev ./dev
RUN pip install --no-cache-dir --no-deps ./dev
USER 10001:10001
ENTRYPOINT ["berth"]

FROM installed AS product
USER 10001:10001
ENTRYPOINT ["berth"]
