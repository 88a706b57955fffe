// Types for nats-binary.js, which stays plain JavaScript so npm scripts can run it without tsx.

export declare const HOW_TO_INSTALL: string;

/** The nats-server path: NATS_SERVER_BIN, then PATH, then the usual install places; null when absent. */
export declare function findNatsServer(env?: NodeJS.ProcessEnv): string | null;

/** Returns the nats-server path, installing Debian's package first when root; throws HOW_TO_INSTALL otherwise. */
export declare function ensureNatsServer(options?: {
  log?: (line: string) => void;
  env?: NodeJS.ProcessEnv;
}): Promise<string>;
