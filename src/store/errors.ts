import { TetherError } from '../errors.ts';

/** Another writer appended to the conversation: the expected last sequence did not hold. */
export class VersionConflictError extends TetherError {
  readonly conversationId: string;
  readonly expectedLastSeq: number;
  constructor(conversationId: string, expectedLastSeq: number, options?: { cause?: unknown }) {
    super(
      'VERSION_CONFLICT',
      `conversation ${conversationId} moved past sequence ${expectedLastSeq}: another writer exists`,
      options,
    );
    this.conversationId = conversationId;
    this.expectedLastSeq = expectedLastSeq;
  }
}

/**
 * The store could not be reached or did not answer in time. A write may or may
 * not have been stored (the acknowledgement can be what was lost): retry it with
 * the same msgId to store it exactly once.
 */
export class StoreUnavailableError extends TetherError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('STORE_UNAVAILABLE', message, options);
  }
}

/**
 * Stored secrets could not be opened: the key is not the one that sealed them
 * (every node must share `TETHER_SECRETS_KEY`), the bytes were altered, or the
 * value was sealed for another conversation. The message never carries any
 * part of the secrets.
 */
export class SecretsUnsealError extends TetherError {
  readonly conversationId: string;
  constructor(conversationId: string, reason: string, options?: { cause?: unknown }) {
    super('SECRETS_UNSEALABLE', `cannot unseal the secrets of conversation ${conversationId}: ${reason}`, options);
    this.conversationId = conversationId;
  }
}

/**
 * A stream or bucket's settings differ from the configuration and NATS refused
 * to change them (more replicas than servers, replicas on a single server).
 * `setting` says which: the edge names the variable behind it.
 */
export class StoreSettingsError extends TetherError {
  readonly stream: string;
  readonly setting: 'replicas' | 'ttl';
  /** True when it may pass by itself at start (other nodes' heartbeats age out). */
  waitable = false;
  constructor(
    stream: string,
    setting: 'replicas' | 'ttl',
    have: string,
    wanted: string,
    reason: string,
    options?: { cause?: unknown },
  ) {
    super('STORE_SETTINGS', `${stream}: ${setting} ${have}, configured ${wanted}; ${reason}`, options);
    this.stream = stream;
    this.setting = setting;
  }
}
