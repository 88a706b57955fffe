# Tether from this repository. NATS comes from docker-compose.yml (NATS_URL).
FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-fund --no-audit
COPY bin ./bin
COPY machines ./machines
COPY scripts ./scripts
COPY src ./src
COPY tsconfig.json ./
ENV TETHER_HOST=0.0.0.0 \
    TETHER_PORT=3000 \
    TETHER_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 3000
CMD ["node", "bin/tether.js", "serve"]
