export type { Agent, AgentAction, AgentContext, AgentMove, AgentStepInput, AgentUsage } from './agent.ts';
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
  toAgentAction,
  shellQuote,
  readFileCommand,
  writeFileCommand,
  type ChatMessage,
  type ChatToolCall,
  type AssistantReply,
} from './llmMessages.ts';
export { ChatTranscript, toChatMessages, toolCallId, type ChatMessageOptions } from './chatTranscript.ts';
export { rateCommand, riskRule, HIGH_RISK_RULES, type Risk } from './riskAnalyzer.ts';
export { replayable, trajectoryActions } from './replayAgent.ts';
