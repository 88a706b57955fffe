export type { Agent, AgentAction, AgentMove, AgentStepInput, AgentUsage } from './agent.ts';
export { ScriptedAgent, scriptedAgent } from './scriptedAgent.ts';
export { LlmAgent, llmAgent, type LlmAgentOptions, type LlmPricing, type LlmUsage } from './llmAgent.ts';
export {
  LlmAuthenticationError,
  LlmQuotaExceededError,
  LlmRateLimitError,
  LlmRequestError,
  LlmResponseError,
  LlmServerError,
} from './llmErrors.ts';
export {
  CHAT_TOOLS,
  toChatMessages,
  toAgentAction,
  toolCallId,
  shellQuote,
  readFileCommand,
  writeFileCommand,
  type ChatMessage,
  type ChatToolCall,
  type AssistantReply,
} from './llmMessages.ts';
export { rateCommand, riskRule, HIGH_RISK_RULES, type Risk } from './riskAnalyzer.ts';
export { replayable, trajectoryActions } from './replayAgent.ts';
