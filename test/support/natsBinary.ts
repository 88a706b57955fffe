import { locateNatsServer } from '../../src/store/index.ts';

/** The nats-server the tests start, found as `tether serve` finds it (NATS_SERVER_BIN, PATH, the usual places). */
export const natsBinary = (): string =>
  locateNatsServer({ binary: process.env.NATS_SERVER_BIN || undefined, path: process.env.PATH });
