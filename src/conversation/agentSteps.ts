import { setTimeout as delay } from 'node:timers/promises';
import type { DecisionInput } from '../../machines/index.ts';
import type { DeltaFrame, StatusFrame } from '../../protocol/index.ts';
import { LlmAuthenticationError, LlmRateLimitError, LlmServerError, type AgentAction } from '../agent/index.ts';
import { TetherError } from '../errors.ts';
import { errorFields } from '../logger.ts';
import { DeltaStream } from './deltaStream.ts';
import { answerOf, STATUS } from './effectResults.ts';
import type { EffectDeps, EffectHost } from './effectRunner.ts';

/**
 * The agent steps of one session: each attempt asks the agent, streams its
 * deltas to every node and hands its answer, or its failure, to the decider.
 * The current attempt's deltas are kept until the next attempt begins, so any
 * node can catch a client up.
 */
export class AgentSteps {
  readonly #host: EffectHost;
  readonly #deps: EffectDeps;
  /** Secret values, longest first, masked in the deltas as they stream. */
  readonly #secrets: readonly string[];
  #stream: DeltaStream | null = null;

  constructor(host: EffectHost, deps: EffectDeps) {
    this.#host = host;
    this.#deps = deps;
    this.#secrets = [...new Set(Object.values(deps.secrets))]
      .filter((v) => v.length > 0)
      .sort((a, b) => b.length - a.length);
  }

  /** The current attempt's deltas from index 0, or null. */
  currentDeltas(): readonly DeltaFrame[] | null {
    return this.#stream?.frames ?? null;
  }

  /**
   * Holds the current attempt's deltas unless it is attempt `attempt` of step
   * `cause` (the one a decided state waits for); returns the stream held, to be
   * closed once the decision is stored, or released if it stored nothing.
   */
  holdUnless(cause: number | null, attempt: number): DeltaStream | null {
    const stream = this.#stream;
    if (!stream || (stream.itemId === String(cause) && stream.attempt === attempt)) return null;
    stream.hold();
    return stream;
  }

  /**
   * Attempt `attempt` of the agent step answering event `cause`; its deltas go
   * to every node as they come (the lease checked first), its answer (or its
   * failure) to the decider. A failing server or a cut stream is tried again
   * as the next attempt, after a wait that doubles each attempt. `signal`
   * aborts the step (the LLM request is cancelled) once the state no longer
   * asks for it; what its call used is still stored when the agent reported it.
   */
  async ask(cause: number, attempt: number, signal: AbortSignal): Promise<string> {
    const stream = (this.#stream = new DeltaStream(String(cause), attempt, this.#secrets, (frame) =>
      this.#publishDelta(frame),
    ));
    let action: AgentAction;
    try {
      const context = await this.#host.agentContext();
      action = await context.step({ signal, onDelta: (text) => stream.push(text) });
      stream.end();
    } catch (err) {
      if (signal.aborted) return 'aborted';
      if (err instanceof LlmServerError) return this.#retry(err, cause, attempt, signal);
      await this.#host.decide(this.#failure(err, cause));
      return 'agent_error';
    }
    // Stored in any active state: an answer that came as the step was cut still cost what it cost.
    if (action.usage) await this.#host.decide({ type: 'agent_used', usage: action.usage });
    if (signal.aborted) return 'aborted';
    const answer = answerOf(action);
    const confirmUnknown = this.#deps.confirmUnknown ?? true;
    await this.#host.decide({ type: 'agent_answered', cause, answer, attempt, deltas: stream.count, confirmUnknown });
    return answer.type === 'calls' ? `${answer.calls.length} call(s)` : answer.type;
  }

  #publishDelta(frame: DeltaFrame): void {
    // A node whose lease may have lapsed says nothing more: another node may run the step now.
    if (this.#deps.leaseValid?.() === false) return;
    this.#deps.deltas?.publish(this.#host.conversationId, { frame, json: JSON.stringify(frame) });
  }

  /** The step's next attempt, once the wait is over (the decider stores it, or the error past the bound). */
  async #retry(err: LlmServerError, cause: number, attempt: number, signal: AbortSignal): Promise<string> {
    try {
      await delay((this.#deps.retryBaseMs ?? 500) * 2 ** (attempt - 1), undefined, { signal });
    } catch {
      return 'aborted';
    }
    const message = `the agent failed: ${errorFields(err).error}`;
    await this.#host.decide({ type: 'agent_retry', cause, attempt, reason: err.reason, code: err.code, message });
    return `attempt ${attempt + 1}`;
  }

  /**
   * A failed step. A rate limit carries when to try again (the machine waits
   * in rate_limited, then retries, up to its limit); a bad key tells the
   * clients; anything else puts the agent in error with the reason.
   */
  #failure(err: unknown, cause: number): DecisionInput {
    const code = err instanceof TetherError ? err.code : 'AGENT_FAILED';
    const message = `the agent failed: ${errorFields(err).error}`;
    if (err instanceof LlmRateLimitError) {
      const retryAt = new Date(this.#deps.clock().getTime() + err.retryAfterMs).toISOString();
      this.#status(STATUS.rateLimited);
      return { type: 'agent_failed', cause, code, message, retryAt };
    }
    if (err instanceof LlmAuthenticationError) this.#status(STATUS.llmAuthentication);
    return { type: 'agent_failed', cause, code, message };
  }

  #status(frame: Omit<StatusFrame, 'type'>): void {
    this.#deps.status.publish(this.#host.conversationId, { type: 'status', ...frame });
  }
}
