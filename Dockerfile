# Berth's image: one image, every service (`berth <service> run`).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY berth ./berth
COPY schemas ./schemas
COPY services ./services
COPY migrations ./migrations
RUN pip install --no-cache-dir . && useradd --system --uid 10001 berth
USER 10001
ENTRYPOINT ["berth"]
