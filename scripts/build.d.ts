// Types for build.js, which stays plain JavaScript so that npm scripts run it without tsx or a build.

/** dist/.built: written last by a successful build. */
export declare const STAMP: string;

/** Why dist/ must be built, or null when it is up to date with protocol/, src/, machines/ and the configs. */
export declare function staleReason(): string | null;

/** Builds dist/ from scratch with tsc; throws with tsc's output when it fails. */
export declare function build(options?: { log?: (line: string) => void }): void;

/** Builds when dist/ is stale, saying why; returns whether it built. */
export declare function buildIfStale(options?: { log?: (line: string) => void }): boolean;
