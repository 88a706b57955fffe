export type {
  Agent,
  AgentAction,
  AgentContext,
  AgentMove,
  AgentStepInput,
  AgentToolCall,
  AgentUsage,
} from './agent.ts';
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
  chatTools,
  mcpToolName,
  toAgentAction,
  type ChatMessage,
  type ChatToolCall,
  type AssistantReply,
  type ListedServers,
} from './llmMessages.ts';
export { ChatTranscript, toChatMessages, toolCallId, type ChatMessageOptions } from './chatTranscript.ts';
export { rateCommand, rateCall, riskRule, HIGH_RISK_RULES, type CallRating, type Risk } from './riskAnalyzer.ts';
export { replayable, trajectoryActions } from './replayAgent.ts';
