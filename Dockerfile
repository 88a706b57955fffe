# Tether from this repository. NATS comes from docker-compose.yml (NATS_URL).

# Build stage: the dev dependencies (TypeScript) compile protocol/, src/, machines/ and page/ to dist/.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-fund --no-audit
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY protocol ./protocol
COPY machines ./machines
COPY src ./src
COPY page ./page
RUN node scripts/build.js

# Run stage: production dependencies and the compiled JavaScript only; no compiler at run time.
FROM node:20-bookworm-slim
# git clones conversations' repositories; bubblewrap sandboxes their shells (TETHER_SANDBOX=auto uses it where
# the container may create namespaces, and warns and runs without it where it may not).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash bubblewrap ca-certificates git \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-fund --no-audit
COPY bin ./bin
COPY --from=build /app/dist ./dist
ENV TETHER_HOST=0.0.0.0 \
    TETHER_PORT=3000 \
    TETHER_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 3000
CMD ["node", "bin/tether.js", "serve"]
