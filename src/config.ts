import { DEFAULT_RATE_LIMIT_RETRIES } from '../machines/index.ts';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { parseTokens } from './server/auth.ts';
import { DEFAULT_TAIL_LIMITS, parseSecretsKey, type NatsAuth } from './store/index.ts';
import { DEFAULT_MAX_ATTEMPTS, type SessionLimits } from './host/index.ts';
import { DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_FRAME_BYTES } from './tether.ts';
import { McpServersSetting, type McpServers } from './mcp/index.ts';

const port = z.coerce.number().int().min(0).max(65_535);
const positiveInt = z.coerce.number().int().min(1);

/** Every variable Tether reads, with its default. README's configuration table mirrors this. */
export const ConfigSchema = z.object({
  TETHER_HOST: z.string().min(1).default('127.0.0.1'),
  TETHER_PORT: port.default(3000),
  TETHER_DATA_DIR: z.string().min(1).default('./.tether'),
  NATS_URL: z.string().min(1).optional(),
  NATS_CREDS: z.string().min(1).optional(),
  NATS_NKEY: z.string().min(1).optional(),
  NATS_USER: z.string().min(1).optional(),
  NATS_PASSWORD: z.string().min(1).optional(),
  NATS_TOKEN: z.string().min(1).optional(),
  NATS_CA: z.string().min(1).optional(),
  NATS_CERT: z.string().min(1).optional(),
  NATS_KEY: z.string().min(1).optional(),
  TETHER_NODE_ID: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,64}$/, 'use 1-64 letters, digits, dots, dashes or underscores')
    .optional(),
  TETHER_LEASE_MS: z.coerce.number().int().min(200).default(5_000),
  TETHER_REPLICAS: z.coerce.number().int().min(1).max(5).default(1),
  TETHER_PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional(),
  TETHER_NATS_START_TIMEOUT_MS: positiveInt.default(30_000),
  TETHER_WORKSPACES_DIR: z.string().min(1).optional(),
  TETHER_SECRETS_KEY: z.string().min(1).optional(),
  NATS_SERVER_BIN: z.string().min(1).optional(),
  TETHER_MAX_FRAME_BYTES: positiveInt.default(DEFAULT_MAX_FRAME_BYTES),
  TETHER_MAX_BODY_BYTES: positiveInt.default(DEFAULT_MAX_BODY_BYTES),
  TETHER_MAX_PENDING_BYTES: positiveInt.default(8_388_608),
  TETHER_RESUME_TAIL_BYTES: z.coerce.number().int().min(0).default(DEFAULT_TAIL_LIMITS.totalBytes),
  TETHER_RESUME_TAIL_KEEP_MS: z.coerce.number().int().min(0).default(DEFAULT_TAIL_LIMITS.keepMs),
  TETHER_WS_FRAMES_PER_SECOND: positiveInt.default(100),
  TETHER_WS_FRAME_BURST: positiveInt.default(200),
  TETHER_MAX_CONNECTIONS_PER_CONVERSATION: positiveInt.default(32),
  TETHER_WS_PING_MS: positiveInt.default(30_000),
  TETHER_WS_CLOSE_TIMEOUT_MS: positiveInt.default(30_000),
  TETHER_COMMAND_TIMEOUT_MS: positiveInt.default(30_000),
  TETHER_SANDBOX: z.enum(['auto', 'bwrap', 'none'], { error: 'use auto, bwrap or none' }).default('auto'),
  TETHER_SANDBOX_NETWORK: z.enum(['on', 'none'], { error: 'use on or none' }).default('on'),
  TETHER_CLONE_TIMEOUT_MS: positiveInt.default(120_000),
  TETHER_REPO_FILE_URLS: z.enum(['allow', 'deny'], { error: 'use allow or deny' }).default('deny'),
  TETHER_MCP_SERVERS: McpServersSetting,
  TETHER_MCP_MAX_LIVE: positiveInt.default(32),
  TETHER_MCP_CALL_TIMEOUT_MS: positiveInt.default(60_000),
  TETHER_CONFIRM_UNKNOWN: z
    .enum(['true', 'false'], { error: 'use true or false' })
    .default('true')
    .transform((v) => v === 'true'),
  TETHER_OUTPUT_CAP_BYTES: positiveInt.default(65_536),
  TETHER_CLOSE_DELAY_MS: positiveInt.default(120_000),
  TETHER_IDLE_MS: positiveInt.default(900_000),
  TETHER_MAX_LIVE: positiveInt.default(10_000),
  TETHER_MAX_RUNNING_PER_USER: positiveInt.default(3),
  TETHER_START_TIMEOUT_MS: positiveInt.default(60_000),
  TETHER_RATE_LIMIT_RETRIES: z.coerce.number().int().min(0).default(DEFAULT_RATE_LIMIT_RETRIES),
  TETHER_MAX_ATTEMPTS: positiveInt.default(DEFAULT_MAX_ATTEMPTS),
  TETHER_SNAPSHOT_EVERY: positiveInt.default(200),
  TETHER_CHECKPOINT_EVERY: positiveInt.default(100),
  TETHER_REHYDRATE_CONCURRENCY: positiveInt.default(8),
  TETHER_LLM_BASE_URL: z.url().optional(),
  TETHER_LLM_MODEL: z.string().min(1).default('gpt-4o-mini'),
  TETHER_LLM_API_KEY: z.string().min(1).optional(),
  TETHER_LLM_PRICE_PROMPT: z.coerce.number().min(0).default(0),
  TETHER_LLM_PRICE_COMPLETION: z.coerce.number().min(0).default(0),
  TETHER_LLM_STREAM: z
    .enum(['true', 'false'], { error: 'use true or false' })
    .default('true')
    .transform((v) => v === 'true'),
  TETHER_AGENT_DELAY_MS: z.coerce.number().int().min(0).default(0),
  TETHER_AGENT_DELTA_MS: z.coerce.number().int().min(0).default(0),
  TETHER_TOKENS: z.string().optional(),
  TETHER_JWT_SECRET: z.string().min(32, 'use a secret of at least 32 characters').optional(),
  TETHER_LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),
});

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  natsUrl: string | undefined;
  /** This node's name in the cluster; undefined: the one kept in the data dir, generated the first time. */
  nodeId: string | undefined;
  leaseMs: number;
  /** Replicas of the event stream and of every bucket (JetStream allows 1 to 5). */
  replicas: number;
  /** How other nodes and `GET /api/cluster` name this node; undefined: from the host and port it listens on. */
  publicUrl: string | undefined;
  /** How long a start waits for JetStream to answer (a cluster still electing its leaders). */
  natsStartTimeoutMs: number;
  workspacesDir: string;
  /** The key conversation secrets are sealed with (AES-256-GCM), or undefined. */
  secretsKey: Buffer | undefined;
  /** The embedded nats-server's binary; undefined: found on PATH or in the usual places. */
  natsServerBin: string | undefined;
  maxFrameBytes: number;
  maxBodyBytes: number;
  maxPendingBytes: number;
  ws: {
    framesPerSecond: number;
    frameBurst: number;
    maxConnectionsPerConversation: number;
    pingIntervalMs: number;
    closeTimeoutMs: number;
  };
  commandTimeoutMs: number;
  /** How shells are confined: `auto` is bwrap when it can run here, else none (with a warning). */
  sandbox: { mode: 'auto' | 'bwrap' | 'none'; network: boolean };
  /** How long a repository's clone may take; added to the start deadline of a conversation that has one. */
  cloneTimeoutMs: number;
  /** `file:` repository URLs are accepted even with tokens (users other than the operator). */
  repoFileUrls: boolean;
  /** How this process proves who it is to NATS (credentials beyond the URL, TLS files). */
  natsAuth: NatsAuth;
  /** The MCP servers each conversation runs on its owner, how many may run on the node, and a call's timeout. */
  mcp: { servers: McpServers; maxLive: number; callTimeoutMs: number };
  /** A call the model did not rate (UNKNOWN) waits in confirmation mode. */
  confirmUnknown: boolean;
  outputCapBytes: number;
  /** What each node keeps in memory of the conversations it follows, to serve a resume (0 bytes: nothing). */
  resumeTail: { totalBytes: number; keepMs: number };
  logLevel: z.infer<typeof ConfigSchema>['TETHER_LOG_LEVEL'];
  limits: SessionLimits;
  agentDelayMs: number;
  /** The scripted agent streams its replies a few words per delta, this far apart (0: no deltas). */
  agentDeltaMs: number;
  /** token → user; empty with no TETHER_TOKENS. */
  tokens: Map<string, string>;
  jwtSecret: string | undefined;
  /** Set when an OpenAI-compatible endpoint is configured; the scripted agent answers otherwise. */
  llm: {
    baseUrl: string;
    model: string;
    apiKey: string;
    pricing: { promptUsdPerMillion: number; completionUsdPerMillion: number };
    /** Stream replies (`stream: true`), forwarding each delta to clients as it comes. */
    stream: boolean;
  } | null;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Parses the environment; throws ConfigError naming every bad variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = ConfigSchema.safeParse(present);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  const c = parsed.data;
  if (c.TETHER_REPLICAS > 1 && c.NATS_URL === undefined) {
    throw new ConfigError(
      `invalid configuration:\n  TETHER_REPLICAS: ${c.TETHER_REPLICAS} replicas need a NATS cluster of at least that many servers in NATS_URL; the embedded nats-server (NATS_URL unset) is one server: use 1`,
    );
  }
  return {
    host: c.TETHER_HOST,
    port: c.TETHER_PORT,
    dataDir: resolve(c.TETHER_DATA_DIR),
    natsUrl: c.NATS_URL,
    natsAuth: natsAuthOf(c),
    nodeId: c.TETHER_NODE_ID,
    leaseMs: c.TETHER_LEASE_MS,
    replicas: c.TETHER_REPLICAS,
    publicUrl: c.TETHER_PUBLIC_URL?.replace(/\/+$/, ''),
    natsStartTimeoutMs: c.TETHER_NATS_START_TIMEOUT_MS,
    secretsKey: parseKeyOrThrow(c.TETHER_SECRETS_KEY),
    workspacesDir: resolve(c.TETHER_WORKSPACES_DIR ?? join(c.TETHER_DATA_DIR, 'workspaces')),
    natsServerBin: c.NATS_SERVER_BIN,
    maxFrameBytes: c.TETHER_MAX_FRAME_BYTES,
    maxBodyBytes: c.TETHER_MAX_BODY_BYTES,
    maxPendingBytes: c.TETHER_MAX_PENDING_BYTES,
    ws: {
      framesPerSecond: c.TETHER_WS_FRAMES_PER_SECOND,
      frameBurst: c.TETHER_WS_FRAME_BURST,
      maxConnectionsPerConversation: c.TETHER_MAX_CONNECTIONS_PER_CONVERSATION,
      pingIntervalMs: c.TETHER_WS_PING_MS,
      closeTimeoutMs: c.TETHER_WS_CLOSE_TIMEOUT_MS,
    },
    commandTimeoutMs: c.TETHER_COMMAND_TIMEOUT_MS,
    sandbox: { mode: c.TETHER_SANDBOX, network: c.TETHER_SANDBOX_NETWORK === 'on' },
    cloneTimeoutMs: c.TETHER_CLONE_TIMEOUT_MS,
    repoFileUrls: c.TETHER_REPO_FILE_URLS === 'allow',
    mcp: {
      servers: c.TETHER_MCP_SERVERS,
      maxLive: c.TETHER_MCP_MAX_LIVE,
      callTimeoutMs: c.TETHER_MCP_CALL_TIMEOUT_MS,
    },
    confirmUnknown: c.TETHER_CONFIRM_UNKNOWN,
    outputCapBytes: c.TETHER_OUTPUT_CAP_BYTES,
    resumeTail: { totalBytes: c.TETHER_RESUME_TAIL_BYTES, keepMs: c.TETHER_RESUME_TAIL_KEEP_MS },
    logLevel: c.TETHER_LOG_LEVEL,
    agentDelayMs: c.TETHER_AGENT_DELAY_MS,
    agentDeltaMs: c.TETHER_AGENT_DELTA_MS,
    tokens: parseTokensOrThrow(c.TETHER_TOKENS),
    jwtSecret: c.TETHER_JWT_SECRET,
    llm:
      c.TETHER_LLM_BASE_URL === undefined
        ? null
        : {
            baseUrl: c.TETHER_LLM_BASE_URL,
            model: c.TETHER_LLM_MODEL,
            apiKey: c.TETHER_LLM_API_KEY ?? '',
            pricing: {
              promptUsdPerMillion: c.TETHER_LLM_PRICE_PROMPT,
              completionUsdPerMillion: c.TETHER_LLM_PRICE_COMPLETION,
            },
            stream: c.TETHER_LLM_STREAM,
          },
    limits: {
      closeDelayMs: c.TETHER_CLOSE_DELAY_MS,
      idleMs: c.TETHER_IDLE_MS,
      maxLive: c.TETHER_MAX_LIVE,
      maxRunningPerUser: c.TETHER_MAX_RUNNING_PER_USER,
      startTimeoutMs: c.TETHER_START_TIMEOUT_MS,
      cloneTimeoutMs: c.TETHER_CLONE_TIMEOUT_MS,
      rateLimitRetries: c.TETHER_RATE_LIMIT_RETRIES,
      maxAttempts: c.TETHER_MAX_ATTEMPTS,
      snapshotEvery: c.TETHER_SNAPSHOT_EVERY,
      checkpointEvery: c.TETHER_CHECKPOINT_EVERY,
      rehydrateConcurrency: c.TETHER_REHYDRATE_CONCURRENCY,
    },
  };
}

/** NATS credentials from their variables: one kind at most, a password only with a user, a certificate with its key. */
function natsAuthOf(c: z.infer<typeof ConfigSchema>): NatsAuth {
  const kinds = (['NATS_CREDS', 'NATS_NKEY', 'NATS_USER', 'NATS_TOKEN'] as const).filter((k) => c[k] !== undefined);
  const problems: string[] = [];
  if (kinds.length > 1) problems.push(`${kinds.join(', ')}: set one kind of NATS credential, not ${kinds.length}`);
  if (c.NATS_PASSWORD !== undefined && c.NATS_USER === undefined) problems.push('NATS_PASSWORD: set NATS_USER with it');
  if ((c.NATS_CERT === undefined) !== (c.NATS_KEY === undefined))
    problems.push('NATS_CERT, NATS_KEY: set both or neither');
  if (problems.length > 0) throw new ConfigError(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  const tls = { caFile: c.NATS_CA, certFile: c.NATS_CERT, keyFile: c.NATS_KEY };
  return {
    ...(c.NATS_CREDS !== undefined && { credsFile: c.NATS_CREDS }),
    ...(c.NATS_NKEY !== undefined && { nkeyFile: c.NATS_NKEY }),
    ...(c.NATS_USER !== undefined && { user: c.NATS_USER, password: c.NATS_PASSWORD }),
    ...(c.NATS_TOKEN !== undefined && { token: c.NATS_TOKEN }),
    ...(Object.values(tls).some((v) => v !== undefined) && { tls }),
  };
}

function parseKeyOrThrow(text: string | undefined): Buffer | undefined {
  if (text === undefined) return undefined;
  try {
    return parseSecretsKey(text);
  } catch (err) {
    throw new ConfigError(`invalid configuration:\n  TETHER_SECRETS_KEY: ${(err as Error).message}`);
  }
}

function parseTokensOrThrow(spec: string | undefined): Map<string, string> {
  try {
    return parseTokens(spec);
  } catch (err) {
    throw new ConfigError(`invalid configuration:\n  ${(err as Error).message}`);
  }
}
