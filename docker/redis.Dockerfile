# Redis for offline machines only (no registry to pull redis:7 from): Debian's redis-server on
# the same local base image as the Argosy images. In the cloud use the official image instead
# (docker-compose.yml's default REDIS_IMAGE, or the chart's redis.image).
#   docker build -f docker/redis.Dockerfile --build-arg BASE_IMAGE=debian-py:bookworm -t argosy-redis:local docker
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools \
    && rm -rf /var/lib/apt/lists/*
USER redis
CMD ["redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
