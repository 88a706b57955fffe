import { randomUUID } from 'node:crypto';
import { foldEvents } from '../../machines/index.ts';
import type { Agent } from '../agent/index.ts';
import { silentLogger, type Logger } from '../logger.ts';
import type {
  AgentState,
  ConversationInfo,
  CreateConversationBody,
  NewEvent,
  UserAction,
} from '../protocol/index.ts';
import type { RuntimeProvider } from '../runtime/index.ts';
import type { ConversationRecord, ConversationStore, EventLog, ReadPage } from '../store/index.ts';
import { ConversationFeed, type FeedListener } from './conversationFeed.ts';
import { ConversationNotFoundError } from './errors.ts';
import { Session, type SubmitResult } from './session.ts';

export interface SessionManagerDeps {
  log: EventLog;
  conversations: ConversationStore;
  runtimes: RuntimeProvider;
  /** The agent for a conversation (the scripted agent unless an LLM is configured). */
  agentFor: (conversationId: string) => Agent;
  clock?: () => Date;
  newId?: () => string;
  logger?: Logger;
  commandTimeoutMs?: number;
}

export type ConversationSummary = Pick<ConversationInfo, 'conversation_id' | 'user' | 'created_at' | 'in_memory'> & {
  /** Known while the session is in memory; null otherwise. */
  state: AgentState | null;
};

/**
 * The actor host: creates sessions, brings them back from the log on demand
 * (one load at a time per conversation), routes actions, checks ownership.
 */
export class SessionManager {
  readonly feed = new ConversationFeed();
  readonly #deps: SessionManagerDeps;
  readonly #clock: () => Date;
  readonly #logger: Logger;
  readonly #live = new Map<string, Session>();
  readonly #loading = new Map<string, Promise<Session>>();
  /** Secrets stay in memory only; they never reach the log. */
  readonly #secrets = new Map<string, Record<string, string>>();

  constructor(deps: SessionManagerDeps) {
    this.#deps = deps;
    this.#clock = deps.clock ?? (() => new Date());
    this.#logger = deps.logger ?? silentLogger;
  }

  async create(user: string, body: CreateConversationBody): Promise<{ conversation_id: string }> {
    const conversationId = this.#deps.newId?.() ?? randomUUID().replaceAll('-', '');
    this.#secrets.set(conversationId, body.secrets);
    const session = await Session.create(conversationId, this.#sessionDeps(conversationId), {
      source: 'user',
      type: 'conversation_created',
      data: {
        user,
        ...(body.initial_message !== undefined && { initial_message: body.initial_message }),
        confirmation_mode: body.confirmation_mode,
        max_iterations: body.max_iterations,
        ...(body.max_budget !== undefined && { max_budget: body.max_budget }),
        ...(body.instructions !== undefined && { instructions: body.instructions }),
        secret_names: Object.keys(body.secrets),
        replay: body.replay !== undefined,
      },
    });
    this.#live.set(conversationId, session);
    await this.#deps.conversations.put({ conversation_id: conversationId, user, created_at: this.#clock().toISOString() });
    if (body.initial_message !== undefined) {
      await session.submit({ source: 'user', type: 'message', data: { content: body.initial_message } });
    }
    return { conversation_id: conversationId };
  }

  async list(user: string): Promise<ConversationSummary[]> {
    const records = (await this.#deps.conversations.list()).filter((r) => r.user === user);
    return records
      .sort((a, b) => a.created_at.localeCompare(b.created_at))
      .map((r) => {
        const live = this.#live.get(r.conversation_id);
        return { ...r, in_memory: live !== undefined, state: live?.state ?? null };
      });
  }

  async info(conversationId: string, user: string): Promise<ConversationInfo> {
    const record = await this.#owned(conversationId, user);
    const wasLive = this.#live.has(conversationId);
    const session = await this.#load(conversationId, record);
    return {
      ...record,
      state: session.state,
      runtime_status: session.runtimeStatus,
      in_memory: wasLive,
      last_seq: session.lastSeq,
    };
  }

  async events(conversationId: string, user: string, page: { afterSeq: number; limit: number }): Promise<ReadPage> {
    await this.#owned(conversationId, user);
    return this.#deps.log.read(conversationId, page);
  }

  /** The live session of an owned conversation, loaded from its log when needed. */
  async session(conversationId: string, user: string): Promise<Session> {
    const live = this.#live.get(conversationId);
    if (live && !live.closed) {
      if (live.owner !== user) throw new ConversationNotFoundError(conversationId);
      return live;
    }
    return this.#load(conversationId, await this.#owned(conversationId, user));
  }

  async act(conversationId: string, user: string, action: UserAction, clientId?: string): Promise<SubmitResult> {
    const session = await this.session(conversationId, user);
    if (action.type === 'reconnect_runtime') {
      await session.reconnectRuntime();
      return { seq: session.lastSeq, duplicate: false };
    }
    // The log scopes msgIds to the conversation, so clients may reuse ids across conversations.
    return session.submit(proposalFor(action), clientId);
  }

  async delete(conversationId: string, user: string): Promise<void> {
    await this.#owned(conversationId, user);
    const session = this.#live.get(conversationId);
    this.#live.delete(conversationId);
    await session?.close('deleted');
    await this.#deps.log.purge(conversationId);
    await this.#deps.conversations.delete(conversationId);
    this.#secrets.delete(conversationId);
  }

  subscribe(conversationId: string, listener: FeedListener): () => void {
    return this.feed.subscribe(conversationId, listener);
  }

  get liveCount(): number {
    return this.#live.size;
  }

  async shutdown(): Promise<void> {
    const sessions = [...this.#live.values()];
    this.#live.clear();
    await Promise.allSettled(sessions.map((s) => s.close('server shutting down')));
  }

  async #owned(conversationId: string, user: string): Promise<ConversationRecord> {
    const record = await this.#deps.conversations.get(conversationId);
    if (!record || record.user !== user) throw new ConversationNotFoundError(conversationId);
    return record;
  }

  #load(conversationId: string, record: ConversationRecord): Promise<Session> {
    const live = this.#live.get(conversationId);
    if (live && !live.closed) return Promise.resolve(live);
    let loading = this.#loading.get(conversationId);
    if (!loading) {
      loading = this.#rehydrate(record).finally(() => this.#loading.delete(conversationId));
      this.#loading.set(conversationId, loading);
    }
    return loading;
  }

  async #rehydrate(record: ConversationRecord): Promise<Session> {
    const id = record.conversation_id;
    const { items } = await this.#deps.log.read(id);
    if (items.length === 0) throw new ConversationNotFoundError(id);
    const history = items.map((i) => i.event);
    const { snapshot } = foldEvents(history);
    const lastSeq = items[items.length - 1]?.seq ?? 0;
    const session = Session.restore(id, this.#sessionDeps(id), { snapshot, history, lastSeq });
    this.#live.set(id, session);
    this.#logger.info('session rehydrated', { conversation_id: id, events: items.length, state: session.state });
    return session;
  }

  #sessionDeps(conversationId: string) {
    return {
      log: this.#deps.log,
      feed: this.feed,
      agent: this.#deps.agentFor(conversationId),
      runtimes: this.#deps.runtimes,
      clock: this.#clock,
      logger: this.#logger,
      secrets: this.#secrets.get(conversationId) ?? {},
      commandTimeoutMs: this.#deps.commandTimeoutMs,
      onClosed: (session: Session) => {
        if (this.#live.get(conversationId) === session) this.#live.delete(conversationId);
      },
    };
  }
}

function proposalFor(action: Exclude<UserAction, { type: 'reconnect_runtime' }>): NewEvent {
  switch (action.type) {
    case 'message':
      return { source: 'user', type: 'message', data: { content: action.content } };
    case 'run':
      return { source: 'user', type: 'command', data: { command: action.command } };
    case 'change_agent_state':
      return { source: 'user', type: 'change_agent_state', data: { state: action.state } };
  }
}
