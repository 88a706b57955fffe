import { agentStateOf, decide, type DecisionInput, type SessionSnapshot } from '../../machines/index.ts';
import type { AgentState, EventOf, StoredEvent } from '../../protocol/index.ts';

type CreatedData = Omit<EventOf<'conversation_created'>['data'], 'machine_version'>;

/**
 * A conversation driven through the decider alone, as a session does: its log
 * and where it stands (one second between decisions). Pure: no I/O.
 */
export class DecidedConversation {
  events: StoredEvent[] = [];
  snapshot!: SessionSnapshot;

  /** Created as `c1` of user `u` (10 iterations, no confirmation), with `data` over that. */
  constructor(data: Partial<CreatedData> = {}) {
    const base = { user: 'u', confirmation_mode: false, max_iterations: 10, secret_names: [], replay: false };
    this.decide({ type: 'create', conversationId: 'c1', data: { ...base, ...data } });
  }

  /** Stores what the decider says (throws on a refusal); returns the new events. */
  decide(input: DecisionInput): StoredEvent[] {
    const decision = this.tryDecide(input);
    if (!decision.ok) throw new Error(`refused: ${decision.reason}`);
    return decision.events;
  }

  tryDecide(input: DecisionInput) {
    const now = new Date(Date.UTC(2026, 0, 1) + this.events.length * 1000);
    const decision = decide(this.snapshot, input, { conversationId: 'c1', nextEventId: this.events.length, now });
    if (decision.ok) {
      this.events.push(...decision.events);
      this.snapshot = decision.snapshot;
    }
    return decision;
  }

  get state(): AgentState {
    return agentStateOf(this.snapshot);
  }
}
