export type { Agent, AgentAction, AgentStepInput } from './agent.ts';
export { ScriptedAgent, scriptedAgent } from './scriptedAgent.ts';
